# Shared steps of the paper's translation pipeline (sourced by the recipes in this folder).
# Each recipe sets its variables, then calls these functions in order. Nothing here downloads.
#   prepare  : joint sentencepiece (section 5.1) + fairseq-preprocess --joined-dictionary
#   train_quickstart : the quickstart's CPU-sized training (quickstart.sh, attention_variants.sh)
#   train_paper      : fairseq-train with the paper's criterion, optimizer and schedule (section 5)
#   last_checkpoints : the last N checkpoints (the parsing recipe's ensemble decodes them)
#   average  : mean of the last N checkpoints (section 6.1)
#   evaluate : beam 4, alpha 0.6, max length = input + 50 (section 6.1); sacreBLEU and
#              the paper's tokenized, compound-split BLEU
#   ctranslate2_compare : the model exported to CTranslate2 (float32, int8), BLEU and speed beside evaluate's
#   refuse_other_settings, record_settings : a folder's data and model made one way (table3.sh, wsj_parsing.sh)
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${VENV:-$REPO/.venv}/bin/python"
BIN="$(dirname "$PY")"
# glibc's malloc: reuse freed blocks up to 32 MB instead of handing them back to the kernel, so
# that a CPU training step does not page-fault its fresh activations in again (speed only; the
# numbers are the same; docs/speed.md, "Page faults", has the measurement). Yours if set.
export MALLOC_MMAP_THRESHOLD_="${MALLOC_MMAP_THRESHOLD_:-33554432}"
export MALLOC_TRIM_THRESHOLD_="${MALLOC_TRIM_THRESHOLD_:-4294967296}"

say() { echo "[$(date +%H:%M:%S)] $*" >&2; }

check_vars() {  # check_vars 'NAME KIND' ...: the recipe variables that are set, each checked before any work
  # KIND: count (a whole number >= 1), whole (>= 0), number (a decimal >= 0), wholes (whole numbers
  # >= 0 separated by spaces), flag (0 or 1), a|b|c (one of those words) or a|b... (one or more of
  # them, separated by spaces). An unset or empty variable takes the recipe's default.
  local spec name kind value want ok word words
  for spec in "$@"; do
    read -r name kind <<<"$spec"
    value="${!name:-}"
    [ -n "$value" ] || continue
    case "$kind" in
      count) want="a whole number >= 1"; [[ "$value" =~ ^[1-9][0-9]{0,8}$ ]] && ok=1 || ok=0 ;;
      whole) want="a whole number >= 0"; [[ "$value" =~ ^(0|[1-9][0-9]{0,8})$ ]] && ok=1 || ok=0 ;;
      number) want="a number >= 0 such as 1 or 2.5"; [[ "$value" =~ ^((0|[1-9][0-9]{0,8})(\.[0-9]+)?|\.[0-9]+)$ ]] && ok=1 || ok=0 ;;
      wholes) want="whole numbers >= 0 separated by spaces, e.g. '1 2 3'"
              [[ "$value" =~ ^[[:space:]]*(0|[1-9][0-9]{0,8})([[:space:]]+(0|[1-9][0-9]{0,8}))*[[:space:]]*$ ]] && ok=1 || ok=0 ;;
      flag) want="0 or 1"; [[ "$value" =~ ^[01]$ ]] && ok=1 || ok=0 ;;
      *...) want="one or more of ${kind//|/, } separated by spaces"; want="${want/.../}" ok=1
            read -r -a words <<<"$value"
            for word in "${words[@]}"; do [[ "|${kind%...}|" == *"|$word|"* ]] || ok=0; done ;;
      *) want="one of ${kind//|/, }"; [[ "|$kind|" == *"|$value|"* ]] && ok=1 || ok=0 ;;
    esac
    if [ "$ok" = 0 ]; then
      echo "error: $name=$value: give $want (or leave $name unset for the recipe's default)" >&2
      exit 1
    fi
  done
}

require_corpus() {  # require_corpus DIR SRC TGT
  local f
  for f in train valid test; do
    for l in "$2" "$3"; do
      if [ ! -s "$1/$f.$l" ]; then
        echo "error: missing $1/$f.$l: put the raw parallel text there (one sentence per line;" \
             "valid = newstest2013, test = newstest2014 for WMT14), then rerun" >&2
        exit 1
      fi
    done
  done
}

