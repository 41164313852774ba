#!/usr/bin/env bash
# Table 1's restricted self-attention and Shaw et al. (2018)'s relative positions against the
# paper's full attention, at equal work (docs/attention_variants.md): the quickstart's corpus,
# vocabulary, model and training (pipeline.sh's train_quickstart), one run per variant and seed,
# each averaged (last 5) and scored with sacreBLEU (beam 4, lenpen 0.6) on the 500-sentence test.
#
#   SEEDS="1 2 3" bash examples/attention_variants.sh   # ~7 min per run on 2 quiet cores, 5 runs per seed
#   (or one seed per process, side by side: OMP_NUM_THREADS=1 SEEDS=2 WORK=work/av_s2 bash ...; ~9.5 min a run)
#
# Expected (docs/attention_variants.md, mean of seeds 1-3): sacreBLEU 15.7 full attention, 16.1 R = 8,
# 16.7 R = 4, 18.4 relative K = 8, 17.8 relative without sinusoids; one seed moves a figure by up to 2.
# VARIANTS (names below), SEEDS, UPDATES, CORPUS, WORK override the defaults.
# Results: $WORK/results.tsv (variant, seed, flags, commit, sacreBLEU); a finished run is not rerun.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
declare -A FLAGS=(
  [full]=""                                                   # the paper: full self-attention, sinusoids (3.5)
  [window8]="--attention-window 8"                            # Table 1 row 4, r = 2R + 1 = 17 (encoder)
  [window4]="--attention-window 4"                            # r = 9
  [relative8]="--relative-positions 8"                        # Shaw et al. Eq. (3)-(4), k = 8, plus sinusoids
  [relative8_only]="--relative-positions 8 --no-absolute-positions"  # their best setting: no sinusoids
)
read -r -a variants <<<"${VARIANTS:-full window8 window4 relative8 relative8_only}"
for v in "${variants[@]}"; do
  if [ -z "${FLAGS[$v]+set}" ]; then echo "error: unknown variant $v: choose from ${!FLAGS[*]}" >&2; exit 1; fi
done
source "$REPO/examples/pipeline.sh"
check_vars 'UPDATES count' 'VOCAB count' 'SEEDS wholes'  # before any work: UPDATES=0 would train without end
bash "$REPO/scripts/install.sh"
CORPUS="${CORPUS:-$REPO/examples/data/libreoffice_en_de}"
WORK="${WORK:-$REPO/work/attention_variants}"
UPDATES="${UPDATES:-2000}"
mkdir -p "$WORK"

prepare "$CORPUS" en de "${VOCAB:-4000}" "$WORK"  # the quickstart's joint BPE vocabulary of 4000 (section 5.1 shrunk)
for seed in ${SEEDS:-1}; do
  for v in "${variants[@]}"; do
    run="$WORK/runs/$v.seed$seed"
    if [ -s "$run/bleu.txt" ]; then say "$v seed $seed: done before"; continue; fi
    mkdir -p "$run" && ln -sfn "$WORK/data-bin" "$run/data-bin"
    commit="$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    say "$v seed $seed: training $UPDATES updates ${FLAGS[$v]} at $commit"
    # shellcheck disable=SC2086  # the flags are a word list on purpose
    train_quickstart "$WORK/data-bin" "$run" "$UPDATES" "$seed" ${FLAGS[$v]}
    average "$run/checkpoints" 5  # section 6.1
    evaluate "$run" "$run/checkpoints/checkpoint_avg.pt" en de "$CORPUS" test
    rm -f "$run"/checkpoints/checkpoint_*_*.pt  # keep checkpoint_avg.pt and _last.pt only
    printf '%s\t%s\t%s\t%s\t%s\n' "$v" "$seed" "${FLAGS[$v]:-(none)}" "$commit" "$(sed -nE '1s/^[^=]*= ([0-9.]+) .*/\1/p' "$run/bleu.txt")" >>"$WORK/results.tsv"
  done
done
say "results: $WORK/results.tsv"
cat "$WORK/results.tsv"
