#!/usr/bin/env bash
# docs/speed.md, "GPUs": transformer_big (Table 3 "big") in fp16 against fairseq's built-in on one
# GPU: training on random, sorted and fresh batches (256 and 1024 sentences), beam-4 generation,
# then CTranslate2's float16 and int8_float16 generation if its CUDA build runs there. Each
# measurement is a separate process with its own time limit, so one that fails leaves the others'
# tables; every table, log and JSON goes to OUT. Exits 1 if any measurement failed.
#
#   bash benchmarks/gpu_bundle.sh                  # here, once: .gpu_bundle/ and .gpu_bundle_ct2/
#   bash benchmarks/gpu_benchmark.sh OUT           # there (carry .gpu_bundle and .gpu_bundle_ct2)
#
# With DATA_BIN set to a translation data-bin (e.g. the quickstart's work/quickstart/data-bin, copied
# into an ignored folder of the repo and carried), it first runs the real CLIs there: fairseq-train
# --fp16 of transformer_big, ours and the built-in (transformer_vaswani_wmt_en_de_big) with each one's
# recipe, UPDATES (200) updates of --max-tokens 8192, then fairseq-generate --fp16 with ours's
# checkpoint and with the built-in's (each one's own weights, so their output lengths differ: compare
# tokens/s); words/s from fairseq's own train_inner lines.
# ROWS (default: all) names the benchmark rows to run, e.g. ROWS="big_random big_fresh"; ROWS=none
# runs none (the CLI rows alone, with DATA_BIN).
# On a GPU machine where `bash scripts/install.sh` ran (fairseq and ctranslate2 installed), the
# bundles are not needed. LIMIT (seconds, default 200) bounds each measurement.
set -uo pipefail
out="${1:?usage: bash benchmarks/gpu_benchmark.sh OUT_FOLDER}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONUNBUFFERED=1
[ -d .gpu_bundle/site ] && export PYTHONPATH="$PWD/.gpu_bundle/site:$PWD"
if ! python3 -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  echo "error: python3 here has no torch with a usable CUDA GPU: run this on the GPU machine" \
       "(on a CPU: python benchmarks/benchmark.py --preset cpu, docs/speed.md)" >&2
  exit 1
fi
mkdir -p "$out"
failed=0
step() {  # step NAME COMMAND...: COMMAND with the time limit, its output in OUT/NAME.log; counts a failure
  local name=$1; shift
  timeout "${LIMIT:-200}" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  [ "$rc" = 0 ] || failed=$((failed + 1))
  echo "rc $rc"
}
measure() {  # measure NAME ARGS...: one benchmark run; its table on stdout (skipped unless ROWS names it)
  local name=$1; shift
  [ "${ROWS:-all}" = all ] || [[ " $ROWS " == *" $name "* ]] || return 0
  echo "== $name: benchmarks/benchmark.py --preset big --device cuda --amp $*"
  step "$name" python3 benchmarks/benchmark.py --preset big --device cuda --amp "$@" --out "$out/$name.json"
  grep -v -i -E "warning|_canonical_mask|tensorboardX|^\[benchmark\]" "$out/$name.log" | tail -n 25
}
ct2_site=""
if ls .gpu_bundle_ct2/ctranslate2-*.whl >/dev/null 2>&1; then  # kept apart: only the last run needs it
  ct2_site=/tmp/gpu_benchmark_ct2 && rm -rf "$ct2_site" && python3 -m zipfile -e .gpu_bundle_ct2/ctranslate2-*.whl "$ct2_site"
fi
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, torch.cuda.get_device_name())"
  git log -1 --format='commit %h %cd' 2>/dev/null; } 2>&1 | tee "$out/machine.txt"

if [ -n "${DATA_BIN:-}" ]; then
  cli=("$DATA_BIN" --max-tokens 8192 --max-update "${UPDATES:-200}" --fp16 --log-format simple --log-interval 25 --seed 1
       --disable-validation --num-workers 0 --no-epoch-checkpoints)
  echo "== fairseq-train --user-dir attn_only_plugin --arch transformer_big --fp16"
  step train_ours python3 -m fairseq_cli.train "${cli[@]}" --user-dir attn_only_plugin --arch transformer_big \
    --criterion paper_label_smoothed_ce --label-smoothing 0.1 --optimizer paper_adam --lr-scheduler noam \
    --warmup-updates 4000 --save-dir /tmp/gpu_benchmark_ours
  grep -E "train_inner|done training|rror" "$out/train_ours.log" | cut -c 1-200
  echo "== fairseq-train --arch transformer_vaswani_wmt_en_de_big --fp16 (the built-in)"
  step train_builtin python3 -m fairseq_cli.train "${cli[@]}" --arch transformer_vaswani_wmt_en_de_big \
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --optimizer adam --adam-betas "(0.9, 0.98)" \
    --adam-eps 1e-9 --lr 0.0005 --lr-scheduler inverse_sqrt --warmup-updates 4000 --save-dir /tmp/gpu_benchmark_builtin
  grep -E "train_inner|done training|rror" "$out/train_builtin.log" | cut -c 1-200
  for model in ours builtin; do
    echo "== fairseq-generate --fp16 --beam 4 --lenpen 0.6 ($model's checkpoint)"
    step "generate_$model" python3 -m fairseq_cli.generate "$DATA_BIN" --user-dir attn_only_plugin --gen-subset test \
      --path "/tmp/gpu_benchmark_$model/checkpoint_last.pt" --beam 4 --lenpen 0.6 --max-len-a 1 --max-len-b 50 \
      --batch-size 128 --fp16
    grep -E "Translated|rror" "$out/generate_$model.log"
  done
fi
measure big_random --updates 20 --no-ctranslate2
measure big_sorted --updates 20 --batching sorted --no-ctranslate2
measure big_fresh --updates 10 --batching fresh --parts training  # every step a new shape: fairseq-train's first epoch
measure big_fresh_cudnn --updates 10 --batching fresh --parts training --sdpa-backends cudnn math  # both on cuDNN's kernel (docs/speed.md, "GPUs")
measure big_random_bs1024 --parts training --updates 10 --batch-size 1024 --no-ctranslate2  # ~20k tokens a step
measure big_sorted_bs1024 --parts training --updates 10 --batch-size 1024 --batching sorted --no-ctranslate2
if [ -n "$ct2_site" ]; then
  PYTHONPATH="${PYTHONPATH:-}:$ct2_site" LIMIT=150 measure big_ct2 --parts generation --repeats 2
fi
if [ "$failed" != 0 ]; then
  echo "error: $failed of the measurements failed: see their logs in $out" >&2
  exit 1
fi
