#!/usr/bin/env bash
# Table 3 of Vaswani et al. (2017): variations of the base model on WMT14 EN-DE, scored on the
# development set newstest2013 with beam search and WITHOUT checkpoint averaging, as the paper.
#
#   WMT14_EN_DE=/data/wmt14_en_de GPUS=8 bash examples/table3.sh B1     # one row
#   bash examples/table3.sh --list                                      # rows, flags, paper numbers
#   SMALL=1 SEED=1 bash examples/table3.sh B1                           # one row on a CPU (docs/table3.md)
#   SMALL=1 SEEDS="1 2 3" bash examples/table3.sh all                   # every row, seed after seed
#   SMALL=1 SEEDS="1 2" bash examples/table3.sh base B1 B2              # a queue: these rows, seed after seed
#
# Each row is the base recipe (wmt14_en_de_base.sh: 100k steps) plus the flags that row changes.
# Expected: the row's "BLEU (dev)" below (tokenized BLEU on newstest2013).
# SMALL=1: the committed LibreOffice EN-DE corpus (examples/data/libreoffice_en_de), one joint
# sentencepiece vocabulary of 4000 shared by every row, a base with the paper's depth and every
# width (d_model, d_ff, d_k, d_v) divided by SCALE = 4, each row's change scaled alike
# (`SMALL=1 bash examples/table3.sh --list`); the same UPDATES and MAX_TOKENS for every row, the
# last checkpoint (no averaging), beam 4 and the paper's length penalty on the valid split. Each
# row ends with the line `table3 ROW seed S: ppl P bleu B` on stdout (dev perplexity per subword,
# base 2 as fairseq's; detokenized sacreBLEU), also written to WORK/ROW/seedS/result.txt and
# result.json. SEED (default 1; SEEDS for a queue), WORK (default work/table3_small), UPDATES,
# MAX_TOKENS, WARMUP, LR_MULTIPLIER, CORPUS and VOCAB override; a rerun resumes from
# checkpoint_last.pt, and a finished row is not retrained. Rows may run side by side in one WORK.
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
SCALE=4  # SMALL=1: every width divided by this; depth, heads, P_drop, eps_ls and positions as the paper

small_flags() {  # small_flags ROW: the row's flags with every width / SCALE, the scaled base's widths before them
  local out=() prev="" word
  for word in ${FLAGS[$1]}; do
    case "$prev" in --d-model|--d-ff|--d-k|--d-v) out+=("$(( word / SCALE ))") ;; *) out+=("$word") ;; esac
    prev=$word
  done
  [[ " ${FLAGS[$1]} " == *" --d-ff "* ]] || out=(--d-ff $(( 2048 / SCALE )) "${out[@]}")
  [[ " ${FLAGS[$1]} " == *" --d-model "* ]] || out=(--d-model $(( 512 / SCALE )) "${out[@]}")
  echo "${out[*]}"
}

row_flags() {  # row_flags ROW: what the row adds to transformer_base in this mode
  if [ "${SMALL:-0}" = 1 ]; then small_flags "$1"; else echo "${FLAGS[$1]}"; fi
}

