"""Learning quality of our Transformer against fairseq's built-in `transformer` at equal work.

    python benchmarks/compare_quality.py --data-bin DIR --updates 2500 --seeds 1 2 3 --work DIR

DIR is a `fairseq-preprocess --joined-dictionary` folder of sentencepiece pieces (train, valid
and test splits). For every seed, each model is trained with `fairseq-train` for --updates
updates, then its last checkpoint translates the test split (`fairseq-generate --beam 4
--lenpen 0.6 --remove-bpe sentencepiece`) and is scored with sacreBLEU (13a) against the
references the same command prints (the test targets decoded from their pieces). Prints valid
perplexity (the last validation, on the last checkpoint) and sacreBLEU per seed, their mean and
standard deviation, one table, and writes it as JSON (--out).

Recipes (--recipes):
- alike: both models with the same settings: fairseq's `label_smoothed_cross_entropy` 0.1,
  fairseq's `adam` (0.9, 0.98, eps 1e-9), lr 2e-3 under `inverse_sqrt`, the same model sizes.
  Only the model differs: `--arch transformer_base` sized by flags against `--arch transformer
  --share-all-embeddings`. This is the comparison that measures the model.
- own: each with its own recipe: ours the paper's (`paper_label_smoothed_ce`, `paper_adam`, `noam`
  at half the paper's rate, as the quickstart), the built-in its usual (the `alike` one).
Each run uses one CPU thread (--threads), so --jobs runs go side by side without slowing one
another. A finished run's result is kept in WORK/RUN/result.json and reused: an interrupted
comparison continues where it stopped. A run is reused (or resumed) only when everything that
made it matches: its fairseq-train and fairseq-generate commands and the data-bin's files (names
and sizes), recorded in WORK/RUN/settings.json; a run made otherwise is refused in one line. A
script, not a test: it trains real models.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

from _quality_runs import REPO, SIZES, run_all, write_atomic  # the runs, beside this file
from attn_only_tools.guards import atomic
from attn_only_tools.guards.errors import PluginError, install_excepthook


def summarize(results: list) -> dict:
    """Per (recipe, model): the seeds' values, their mean and standard deviation."""
    rows = {}
    for r in sorted(results, key=lambda r: (r["recipe"], r["model"] != "ours", r["seed"])):
        row = rows.setdefault(f"{r['recipe']}/{r['model']}", {"seeds": [], "valid_ppl": [], "bleu": []})
        for k in ("seeds", "valid_ppl", "bleu"):
            row[k].append(r["seed" if k == "seeds" else k])
    for row in rows.values():
        for k in ("valid_ppl", "bleu"):
            row[f"{k}_mean"] = statistics.fmean(row[k])
            row[f"{k}_sd"] = statistics.stdev(row[k]) if len(row[k]) > 1 else 0.0
    return rows


def table(rows: dict) -> str:
    seeds = max((row["seeds"] for row in rows.values()), key=len)
    head = "| recipe/model | " + " | ".join(f"seed {s}" for s in seeds) + " | mean (sd) |"
    lines = [head, "|" + "---|" * (len(seeds) + 2)]
    for name, row in rows.items():
        cells = [f"{p:.2f} / {b:.2f}" for p, b in zip(row["valid_ppl"], row["bleu"], strict=True)]
        mean = (
            f"{row['valid_ppl_mean']:.2f} ({row['valid_ppl_sd']:.2f}) / {row['bleu_mean']:.2f} ({row['bleu_sd']:.2f})"
        )
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {mean} |")
    return "valid perplexity / sacreBLEU\n" + "\n".join(lines)


def check(a) -> None:
    """Bad values refused up front, each in one line."""
    for name in ("updates", "max_tokens", "jobs", "threads", "layers", "d_model", "d_ff", "heads"):
        if getattr(a, name) < 1:
            raise PluginError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if a.warmup < 0 or not 0 <= a.dropout < 1:
        raise PluginError("--warmup must be >= 0 and --dropout in [0, 1)")
    if not a.seeds or len(set(a.seeds)) != len(a.seeds):
        raise PluginError(f"--seeds must be distinct, got {a.seeds}")
    for f in ("dict.{}.txt", "train.{}.idx", "valid.{}.idx", "test.{}.idx"):
        if not list(a.data_bin.glob(f.format("*"))):
            raise PluginError(
                f"{a.data_bin} has no {f.format('*')}: give a fairseq-preprocess "
                "--joined-dictionary output with train, valid and test splits"
            )
    rule = atomic  # the shared rule for outputs
    try:
        rule.check_output(a.work, [a.data_bin], force=True, flag="--work")  # an existing --work is continued
        if a.out is not None:
            rule.check_output(a.out, [a.data_bin], a.force)
    except rule.PluginError as e:
        raise PluginError(str(e)) from None


def main(argv=None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    p.add_argument("--data-bin", type=Path, required=True)
    p.add_argument("--work", type=Path, required=True, help="one folder per run; finished runs are reused")
    p.add_argument("--updates", type=int, default=2500)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--recipes", nargs="+", choices=["alike", "own"], default=["alike"])
    p.add_argument("--models", nargs="+", choices=["ours", "builtin"], default=["ours", "builtin"])
    p.add_argument("--max-tokens", type=int, default=2048)
    p.add_argument("--warmup", type=int, default=400, help="warm-up updates (section 5.3)")
    p.add_argument("--dropout", type=float, default=0.1, help="P_drop (section 5.4)")
    for name, value in SIZES.items():
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=value)
    p.add_argument("--arch", default="transformer_base", help="our architecture (sized by the flags above)")
    p.add_argument("--user-dir", default=str(REPO / "attn_only_plugin"))
    p.add_argument("--ours-extra", default="", help="more fairseq-train flags for ours")
    p.add_argument("--builtin-extra", default="", help="more fairseq-train flags for the built-in")
    p.add_argument("--jobs", type=int, default=2, help="runs side by side")
    p.add_argument("--threads", type=int, default=1, help="CPU threads per run")
    p.add_argument("--progress-every", type=float, default=60.0, help="seconds between progress lines")
    p.add_argument("--out", type=Path, help="write the table's numbers as JSON here")
    p.add_argument("--force", action="store_true", help="replace an existing --out")
    a = p.parse_args(argv)
    try:
        check(a)
        rows = summarize(run_all(a, say=lambda m: print(m, file=sys.stderr, flush=True)))
    except PluginError as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:
        sys.exit("error: interrupted; finished runs are kept in --work, run the same command to continue")
    print(table(rows))
    if a.out is not None:
        write_atomic(a.out, json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    install_excepthook()  # an error that ends the run is one `error:` line
    main()