prepare() {  # prepare CORPUS SRC TGT VOCAB WORK [MODEL_TYPE: bpe (default) or unigram]
  if [ -f "$5/data-bin/dict.$2.txt" ]; then say "prepared data found in $5/data-bin: reused"; return; fi
  say "sentencepiece (${6:-bpe}), joint vocabulary $4"
  "$BIN/attn-only-spm-prepare" --data "$1" --src "$2" --tgt "$3" --vocab-size "$4" \
      --model-type "${6:-bpe}" --out "$5/spm" --force `# the recipe's own folder: redone until data-bin exists`
  say "fairseq-preprocess --joined-dictionary"
  "$BIN/fairseq-preprocess" --source-lang "$2" --target-lang "$3" --trainpref "$5/spm/train" \
      --validpref "$5/spm/valid" --testpref "$5/spm/test" --destdir "$5/data-bin.tmp" \
      --joined-dictionary --workers "$(nproc)" >"$5/preprocess.log" 2>&1 \
    || { tail -5 "$5/preprocess.log" >&2; exit 1; }
  rm -rf "$5/data-bin" && mv "$5/data-bin.tmp" "$5/data-bin"
}

train_quickstart() {  # train_quickstart DATA_BIN RUN UPDATES SEED [extra fairseq-train flags]: the quickstart's training
  local data=$1 run=$2 updates=$3 seed=$4; shift 4
  local every=$(( updates / 10 > 0 ? updates / 10 : 1 ))
  "$BIN/fairseq-train" "$data" --user-dir "$REPO/attn_only_plugin" \
      --arch transformer_base `# Table 3 base, shrunk below to fit a 2-core CPU` \
      --encoder-layers 3 --decoder-layers 3 --d-model 128 --d-ff 512 --heads 4 `# N, d_model, d_ff, h` \
      --dropout 0.0 `# P_drop: 0.1 in the paper (section 5.4); off for a 10-minute run that cannot overfit` \
      --criterion paper_label_smoothed_ce --label-smoothing 0.1 `# section 5.4` \
      --optimizer paper_adam `# section 5.3: Adam, beta_1 0.9, beta_2 0.98, epsilon 1e-9 (its defaults)` \
      --lr-scheduler noam --warmup-updates 400 --lr-multiplier 0.5 `# section 5.3 formula; short warm-up, peak 2.2e-3` \
      --max-tokens 2048 --max-update "$updates" `# ~1.5k target tokens per step: many small steps fit a CPU` \
      --save-interval-updates "$every" --keep-interval-updates 5 --no-epoch-checkpoints `# section 6.1: last 5 averaged` \
      --validate-interval-updates "$every" --validate-interval 1000 \
      --save-dir "$run/checkpoints" --cpu --seed "$seed" --log-format simple --log-interval "$(( every < 50 ? every : 50 ))" \
      "$@" 2>&1 | tee -a "$run/train.log" | grep --line-buffered -E "train_inner|valid on|done training|Error|error"
}

refuse_other_settings() {  # refuse_other_settings FILE SETTINGS WHAT REMEDY [CHECKPOINT]: one folder, one way of making it
  # FILE (data.settings, train.settings) holds the settings of the run that prepared the data or
  # trained the model in a folder; a run with other settings would mix the two, so it is refused
  # before any work in one line: "error: WHAT otherwise (FILE's), not as now (SETTINGS): give
  # another WORK, or REMEDY". With CHECKPOINT, only once it exists (no model yet: nothing to mix).
  if [ -n "${5:-}" ] && [ ! -f "$5" ]; then return; fi
  if [ -f "$1" ] && [ "$(cat "$1")" != "$2" ]; then
    echo "error: $3 otherwise ($(cat "$1")), not as now ($2): give another WORK, or $4" >&2
    exit 1
  fi
}

record_settings() {  # record_settings FILE SETTINGS [CHECKPOINT]: what refuse_other_settings compares with
  # Without CHECKPOINT, FILE is written once (the data stay as first prepared); with it, while
  # CHECKPOINT does not exist (the run that starts a model sets its settings).
  if [ -n "${3:-}" ]; then [ -f "$3" ] || echo "$2" >"$1"; else [ -f "$1" ] || echo "$2" >"$1"; fi
}

update_freq() {  # update_freq GPUS MAX_TOKENS: steps of ~25,000 source tokens (section 5.1)
  local per_step=$(( ${1:-1} * $2 ))
  echo $(( (25000 + per_step - 1) / per_step ))
}

