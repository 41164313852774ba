#!/usr/bin/env bash
# English constituency parsing, section 6.3 / Table 4 of Vaswani et al. (2017): 91.3 F1 on WSJ
# section 23 with WSJ-only training (4 layers, d_model 1024, ~40K sentences, GPUs).
#
#   WSJ=/data/treebank_3/parsed/mrg/wsj bash examples/wsj_parsing.sh               # 02-21/22/23
#   WSJ=../shared/data/ptb-sample SPLIT="train=1-159 valid=160-169 test=170-179" \
#       SMALL=1 bash examples/wsj_parsing.sh                                           # CPU sample run
#
# Expected: the paper's 91.3 F1 (EVALB, COLLINS.prm) with the full WSJ on GPUs; on the sample with
# SMALL=1, the test F1 docs/parsing.md reports (dated, over seeds), printed beside the treebank
# PCFG's, after about 40 minutes of training on one thread and 1-2 minutes of decoding a split
# (docs/parsing.md has the times measured).
# Decoding uses --constrain-trees (ours, not the paper's): outputs are always well-formed trees.
# SMALL=1 shrinks the model for a CPU and runs the setting chosen on the sample's valid split
# (docs/parsing.md, "Ablation"): words in the target, target vocabulary 2,000, Shaw et al.'s
# relative positions (K = 16) beside the sinusoids, 3,000 updates, output length <= 2.5 x input
# + 10, the last 5 checkpoints decoded as an ensemble at section 6.3's beam 21. Every setting
# decodes with the paper's beam search (tensor2tensor's stopping rule, --beam-stop paper;
# BEAM_STOP=fairseq for fairseq's own). UPDATES, SAVE_EVERY, MAX_LEN_A/B, BEAM, BEAM_STOP, RELPOS
# (K; RELPOS= turns them off), CHECKPOINTS, PREPARE_FLAGS, PREPROCESS_FLAGS,
# TRAIN_FLAGS, GEN_FLAGS override; SUBWORDS=N feeds the encoder sentencepiece pieces of a source
# vocabulary of N instead of words (not the paper's, nor SMALL=1's; docs/parsing.md); SEED
# (default 1) the random seed. The last 5 checkpoints, one every SAVE_EVERY updates, are averaged
# (section 6.1) and the average decoded (CHECKPOINTS=average, the default but for SMALL=1);
# CHECKPOINTS=ensemble decodes the 5 as an ensemble instead (fairseq-generate --path a:b:c, their
# next-token probabilities averaged at each step; not the paper's). Valid and test are both scored.
set -euo pipefail
source "$(dirname "$0")/pipeline.sh"
check_vars 'SMALL flag' 'UPDATES count' 'SAVE_EVERY count' 'BEAM count' 'MAX_LEN_A number' 'MAX_LEN_B whole' \
    'SEED whole' 'RELPOS count' 'SUBWORDS count' 'BEAM_STOP fairseq|paper'  # before any work: UPDATES=0 would train without end
WSJ="${WSJ:?set WSJ to your treebank folder with wsj_NNNN.mrg files}"
WORK="${WORK:-$REPO/work/wsj_parsing}"
if [ "${SMALL:-0}" = 1 ]; then  # the sample's setting, chosen on its valid split (docs/parsing.md, "Ablation")
  PREPARE_FLAGS="${PREPARE_FLAGS---target-words}"  # the words themselves in the target (not the paper's XX)
  PREPROCESS_FLAGS="${PREPROCESS_FLAGS---nwordstgt 2000}"  # rarer target words are <unk> slots
  UPDATES="${UPDATES:-3000}" SAVE_EVERY="${SAVE_EVERY:-250}"
  MAX_LEN_A="${MAX_LEN_A:-2.5}" MAX_LEN_B="${MAX_LEN_B:-10}"  # output <= 2.5 x words + 10, not input + 300
  CHECKPOINTS="${CHECKPOINTS:-ensemble}"  # the last 5 checkpoints as an ensemble, not their average: +1.29 valid F1
  # beam 21 as section 6.3: BEAM=84 finds a little more in far longer decoding (docs/parsing.md)
