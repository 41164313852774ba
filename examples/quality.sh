#!/usr/bin/env bash
# Ours against fairseq's built-in transformer at equal work (docs/quality.md): the full LibreOffice
# help EN-DE corpus, shuffled, 1,000 test / 1,000 valid / the rest train; a joint sentencepiece
# unigram vocabulary of 8,000; each model trained for 2,500 updates on three seeds, configured alike
# (only the model differs), then valid perplexity and sacreBLEU (beam 4, lenpen 0.6) in one table.
#
#   bash examples/quality.sh       # ~1 h 45 min on 2 CPU cores once installed (6 trainings, 2 at a time)
#
# Expected: the table in docs/quality.md (ours and the built-in within a seed's spread of each other).
# Needs Debian's libreoffice-help-en-us and -de packages (apt-get download), or DEBS_DIR holding
# their .deb files, or CORPUS: a folder with train/valid/test.{en,de} to pool and split instead.
# UPDATES, SEEDS, VOCAB, RECIPES ("alike own" adds each model on its own recipe) override the defaults.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
source "$REPO/examples/pipeline.sh"
check_vars 'UPDATES count' 'VOCAB count' 'SEEDS wholes' 'TEST count' 'VALID count' 'RECIPES alike|own...'
bash "$REPO/scripts/install.sh"
WORK="${WORK:-$REPO/work/quality}"
mkdir -p "$WORK"

if [ -z "${CORPUS:-}" ]; then
  CORPUS="$WORK/libreoffice_en_de"
  if [ ! -s "$CORPUS/train.de" ]; then
    say "aligning the LibreOffice help EN-DE (Debian packages)"
    "$BIN/attn-only-prepare-libreoffice" --lang de --workdir "$WORK/debs" --out "$CORPUS" \
        ${DEBS_DIR:+--debs-dir "$DEBS_DIR"}
  fi
fi
say "pooling and splitting: 1,000 test, 1,000 valid, the rest train (seed 1)"
"$BIN/attn-only-shuffle-split" --data "$CORPUS" --src en --tgt de --test "${TEST:-1000}" \
    --valid "${VALID:-1000}" --seed 1 --out "$WORK/raw"
prepare "$WORK/raw" en de "${VOCAB:-8000}" "$WORK" unigram  # section 5.1's shared vocabulary, unigram as docs/quality.md specifies
# shellcheck disable=SC2086  # SEEDS and RECIPES are word lists on purpose
"$PY" "$REPO/benchmarks/compare_quality.py" --data-bin "$WORK/data-bin" --work "$WORK/runs" \
    --updates "${UPDATES:-2500}" --seeds ${SEEDS:-1 2 3} --recipes ${RECIPES:-alike} \
    --layers 2 --d-model 128 --d-ff 512 --heads 4 `# N, d_model, d_ff, h: Table 3 base shrunk for a CPU` \
    --dropout 0.1 `# P_drop, section 5.4` --warmup 400 --max-tokens 2048 --jobs 2 \
    --out "$WORK/quality.json" | tee "$WORK/quality.txt"
