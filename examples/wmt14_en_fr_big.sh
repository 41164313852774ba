#!/usr/bin/env bash
# Transformer (big), WMT 2014 English-French: section 6.1 of Vaswani et al. (2017), 41.8 BLEU
# (Table 2; the text of section 6.1 says 41.0 in the first version of the paper).
#
#   WMT14_EN_FR=/data/wmt14_en_fr GPUS=8 bash examples/wmt14_en_fr_big.sh
#
# Bring $WMT14_EN_FR/{train,valid,test}.{en,fr} (valid = newstest2013, test = newstest2014).
# Expected: 41.8 BLEU (tokenized) after ~3.5 days on 8 P100.
set -euo pipefail
source "$(dirname "$0")/pipeline.sh"
check_vars 'GPUS whole' 'MAX_TOKENS count'  # train_paper's, before any work
CORPUS="${WMT14_EN_FR:?set WMT14_EN_FR to the folder with the train, valid and test .en and .fr files}"
WORK="${WORK:-$REPO/work/wmt14_en_fr_big}"
require_corpus "$CORPUS" en fr && mkdir -p "$WORK"
prepare "$CORPUS" en fr 32000 "$WORK"       # section 5.1: 32000 word-piece vocabulary
# section 6.1: EN-FR big used P_drop = 0.1 instead of 0.3
train_paper "$WORK" transformer_big 300000 595 20 --dropout 0.1
average "$WORK/checkpoints" 20              # section 6.1: average the last 20
evaluate "$WORK" "$WORK/checkpoints/checkpoint_avg.pt" en fr "$CORPUS" test
paper_bleu "$WORK/hyp.fr" "$CORPUS/test.fr"
