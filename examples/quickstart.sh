#!/usr/bin/env bash
# Quickstart: the paper's whole workflow on a laptop CPU, on real data shipped in this repository
# (LibreOffice help, English->German, examples/data/libreoffice_en_de, MPL-2.0).
#
#   bash examples/quickstart.sh            # from a fresh clone: installs (~5 min), then ~5.5 min on 2 quiet cores
#
# Steps: install -> joint sentencepiece (4k) -> fairseq-preprocess --joined-dictionary ->
# fairseq-train (a transformer_base shrunk to fit a CPU; the paper's loss, Adam and schedule)
# -> average the last 5 checkpoints -> fairseq-generate --beam 4 --lenpen 0.6 --max-len-a 1
# --max-len-b 50 -> detokenize -> sacreBLEU on the 500-sentence test split, next to the
# copy-the-source baseline -> the averaged model exported to CTranslate2 (float32: exact; int8)
# and the test split translated with it, then exported to transformers' MarianMTModel and translated
# by generate(): sacreBLEU and sentences/s beside fairseq-generate's (work/quickstart/speed.txt)
# -> work/quickstart/loss.png.
# Expected (2-core CPU): see "Quickstart" in README.md for the BLEU we measured.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
source "$REPO/examples/pipeline.sh"
check_vars 'UPDATES count' 'VOCAB count'  # before any work: UPDATES=0 would train without end
bash "$REPO/scripts/install.sh"
CORPUS="${CORPUS:-$REPO/examples/data/libreoffice_en_de}"  # overridable for tests
WORK="${WORK:-$REPO/work/quickstart}"
UPDATES="${UPDATES:-2000}"
mkdir -p "$WORK"

prepare "$CORPUS" en de "${VOCAB:-4000}" "$WORK"   # section 5.1 shrunk: a joint BPE vocabulary of 4000

if [ -f "$WORK/checkpoints/checkpoint_last.pt" ]; then say "resuming from $WORK/checkpoints/checkpoint_last.pt"; fi
say "training $UPDATES updates (progress every 50)"
train_quickstart "$WORK/data-bin" "$WORK" "$UPDATES" 1  # the model and settings: pipeline.sh

average "$WORK/checkpoints" 5               # section 6.1: average the last 5 checkpoints
evaluate "$WORK" "$WORK/checkpoints/checkpoint_avg.pt" en de "$CORPUS" test
say "copy-the-source baseline (the English input scored as if it were German):"
"$BIN/attn-only-sacrebleu-detok" "$CORPUS/test.en" "$CORPUS/test.de" | tee "$WORK/baseline.txt"
ctranslate2_compare "$WORK" "$WORK/checkpoints/checkpoint_avg.pt" en de "$CORPUS" test  # docs/export.md
transformers_compare "$WORK" "$WORK/checkpoints/checkpoint_avg.pt" en de "$CORPUS" test  # docs/export.md
"$BIN/attn-only-plot-loss" "$WORK/train.log" "$WORK/loss.png" --force  # the recipe's own plot, redrawn
say "done: model $WORK/checkpoints/checkpoint_avg.pt, translations $WORK/hyp.de, plot $WORK/loss.png"