small_row() {  # small_row ROW: the row trained and scored on a CPU (SMALL=1; the header says how)
  local row=$1 corpus="${CORPUS:-$REPO/examples/data/libreoffice_en_de}" work="${WORK:-$REPO/work/table3_small}"
  local seed="${SEED:-1}" updates="${UPDATES:-1000}" vocab="${VOCAB:-4000}" shape settings data_settings
  local run="$work/$row/seed$seed"
  read -r -a shape <<<"$(small_flags "$row") --max-tokens ${MAX_TOKENS:-2048} --warmup-updates ${WARMUP:-400} --lr-multiplier ${LR_MULTIPLIER:-0.25}"  # half the quickstart's: N = 6 post-norm stalls at 0.5 (docs/table3.md)
  # a resumed training must build the model its checkpoint holds: another row's (or another
  # scale's) checkpoint in this folder is refused before any work
  settings="row $row, fairseq-train: ${shape[*]}"
  refuse_other_settings "$run/train.settings" "$settings" "$run/checkpoints holds a model trained" \
      "remove $run to train again" "$run/checkpoints/checkpoint_last.pt"
  data_settings="corpus: $corpus | sentencepiece vocabulary: $vocab"
  refuse_other_settings "$work/data.settings" "$data_settings" "$work holds data prepared" "remove $work to start over"
  if [ -s "$run/result.txt" ] && grep -q "\"updates\": $updates," "$run/result.json" 2>/dev/null; then
    say "$row seed $seed: finished before ($run/result.txt)"; cat "$run/result.txt"; return
  fi
  require_corpus "$corpus" en de
  mkdir -p "$run"
  ( flock 9  # rows started together: one prepares, the others wait and reuse its data-bin
    prepare "$corpus" en de "$vocab" "$work"
    record_settings "$work/data.settings" "$data_settings"
  ) 9>"$work/prepare.lock"
  ln -sfn "$work/data-bin" "$run/data-bin"
  record_settings "$run/train.settings" "$settings" "$run/checkpoints/checkpoint_last.pt"
  local every=$(( updates / 10 > 0 ? updates / 10 : 1 )) start=$SECONDS commit
  commit="$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  say "$row seed $seed: training $updates updates, transformer_base ${shape[*]} (at $commit)"
  "$BIN/fairseq-train" "$work/data-bin" --user-dir "$REPO/attn_only_plugin" \
      --arch transformer_base `# Table 3 base: N = 6, h = 8, P_drop 0.1; widths from small_flags` \
      --criterion paper_label_smoothed_ce --label-smoothing 0.1 `# section 5.4` \
      --optimizer paper_adam `# section 5.3: Adam, beta_1 0.9, beta_2 0.98, epsilon 1e-9 (its defaults)` \
      --lr-scheduler noam `# section 5.3's formula; WARMUP and LR_MULTIPLIER (in shape) scaled for the short run` \
      --max-update "$updates" --save-interval-updates "$every" --keep-interval-updates 1 --no-epoch-checkpoints \
      --validate-interval-updates "$every" --validate-interval 1000 `# the dev curve, every tenth of the run` \
      --save-dir "$run/checkpoints" --cpu --seed "$seed" --log-format simple --log-interval 50 \
      "${shape[@]}" 2>&1 | tee -a "$run/train.log" | grep --line-buffered -E "train_inner|valid on|done training|rror" >&2
  rm -f "$run"/checkpoints/checkpoint_*_*.pt "$run/checkpoints/checkpoint_best.pt"  # the last one is scored
  local ckpt="$run/checkpoints/checkpoint_last.pt" ppl bleu
  say "$row seed $seed: dev perplexity of the last checkpoint (fairseq-validate)"
  "$BIN/fairseq-validate" "$work/data-bin" --user-dir "$REPO/attn_only_plugin" --path "$ckpt" \
      --task translation_paper --valid-subset valid --max-tokens 4096 --cpu >"$run/validate.log" 2>&1 || { tail -5 "$run/validate.log" >&2; exit 1; }
  ppl="$(grep -oE '\| ppl [0-9.]+' "$run/validate.log" | tail -1 | awk '{print $3}')"
  # Table 3 caption: the dev set, beam 4 and alpha 0.6 of the paper's (GNMT's) length penalty, no averaging
  evaluate "$run" "$ckpt" en de "$corpus" valid --task translation_paper --lenpen-style gnmt --cpu >&2
  bleu="$(sed -nE '1s/^[^=]*= ([0-9.]+) .*/\1/p' "$run/bleu.txt")"
  if [ -z "$ppl" ] || [ -z "$bleu" ]; then
    echo "error: no perplexity in $run/validate.log or no BLEU in $run/bleu.txt: see those files" >&2; exit 1
  fi
  printf '{"row": "%s", "seed": %s, "updates": %s, "ppl": %s, "bleu": %s, "flags": "%s", "commit": "%s", "seconds": %s}\n' \
    "$row" "$seed" "$updates" "$ppl" "$bleu" "${shape[*]}" "$commit" "$(( SECONDS - start ))" >"$run/result.json.tmp"
  echo "table3 $row seed $seed: ppl $ppl bleu $bleu" >"$run/result.txt.tmp"
  mv "$run/result.json.tmp" "$run/result.json" && mv "$run/result.txt.tmp" "$run/result.txt"
  cat "$run/result.txt"
}

ROW="${1:-}"  # or several rows, or all: a queue (below)
if [ "$ROW" = "--list" ]; then
  for r in $ROWS; do set -- ${PAPER[$r]}; flags="$(row_flags "$r")"; printf '%-5s PPL %s BLEU %s  flags: %s\n' "$r" "$1" "$2" "${flags:-(none)}"; done
  exit 0
fi
[ "$ROW" != all ] || set -- $ROWS
[ "$#" -gt 0 ] || { echo "error: no Table 3 row given: name one or more of $ROWS, or all (or --list)" >&2; exit 1; }
for r in "$@"; do  # every row named is checked before any is run
  if [ -z "$r" ] || [ -z "${PAPER[$r]+x}" ]; then
    echo "error: unknown Table 3 row '${r}': choose one of $ROWS, all (or --list)" >&2; exit 1
  fi
done
if [ "$#" -gt 1 ] || [ -n "${SEEDS:-}" ]; then  # a queue: for each of SEEDS, the rows in turn, each its own run
  for seed in ${SEEDS:-${SEED:-1}}; do
    for r in "$@"; do SEEDS="" SEED=$seed bash "$0" "$r"; done  # each run one row, one seed (not a queue again)
  done
  exit 0
fi
if [ "${SMALL:-0}" = 1 ]; then
  small_row "$ROW"
  exit 0
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