fi
CHECKPOINTS="${CHECKPOINTS:-average}"
case "$CHECKPOINTS" in
  average|ensemble) ;;
  *) echo "error: CHECKPOINTS=$CHECKPOINTS: give 'average' (decode the mean of the last 5 checkpoints) or" \
          "'ensemble' (decode them as an ensemble)" >&2; exit 1 ;;
esac
[[ "$WORK" != *:* ]] || { echo "error: WORK=$WORK contains ':', which fairseq-generate --path reads as a list of" \
                            "checkpoints (a:b:c), so no checkpoint under it can be decoded: give another WORK" >&2; exit 1; }
for part in train valid test; do  # prepare_ptb.py writes the splits SPLIT names; the recipe needs all three
  [ -z "${SPLIT:-}" ] || [[ " $SPLIT " == *" $part="* ]] || { echo "error: SPLIT=$SPLIT names no $part=: give" \
      "train=A-B valid=C-D test=E-F (WSJ file numbers), or leave SPLIT unset for sections 02-21 / 22 / 23" >&2; exit 1; }
done
SHAPE=()
if [ "${SMALL:-0}" = 1 ]; then  # a CPU-sized transformer_parse: same depth, smaller widths
  SHAPE=(--d-model 128 --d-ff 512 --heads 4 --dropout 0.1 --attention-dropout 0.1 --max-tokens 4096
         --warmup-updates 400 --lr-multiplier 0.5 --cpu)
  RELPOS="${RELPOS-16}"  # Shaw et al. (2018) relative positions, K = 16, beside section 3.5's sinusoids (not the paper's)
  if [ -n "$RELPOS" ]; then SHAPE+=(--relative-positions "$RELPOS"); fi
else
  SHAPE=(--max-tokens 4096 --warmup-updates 4000 --fp16)
fi
mkdir -p "$WORK"
data_settings="split: ${SPLIT:-standard} | prepare_ptb.py: ${PREPARE_FLAGS:-} | fairseq-preprocess: ${PREPROCESS_FLAGS:-}${SUBWORDS:+ | source pieces: $SUBWORDS}"
refuse_other_settings "$WORK/data.settings" "$data_settings" "$WORK holds data prepared" "remove $WORK to start over"
# a resumed training must build the model its checkpoints hold (UPDATES and SEED may change)
train_settings="fairseq-train: ${SHAPE[*]}${TRAIN_FLAGS:+ $TRAIN_FLAGS}"
refuse_other_settings "$WORK/train.settings" "$train_settings" "$WORK/checkpoints holds a model trained" \
    "remove $WORK/checkpoints to train again" "$WORK/checkpoints/checkpoint_last.pt"
say "linearizing trees (Vinyals et al. 2015)"
# shellcheck disable=SC2086  # SPLIT and the FLAGS are word lists on purpose
"$BIN/attn-only-prepare-ptb" --treebank "$WSJ" --out "$WORK/text" --force ${SPLIT:+--split $SPLIT} ${PREPARE_FLAGS:-}
if [ ! -f "$WORK/data-bin/dict.words.txt" ]; then
  rm -rf "$WORK/data-bin.tmp"  # what a failed or killed fairseq-preprocess left
  text="$WORK/text" srcdict=()
  if [ -n "${SUBWORDS:-}" ]; then  # the source as sentencepiece pieces (not the paper's): targets keep the words
    "$BIN/attn-only-spm-prepare" --data "$WORK/text" --src words --tgt tree --vocab-size "$SUBWORDS" \
        --source-only --out "$WORK/pieces" --force
    text="$WORK/pieces" srcdict=(--srcdict "$WORK/pieces/dict.words.txt")  # every piece, seen in training or not
  fi
  "$BIN/fairseq-preprocess" --source-lang words --target-lang tree --trainpref "$text/train" \
      --validpref "$text/valid" --testpref "$text/test" --destdir "$WORK/data-bin.tmp" \
      --nwordssrc 16000 `# section 6.3: 16K source vocabulary for WSJ only` \
      --workers "$(nproc)" "${srcdict[@]}" ${PREPROCESS_FLAGS:-} >"$WORK/preprocess.log" 2>&1 || { tail -5 "$WORK/preprocess.log" >&2; exit 1; }
  rm -rf "$WORK/data-bin" && mv "$WORK/data-bin.tmp" "$WORK/data-bin"  # complete, or not there at all
  record_settings "$WORK/data.settings" "$data_settings"
