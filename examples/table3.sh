#!/usr/bin/env bash
# Table 3 of Vaswani et al. (2017): variations of the base model on WMT14 EN-DE, scored on the
# development set newstest2013 with beam search and WITHOUT checkpoint averaging, as the paper.
#
#   WMT14_EN_DE=/data/wmt14_en_de GPUS=8 bash examples/table3.sh B1     # one row
#   bash examples/table3.sh --list                                      # rows, flags, paper numbers
#
# Each row is the base recipe (wmt14_en_de_base.sh: 100k steps) plus the flags that row changes.
# Expected: the row's "BLEU (dev)" below (tokenized BLEU on newstest2013).
set -euo pipefail
source "$(dirname "$0")/pipeline.sh"
check_vars 'GPUS whole' 'MAX_TOKENS count'  # train_paper's, before any work

declare -A FLAGS=(  # row -> the flags it changes on top of transformer_base
  [base]=""
  [A1]="--heads 1 --d-k 512 --d-v 512"
  [A2]="--heads 4 --d-k 128 --d-v 128"
  [A3]="--heads 16 --d-k 32 --d-v 32"
  [A4]="--heads 32 --d-k 16 --d-v 16"
  [B1]="--d-k 16"
  [B2]="--d-k 32"
  [C1]="--encoder-layers 2 --decoder-layers 2"
  [C2]="--encoder-layers 4 --decoder-layers 4"
  [C3]="--encoder-layers 8 --decoder-layers 8"
  [C4]="--d-model 256 --d-k 32 --d-v 32"
  [C5]="--d-model 1024 --d-k 128 --d-v 128"
  [C6]="--d-ff 1024"
  [C7]="--d-ff 4096"
  [D1]="--dropout 0.0"
  [D2]="--dropout 0.2"
  [D3]="--label-smoothing 0.0"
  [D4]="--label-smoothing 0.2"
  [E]="--learned-pos"
)
declare -A PAPER=([base]="4.92 25.8" [A1]="5.29 24.9" [A2]="5.00 25.5" [A3]="4.91 25.8" [A4]="5.01 25.4"
  [B1]="5.16 25.1" [B2]="5.01 25.4" [C1]="6.11 23.7" [C2]="5.19 25.3" [C3]="4.88 25.5" [C4]="5.75 24.5"
  [C5]="4.66 26.0" [C6]="5.12 25.4" [C7]="4.75 26.2" [D1]="5.77 24.6" [D2]="4.95 25.5" [D3]="4.67 25.3"
  [D4]="5.47 25.7" [E]="4.92 25.7")
ROWS="base A1 A2 A3 A4 B1 B2 C1 C2 C3 C4 C5 C6 C7 D1 D2 D3 D4 E"

ROW="${1:-}"
if [ "$ROW" = "--list" ]; then
  for r in $ROWS; do set -- ${PAPER[$r]}; printf '%-5s PPL %s BLEU %s  flags: %s\n' "$r" "$1" "$2" "${FLAGS[$r]:-(none)}"; done
  exit 0
fi
if [ -z "$ROW" ] || [ -z "${PAPER[$ROW]+x}" ]; then
  echo "error: unknown Table 3 row '${ROW}': choose one of $ROWS (or --list)" >&2; exit 1
fi
CORPUS="${WMT14_EN_DE:?set WMT14_EN_DE to the folder with the train, valid and test .en and .de files}"
WORK="${WORK:-$REPO/work/table3}"
require_corpus "$CORPUS" en de && mkdir -p "$WORK/$ROW"
prepare "$CORPUS" en de 37000 "$WORK"              # one shared vocabulary for every row
ln -sfn "$WORK/data-bin" "$WORK/$ROW/data-bin"
# shellcheck disable=SC2086  # FLAGS are word lists on purpose
train_paper "$WORK/$ROW" transformer_base 100000 5000 1 ${FLAGS[$ROW]}
# newstest2013 = the valid split; the last checkpoint, no averaging (Table 3 caption)
evaluate "$WORK/$ROW" "$WORK/$ROW/checkpoints/checkpoint_last.pt" en de "$CORPUS" valid
echo "paper, row $ROW: PPL (dev) / BLEU (dev) = ${PAPER[$ROW]}" >&2
