#!/usr/bin/env bash
# docs/speed.md, "GPUs": transformer_big (Table 3 "big") in fp16 against fairseq's built-in on one
# GPU: training on random and on sorted batches of 256 and of 1024 sentences, beam-4 generation,
# then CTranslate2's float16 and int8_float16 generation if its CUDA build runs there. Each measurement is a separate process with
# its own time limit, so one that fails leaves the others' tables; every table and JSON goes to OUT.
#
#   bash scripts/gpu_bundle.sh                  # here, once: .gpu_bundle/ and .gpu_bundle_ct2/
#   bash scripts/gpu_benchmark.sh OUT           # there (carry .gpu_bundle and .gpu_bundle_ct2)
#
# On a GPU machine where `bash scripts/install.sh` ran (fairseq and ctranslate2 installed), the
# bundles are not needed. LIMIT (seconds, default 200) bounds each measurement.
set -uo pipefail
out="${1:?usage: bash scripts/gpu_benchmark.sh OUT_FOLDER}"
mkdir -p "$out"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONUNBUFFERED=1
[ -d .gpu_bundle/site ] && export PYTHONPATH="$PWD/.gpu_bundle/site:$PWD"
ct2_site=""
if ls .gpu_bundle_ct2/ctranslate2-*.whl >/dev/null 2>&1; then  # kept apart: only the last run needs it
  ct2_site=/tmp/gpu_benchmark_ct2 && rm -rf "$ct2_site" && python3 -m zipfile -e .gpu_bundle_ct2/ctranslate2-*.whl "$ct2_site"
fi
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, torch.cuda.get_device_name())"
  git log -1 --format='commit %h %cd' 2>/dev/null; } 2>&1 | tee "$out/machine.txt"
measure() {  # measure NAME ARGS...: one benchmark run, its table on stdout and in OUT/NAME.log
  local name=$1; shift
  echo "== $name: scripts/benchmark.py --preset big --device cuda --amp $*"
  timeout "${LIMIT:-200}" python3 scripts/benchmark.py --preset big --device cuda --amp "$@" --out "$out/$name.json" \
    >"$out/$name.log" 2>&1
  echo "rc $?"; grep -v -i -E "warning|_canonical_mask|tensorboardX|^\[benchmark\]" "$out/$name.log" | tail -n 25
}
measure big_random --updates 20 --no-ctranslate2
measure big_sorted --updates 20 --batching sorted --no-ctranslate2
measure big_random_bs1024 --parts training --updates 10 --batch-size 1024 --no-ctranslate2  # ~20k tokens a step
measure big_sorted_bs1024 --parts training --updates 10 --batch-size 1024 --batching sorted --no-ctranslate2
if [ -n "$ct2_site" ]; then
  PYTHONPATH="${PYTHONPATH:-}:$ct2_site" LIMIT=150 measure big_ct2 --parts generation --repeats 2
fi
