#!/usr/bin/env bash
# Beam search stopping rules on a task whose answer is known: digit strings reversed, a small model
# with Shaw et al.'s relative positions (no sinusoids), decoded greedily, with fairseq's beam search
# and with the paper's (tensor2tensor's) rule, both at beam 4 and GNMT's penalty alpha = 0.6
# (section 6.1). Prints the exact-match rate of each per seed; results in docs/quality.md.
#
#   bash benchmarks/reversal_search.sh            # SEEDS="1 2", WORK=work/reversal_search; ~5 min a seed on one thread
#
# Expected: a line `reversal seed S: greedy G fairseq-beam4 F paper-beam4 P (exact match, N sentences)`
# per seed; the figures: docs/quality.md ("Beam search").
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${VENV:-$REPO/.venv}/bin"
WORK="${WORK:-$REPO/work/reversal_search}"
SEEDS="${SEEDS:-1 2}"
UPDATES="${UPDATES:-800}"
for v in UPDATES; do [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "error: $v=${!v}: give a whole number > 0" >&2; exit 1; }; done
for s in $SEEDS; do [[ "$s" =~ ^[0-9]+$ ]] || { echo "error: SEEDS holds '$s': give whole numbers" >&2; exit 1; }; done
mkdir -p "$WORK"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

if [ ! -f "$WORK/bin/dict.src.txt" ]; then  # 2,000 training strings of 3-16 digits, 500 test strings
  "$BIN/python" - "$WORK" <<'PY'
import random, sys
from pathlib import Path
root, rng = Path(sys.argv[1]), random.Random(0)
for split, n in (("train", 2000), ("valid", 100), ("test", 500)):
    rows = [[str(rng.randint(0, 9)) for _ in range(rng.randint(3, 16))] for _ in range(n)]
    (root / f"{split}.src").write_text("".join(" ".join(r) + "\n" for r in rows))
    (root / f"{split}.tgt").write_text("".join(" ".join(reversed(r)) + "\n" for r in rows))
PY
  "$BIN/fairseq-preprocess" --source-lang src --target-lang tgt --trainpref "$WORK/train" --validpref "$WORK/valid" \
      --testpref "$WORK/test" --destdir "$WORK/bin.tmp" --joined-dictionary --workers 1 >"$WORK/preprocess.log" 2>&1
  mv "$WORK/bin.tmp" "$WORK/bin"
fi

exact() {  # exact LOG: the share of test sentences whose best hypothesis is the reference
  "$BIN/python" - "$1" <<'PY'
import sys
from attn_only_tools import generate_log  # the one reader of fairseq-generate's output
log = generate_log.read(sys.argv[1]).values()
print(f"{sum(s.hypothesis == s.target for s in log) / sum(s.target is not None for s in log):.3f}")
PY
}

for s in $SEEDS; do
  run="$WORK/seed$s"
  if [ ! -f "$run/checkpoint_last.pt" ] || ! grep -q "done training" "$run/train.log" 2>/dev/null; then
    "$BIN/fairseq-train" "$WORK/bin" --user-dir "$REPO/attn_only_plugin" --task translation_paper \
        --arch transformer_base --encoder-layers 2 --decoder-layers 2 --d-model 64 --d-ff 256 --heads 4 \
        --relative-positions 8 --no-absolute-positions `# Shaw et al. 2018 (not the paper's section 3.5)` \
        --dropout 0.0 --criterion paper_label_smoothed_ce --label-smoothing 0.1 `# section 5.4` \
        --optimizer paper_adam --lr-scheduler noam --warmup-updates 150 --lr-multiplier 0.5 `# section 5.3` \
        --max-tokens 1024 --max-update "$UPDATES" --no-epoch-checkpoints --save-interval-updates "$UPDATES" \
        --save-dir "$run" --seed "$s" --cpu --log-format simple >"$run.train.log" 2>&1 \
      || { tail -5 "$run.train.log" >&2; exit 1; }
    mv "$run.train.log" "$run/train.log"
  fi
  gen() {  # gen NAME BEAM [flags]: decode the test split with the last checkpoint
    local name=$1 beam=$2; shift 2
    "$BIN/fairseq-generate" "$WORK/bin" --user-dir "$REPO/attn_only_plugin" --task translation_paper \
        --path "$run/checkpoint_last.pt" --gen-subset test --beam "$beam" --batch-size 100 --cpu \
        --max-len-a 1 --max-len-b 5 "$@" >"$run/gen.$name.log" 2>"$run/gen.$name.err" \
      || { tail -5 "$run/gen.$name.err" >&2; exit 1; }
  }
  gen greedy 1
  gen fairseq 4 --lenpen 0.6 --lenpen-style gnmt  # section 6.1's beam and penalty, fairseq's stopping rule
  gen paper 4 --lenpen 0.6 --lenpen-style gnmt --beam-stop paper  # ... and tensor2tensor's
  echo "reversal seed $s: greedy $(exact "$run/gen.greedy.log") fairseq-beam4 $(exact "$run/gen.fairseq.log")" \
       "paper-beam4 $(exact "$run/gen.paper.log") (exact match, $(grep -c '^T-' "$run/gen.greedy.log") sentences)"
done
