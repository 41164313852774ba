#!/usr/bin/env bash
# Transformer (big), WMT 2014 English-German: Table 2 of Vaswani et al. (2017), 28.4 BLEU.
#
#   WMT14_EN_DE=/data/wmt14_en_de GPUS=8 bash examples/wmt14_en_de_big.sh
#
# Data as for wmt14_en_de_base.sh. Expected: 28.4 BLEU (tokenized, compound-split) after
# ~3.5 days on 8 P100 (paper).
set -euo pipefail
source "$(dirname "$0")/pipeline.sh"
check_vars 'GPUS whole' 'MAX_TOKENS count'  # train_paper's, before any work
CORPUS="${WMT14_EN_DE:?set WMT14_EN_DE to the folder with the train, valid and test .en and .de files}"
WORK="${WORK:-$REPO/work/wmt14_en_de_big}"
require_corpus "$CORPUS" en de && mkdir -p "$WORK"
prepare "$CORPUS" en de 37000 "$WORK"       # section 5.1: shared BPE vocabulary of ~37000
# 300k steps (section 5.2); 10 minutes of the paper's 3.5 days = 595 updates; keep the last 20
train_paper "$WORK" transformer_big 300000 595 20   # P_drop 0.3 is the preset's (Table 3 big)
average "$WORK/checkpoints" 20              # section 6.1: big models average the last 20
evaluate "$WORK" "$WORK/checkpoints/checkpoint_avg.pt" en de "$CORPUS" test
paper_bleu "$WORK/hyp.de" "$CORPUS/test.de"   # the paper's BLEU
