#!/usr/bin/env bash
# Transformer (base), WMT 2014 English-German: Table 2 of Vaswani et al. (2017), 27.3 BLEU.
#
#   WMT14_EN_DE=/data/wmt14_en_de GPUS=8 bash examples/wmt14_en_de_base.sh
#
# Bring the data (nothing is downloaded): $WMT14_EN_DE/{train,valid,test}.{en,de}, raw text,
# one sentence per line; valid = newstest2013, test = newstest2014.
# Expected: 27.3 BLEU (tokenized, compound-split, as the paper) after ~12 h on 8 P100;
# sacreBLEU on detokenized output is usually somewhat lower.
set -euo pipefail
source "$(dirname "$0")/pipeline.sh"
check_vars 'GPUS whole' 'MAX_TOKENS count'  # train_paper's, before any work
CORPUS="${WMT14_EN_DE:?set WMT14_EN_DE to the folder with the train, valid and test .en and .de files}"
WORK="${WORK:-$REPO/work/wmt14_en_de_base}"
require_corpus "$CORPUS" en de && mkdir -p "$WORK"
prepare "$CORPUS" en de 37000 "$WORK"       # section 5.1: shared BPE vocabulary of ~37000
# 100k steps (section 5.2); 10 minutes of the paper's 12 h = 1389 updates; keep the last 5
train_paper "$WORK" transformer_base 100000 1389 5
average "$WORK/checkpoints" 5               # section 6.1: average the last 5 checkpoints
evaluate "$WORK" "$WORK/checkpoints/checkpoint_avg.pt" en de "$CORPUS" test
paper_bleu "$WORK/hyp.de" "$CORPUS/test.de"   # the paper's BLEU