fi
say "fairseq-train --arch transformer_parse"
record_settings "$WORK/train.settings" "$train_settings" "$WORK/checkpoints/checkpoint_last.pt"
"$BIN/fairseq-train" "$WORK/data-bin" --user-dir "$REPO/attn_only_plugin" \
    --task constituency_parsing --arch transformer_parse `# section 6.3: N=4, d_model=1024, dropout 0.2 (attention and residual)` \
    --embedding-sharing decoder `# words and bracket symbols are two vocabularies` \
    --max-source-positions 512 --max-target-positions 1536 \
    --criterion paper_label_smoothed_ce --label-smoothing 0.1 `# section 5.4` \
    --optimizer paper_adam --lr-scheduler noam `# section 5.3: Adam (beta_1 0.9, beta_2 0.98, epsilon 1e-9) and the warm-up schedule` \
    --max-update "${UPDATES:-100000}" --save-interval-updates "${SAVE_EVERY:-500}" --keep-interval-updates 5 \
    --no-epoch-checkpoints --save-dir "$WORK/checkpoints" --seed "${SEED:-1}" --log-format simple --log-interval 50 \
    "${SHAPE[@]}" ${TRAIN_FLAGS:-} 2>&1 | tee -a "$WORK/train.log" | grep --line-buffered -E "train_inner|valid on|done training|rror"
average "$WORK/checkpoints" 5  # section 6.1's average, decoded unless CHECKPOINTS=ensemble
MODELS="$WORK/checkpoints/checkpoint_avg.pt"
if [ "$CHECKPOINTS" = ensemble ]; then  # the same 5 checkpoints as 5 models, their next-token probabilities averaged
  mapfile -t last < <(last_checkpoints "$WORK/checkpoints" 5)
  MODELS="$(IFS=:; echo "${last[*]}")"  # fairseq-generate --path a:b:c
fi
parse_split() {  # parse_split SPLIT: decode SPLIT with section 6.3's settings, then EVALB
  say "fairseq-generate on $1: --beam ${BEAM:-21} --lenpen 0.3, max length = ${MAX_LEN_A:-1} x input + ${MAX_LEN_B:-300}"
  # shellcheck disable=SC2046,SC2086  # GEN_FLAGS is a word list on purpose
  "$BIN/fairseq-generate" "$WORK/data-bin" --user-dir "$REPO/attn_only_plugin" \
      --path "$MODELS" --gen-subset "$1" --source-lang words --target-lang tree \
      --task constituency_parsing --constrain-trees `# only well-formed trees over the input words (not in the paper)` \
      --beam "${BEAM:-21}" --lenpen 0.3 --lenpen-style gnmt `# section 6.3: beam 21, alpha 0.3 of GNMT's penalty` \
      --beam-stop "${BEAM_STOP:-paper}" `# the paper's search stops a sentence by tensor2tensor's bound` \
      --max-len-a "${MAX_LEN_A:-1}" --max-len-b "${MAX_LEN_B:-300}" --batch-size 16 `# section 6.3: input + 300` \
      $([ "${SMALL:-0}" = 1 ] && echo --cpu) ${GEN_FLAGS:-} >"$WORK/generate.$1.log" 2>"$WORK/generate.$1.err" \
    || { tail -5 "$WORK/generate.$1.err" >&2; exit 1; }
  "$BIN/attn-only-parse-eval" "$WORK/generate.$1.log" --data "$WORK/text" --split "$1" \
      --out "$WORK/$1.pred" --force | tee "$WORK/f1.$1.txt"
}
parse_split valid  # select settings on this one (never on test)
parse_split test
say "treebank PCFG baseline (v=2, h=2, rare 3; Klein & Manning 2003), trained on the same train split"
[ -s "$WORK/pcfg.txt" ] || { "$BIN/attn-only-pcfg-baseline" --data "$WORK/text" --split test \
    --out "$WORK/test.pcfg" --force >"$WORK/pcfg.tmp" && mv "$WORK/pcfg.tmp" "$WORK/pcfg.txt"; }
cat "$WORK/pcfg.txt"