last_checkpoints() {  # last_checkpoints CHECKPOINT_DIR N: the last N checkpoints, oldest first, one a line
  # the rule is the package's (checkpoint_last.pt stands in for the newest when fairseq wrote no
  # checkpoint_E_U.pt for it): attn-only-average-checkpoints --list-last
  "$BIN/attn-only-average-checkpoints" --list-last "$2" "$1"
}

average() {  # average CHECKPOINT_DIR N: the mean of the last N checkpoints, the final weights included
  local dir=$1 n=$2 inputs
  mapfile -t inputs < <(last_checkpoints "$dir" "$n")
  say "averaging the last $n checkpoints: ${inputs[*]##*/}"
  "$BIN/attn-only-average-checkpoints" --inputs "${inputs[@]}" --output "$dir/checkpoint_avg.pt" --force
}

evaluate() {  # evaluate WORK CHECKPOINT SRC TGT CORPUS SPLIT [extra generate flags]
  local work=$1 ckpt=$2 src=$3 tgt=$4 corpus=$5 split=$6; shift 6
  say "fairseq-generate --beam 4 --lenpen 0.6 on the $split split"
  "$BIN/fairseq-generate" "$work/data-bin" --user-dir "$REPO/attn_only_plugin" --path "$ckpt" \
      --gen-subset "$split" --beam 4 --lenpen 0.6 --max-len-a 1 --max-len-b 50 \
      --remove-bpe sentencepiece "$@" >"$work/generate.log" 2>"$work/generate.err" \
    || { tail -5 "$work/generate.err" >&2; exit 1; }
  "$BIN/attn-only-hypotheses" "$work/generate.log" --output "$work/hyp.$tgt" --force
  say "sacreBLEU (detokenized) on $(wc -l <"$work/hyp.$tgt") sentences"
  "$BIN/attn-only-sacrebleu-detok" "$work/hyp.$tgt" "$corpus/$split.$tgt" | tee "$work/bleu.txt"
}

ctranslate2_compare() {  # ctranslate2_compare WORK CHECKPOINT SRC TGT CORPUS SPLIT (after evaluate)
  # The checkpoint exported to CTranslate2 exactly (float32) and in int8 (docs/export.md), the split
  # translated with evaluate's settings (beam 4, alpha 0.6, max length input + 50) on all cores;
  # sacreBLEU and sentences/s of each next to fairseq-generate's, and how many hypotheses are its.
  local work=$1 ckpt=$2 src=$3 tgt=$4 corpus=$5 split=$6 q flags
  local threads; threads="$(nproc)"
  for q in float32 int8; do
    flags=(); [ "$q" = int8 ] && flags=(--quantization int8)
    say "CTranslate2 $q: export, translate the $split split ($threads threads)"
    "$BIN/attn-only-export-ctranslate2" "$ckpt" --data "$work/data-bin" --out "$work/ct2-$q" --force \
        "${flags[@]}" 2>"$work/ct2-$q.err" || { tail -3 "$work/ct2-$q.err" >&2; exit 1; }
    "$BIN/attn-only-translate-ctranslate2" "$work/ct2-$q" --spm-model "$work/spm/spm.model" \
        --input "$corpus/$split.$src" --output "$work/hyp-ct2-$q.$tgt" --force --batch-size 64 \
        --inter-threads 1 --intra-threads "$threads" --quiet 2>>"$work/ct2-$q.err" \
      || { tail -3 "$work/ct2-$q.err" >&2; exit 1; }
    "$BIN/attn-only-sacrebleu-detok" "$work/hyp-ct2-$q.$tgt" "$corpus/$split.$tgt" >"$work/bleu-ct2-$q.txt"
  done
  {
    echo "| decoder (beam 4, alpha 0.6) | sacreBLEU | sentences/s | hypotheses identical to fairseq-generate's |"
    echo "|---|---|---|---|"
    speed_row "$work" "$tgt" "fairseq-generate" - bleu.txt generate.err
    for q in float32 int8; do speed_row "$work" "$tgt" "CTranslate2 $q" "hyp-ct2-$q.$tgt" "bleu-ct2-$q.txt" "ct2-$q.err"; done
  } | tee "$work/speed.txt"
}

