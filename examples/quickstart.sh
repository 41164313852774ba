#!/usr/bin/env bash
# Quickstart: the paper's whole workflow on a laptop CPU, on real data shipped in this repository
# (LibreOffice help, English->German, examples/data/libreoffice_en_de, MPL-2.0).
#
#   bash examples/quickstart.sh            # from a fresh clone: installs (~5 min), then ~7 min on 2 quiet cores
#
# Steps: install -> joint sentencepiece (4k) -> fairseq-preprocess --joined-dictionary ->
# fairseq-train (a transformer_base shrunk to fit a CPU; the paper's loss, Adam and schedule)
# -> average the last 5 checkpoints -> fairseq-generate --beam 4 --lenpen 0.6 --max-len-a 1
# --max-len-b 50 -> detokenize -> sacreBLEU on the 500-sentence test split, next to the
# copy-the-source baseline -> the averaged model exported to CTranslate2 (float32: exact; int8)
# and the test split translated with it: sacreBLEU and sentences/s beside fairseq-generate's
# (work/quickstart/speed.txt) -> work/quickstart/loss.png.
# Expected (2-core CPU): see "Quickstart" in README.md for the BLEU we measured.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
bash "$REPO/scripts/install.sh"
source "$REPO/examples/pipeline.sh"
CORPUS="${CORPUS:-$REPO/examples/data/libreoffice_en_de}"  # overridable for tests
WORK="${WORK:-$REPO/work/quickstart}"
UPDATES="${UPDATES:-2000}"
SAVE_EVERY=$(( UPDATES / 10 > 0 ? UPDATES / 10 : 1 ))
mkdir -p "$WORK"

prepare "$CORPUS" en de "${VOCAB:-4000}" "$WORK"   # section 5.1 shrunk: a joint BPE vocabulary of 4000

if [ -f "$WORK/checkpoints/checkpoint_last.pt" ]; then say "resuming from $WORK/checkpoints/checkpoint_last.pt"; fi
say "training $UPDATES updates (progress every 50)"
"$BIN/fairseq-train" "$WORK/data-bin" --user-dir "$REPO/attn_only_plugin" \
    --arch transformer_base `# Table 3 base, shrunk below to fit a 2-core CPU` \
    --encoder-layers 3 --decoder-layers 3 --d-model 128 --d-ff 512 --heads 4 `# N, d_model, d_ff, h` \
    --dropout 0.0 `# P_drop: 0.1 in the paper (section 5.4); off for a 10-minute run that cannot overfit` \
    --criterion paper_label_smoothed_ce --label-smoothing 0.1 `# section 5.4` \
    --optimizer paper_adam `# section 5.3: Adam, beta_1 0.9, beta_2 0.98, epsilon 1e-9 (its defaults)` \
    --lr-scheduler noam --warmup-updates 400 --lr-multiplier 0.5 `# section 5.3 formula; short warm-up, peak 2.2e-3` \
    --max-tokens 2048 --max-update "$UPDATES" `# ~1.5k target tokens per step: many small steps fit a CPU` \
    --save-interval-updates "$SAVE_EVERY" --keep-interval-updates 5 --no-epoch-checkpoints `# section 6.1: last 5 averaged` \
    --validate-interval-updates "$SAVE_EVERY" --validate-interval 1000 \
    --save-dir "$WORK/checkpoints" --cpu --seed 1 --log-format simple --log-interval "$(( SAVE_EVERY < 50 ? SAVE_EVERY : 50 ))" \
    2>&1 | tee -a "$WORK/train.log" | grep --line-buffered -E "train_inner|valid on|done training|Error|error"

average "$WORK/checkpoints" 5               # section 6.1: average the last 5 checkpoints
evaluate "$WORK" "$WORK/checkpoints/checkpoint_avg.pt" en de "$CORPUS" test
say "copy-the-source baseline (the English input scored as if it were German):"
"$PY" "$REPO/scripts/sacrebleu_detok.py" "$CORPUS/test.en" "$CORPUS/test.de" | tee "$WORK/baseline.txt"
ctranslate2_compare "$WORK" "$WORK/checkpoints/checkpoint_avg.pt" en de "$CORPUS" test  # docs/export.md
"$PY" "$REPO/scripts/plot_loss.py" "$WORK/train.log" "$WORK/loss.png"
say "done: model $WORK/checkpoints/checkpoint_avg.pt, translations $WORK/hyp.de, plot $WORK/loss.png"