speed_row() {  # speed_row WORK TGT LABEL HYP|- BLEU_FILE LOG: one row of speed.txt (files in WORK)
  # sacreBLEU from BLEU_FILE, the last "N sentences/s" in LOG, and how many lines of HYP are
  # fairseq-generate's (hyp.TGT); - for fairseq-generate's own row.
  local work=$1 tgt=$2 label=$3 hyp=$4 bleu=$5 log=$6 score speed same=""
  score="$(grep -o 'BLEU[^=]*= [0-9.]*' "$work/$bleu" | head -1 | sed 's/.*= //')"
  speed="$(grep -o '[0-9.]* sentences/s' "$work/$log" | tail -1 | cut -d' ' -f1)"
  [ "$hyp" = - ] || same="$(awk 'NR == FNR { ref[FNR] = $0; n = FNR; next }
    FNR <= n && ref[FNR] == $0 { same++ } END { printf "%d of %d", same, n }' "$work/hyp.$tgt" "$work/$hyp")"
  echo "| $label | $score | $speed | ${same:+$same }|"
}

transformers_compare() {  # transformers_compare WORK CHECKPOINT SRC TGT CORPUS SPLIT (after ctranslate2_compare)
  # The checkpoint exported to Hugging Face transformers' MarianMTModel (docs/export.md), the split
  # translated as a transformers user would: AutoTokenizer, AutoModelForSeq2SeqLM and generate() with
  # the folder's generation_config.json (beam 4, the length penalty that matches --lenpen 0.6), given
  # only fairseq's length cap, input + 50 (a config file cannot hold a cap relative to the input:
  # docs/export.md); a row of speed.txt beside fairseq-generate's.
  local work=$1 ckpt=$2 src=$3 tgt=$4 corpus=$5 split=$6
  local threads; threads="$(nproc)"
  say "transformers MarianMTModel: export, translate the $split split with generate() ($threads threads)"
  "$BIN/attn-only-export-transformers" "$ckpt" --data "$work/data-bin" --spm-model "$work/spm/spm.model" \
      --out "$work/hf" --force --bleu "$(head -1 "$work/bleu.txt")" 2>"$work/hf.err" \
    || { tail -3 "$work/hf.err" >&2; exit 1; }
  "$BIN/attn-only-translate-transformers" "$work/hf" --input "$corpus/$split.$src" --output "$work/hyp-hf.$tgt" \
      --threads "$threads" --force 2>>"$work/hf.err" || { tail -3 "$work/hf.err" >&2; exit 1; }
  "$BIN/attn-only-sacrebleu-detok" "$work/hyp-hf.$tgt" "$corpus/$split.$tgt" >"$work/bleu-hf.txt"
  speed_row "$work" "$tgt" "transformers MarianMTModel, generate()" "hyp-hf.$tgt" bleu-hf.txt hf.err \
    | tee -a "$work/speed.txt"
}

train_paper() {  # train_paper WORK ARCH MAX_UPDATE SAVE_EVERY KEEP [extra fairseq-train flags]
  local work=$1 arch=$2 steps=$3 every=$4 keep=$5; shift 5
  local gpus="${GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}" max_tokens="${MAX_TOKENS:-4096}"
  gpus=$(( gpus > 0 ? gpus : 1 ))
  say "fairseq-train --arch $arch on $gpus GPU(s), update-freq $(update_freq "$gpus" "$max_tokens")"
  "$BIN/fairseq-train" "$work/data-bin" --user-dir "$REPO/attn_only_plugin" \
      --arch "$arch" `# Table 3` \
      --criterion paper_label_smoothed_ce --label-smoothing 0.1 `# section 5.4: eps_ls = 0.1` \
      --optimizer paper_adam `# section 5.3: Adam, beta_1 0.9, beta_2 0.98, epsilon 1e-9 (its defaults)` \
      --lr-scheduler noam --warmup-updates 4000 `# section 5.3: warmup_steps = 4000` \
      --max-tokens "$max_tokens" --update-freq "$(update_freq "$gpus" "$max_tokens")" `# section 5.1: ~25k source tokens/step` \
      --max-update "$steps" `# section 5.2` \
      --save-interval-updates "$every" --keep-interval-updates "$keep" --no-epoch-checkpoints `# section 6.1: checkpoints 10 min apart` \
      --fp16 --save-dir "$work/checkpoints" --log-format simple --log-interval 100 "$@" \
      2>&1 | tee -a "$work/train.log"
}

paper_bleu() {  # paper_bleu HYP REF: tokenized, compound-split BLEU (section 6.1, Table 2)
  # The paper tokenized with Moses' tokenizer.perl; sacreBLEU's 13a tokenizer (mteval's rules,
  # nearly the same for German) tokenizes both files here, so that no Perl tool is needed.
  "$BIN/attn-only-bleu-compound-split" --tokenize 13a "$1" "$2"
}
