#!/usr/bin/env python
"""Learning quality of our Transformer against fairseq's built-in `transformer` at equal work.

    python scripts/compare_quality.py --data-bin DIR --updates 2500 --seeds 1 2 3 --work DIR

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
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _standalone  # noqa: E402  (the package's fairseq-free files, e.g. its one-line errors)

REPO = Path(__file__).resolve().parents[1]
SIZES = dict(layers=2, d_model=128, d_ff=512, heads=4)  # the issue-20 shape; --layers etc. override
ALIKE = [
    "--criterion",
    "label_smoothed_cross_entropy",
    "--label-smoothing",
    "0.1",
    "--optimizer",
    "adam",
    "--adam-betas",
    "(0.9, 0.98)",
    "--adam-eps",
    "1e-9",
    "--lr",
    "2e-3",
    "--lr-scheduler",
    "inverse_sqrt",
]
PAPER = [
    "--criterion",
    "paper_label_smoothed_ce",
    "--label-smoothing",
    "0.1",  # section 5.4
    "--optimizer",
    "paper_adam",  # section 5.3: (0.9, 0.98, 1e-9) are its defaults
    "--lr-scheduler",
    "noam",
    "--lr-multiplier",
    "0.5",
]  # section 5.3, peak 2.2e-3 at d_model 128
VALID = re.compile(r"valid on 'valid' subset .*\| ppl ([0-9.]+) .*\| num_updates (\d+)")
PROGRESS = re.compile(r"num_updates[= ](\d+)")  # train_inner: num_updates=N; epoch end: | num_updates N


class CompareError(Exception):
    """Reported as one `error:` line."""


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def model_args(model: str, s: dict, arch: str) -> list:
    """fairseq-train's model flags: ours through --user-dir, the built-in without our model."""
    if model == "ours":
        return [
            "--arch",
            arch,
            "--encoder-layers",
            s["layers"],
            "--decoder-layers",
            s["layers"],
            "--d-model",
            s["d_model"],
            "--d-ff",
            s["d_ff"],
            "--heads",
            s["heads"],
        ]
    return [
        "--arch",
        "transformer",
        "--share-all-embeddings",
        "--encoder-layers",
        s["layers"],
        "--decoder-layers",
        s["layers"],
        "--encoder-embed-dim",
        s["d_model"],
        "--decoder-embed-dim",
        s["d_model"],
        "--encoder-ffn-embed-dim",
        s["d_ff"],
        "--decoder-ffn-embed-dim",
        s["d_ff"],
        "--encoder-attention-heads",
        s["heads"],
        "--decoder-attention-heads",
        s["heads"],
    ]


def train_command(a, model: str, recipe: str, seed: int, save_dir: Path) -> list:
    recipe_args = PAPER if (recipe == "own" and model == "ours") else ALIKE
    extra = (a.ours_extra if model == "ours" else a.builtin_extra).split()
    sizes = {k: str(getattr(a, k)) for k in SIZES}
    # --user-dir for both: it also gives fairseq on today's torch its safe checkpoint loader.
    return [
        str(Path(sys.executable).parent / "fairseq-train"),
        str(a.data_bin),
        "--user-dir",
        a.user_dir,
        *model_args(model, sizes, a.arch),
        *recipe_args,
        "--dropout",
        str(a.dropout),
        "--warmup-updates",
        str(a.warmup),
        "--max-tokens",
        str(a.max_tokens),
        "--max-update",
        str(a.updates),
        "--seed",
        str(seed),
        "--save-dir",
        str(save_dir),
        "--no-epoch-checkpoints",
        "--cpu",
        "--num-workers",
        "0",
        "--log-format",
        "simple",
        "--log-interval",
        "100",
        *extra,
    ]


def generate_command(a, checkpoint: Path) -> list:
    return [
        str(Path(sys.executable).parent / "fairseq-generate"),
        str(a.data_bin),
        "--user-dir",
        a.user_dir,
        "--path",
        str(checkpoint),
        "--gen-subset",
        "test",
        "--beam",
        "4",
        "--lenpen",
        "0.6",
        "--max-tokens",
        "4000",
        "--remove-bpe",
        "sentencepiece",
        "--cpu",
    ]


def sacrebleu_of(generate_output: str) -> float:
    """sacreBLEU of fairseq-generate's D- (detokenized hypothesis) against its T- lines."""
    import sacrebleu

    hyp, ref = {}, {}
    for line in generate_output.splitlines():
        tag, _, rest = line.partition("-")
        if tag in ("D", "T") and "\t" in rest:
            idx, *cols = rest.split("\t")
            (hyp if tag == "D" else ref)[int(idx)] = cols[-1]
    if not hyp or hyp.keys() != ref.keys():
        raise CompareError(f"fairseq-generate printed {len(hyp)} hypotheses for {len(ref)} references")
    keys = sorted(ref)
    return sacrebleu.corpus_bleu([hyp[k] for k in keys], [[ref[k] for k in keys]]).score


def last_valid_ppl(log: str, updates: int) -> float:
    found = [(float(p), int(n)) for p, n in VALID.findall(log)]
    if not found or found[-1][1] != updates:
        raise CompareError(f"no validation at update {updates} in the training log")
    return found[-1][0]


class Run:
    """One (recipe, model, seed) training and its evaluation, in a subprocess."""

    def __init__(self, a, recipe: str, model: str, seed: int):
        self.a, self.recipe, self.model, self.seed = a, recipe, model, seed
        self.dir = a.work / f"{recipe}-{model}-seed{seed}"
        self.result_file = self.dir / "result.json"
        self.proc, self.started = None, None

    @property
    def name(self) -> str:
        return f"{self.recipe}/{self.model}/seed {self.seed}"

    def done(self) -> bool:
        return self.result_file.exists()

    def settings(self) -> dict:
        """Everything that makes this run's result: its two commands and the data-bin's files."""
        data = sorted((f.name, f.stat().st_size) for f in self.a.data_bin.iterdir() if f.is_file())
        return dict(
            train=train_command(self.a, self.model, self.recipe, self.seed, self.dir / "checkpoints"),
            generate=generate_command(self.a, self.dir / "checkpoints" / "checkpoint_last.pt"),
            data_bin=[list(f) for f in data],
        )

    def check_settings(self) -> None:
        """Refuse a run folder (finished or begun) that other settings made (issue 30, item 5)."""
        recorded = self.dir / "settings.json"
        if not self.dir.exists():
            return
        if not recorded.exists():
            if self.done() or (self.dir / "checkpoints").exists():
                raise CompareError(
                    f"{self.dir} holds a run with no record of its settings: give another --work, "
                    f"or remove {self.dir} to redo it"
                )
            return
        old, new = json.loads(recorded.read_text()), self.settings()
        changed = [k for k in new if old.get(k) != new[k]]
        if changed:
            what = {"train": "fairseq-train flags", "generate": "fairseq-generate flags", "data_bin": "data-bin files"}
            differ = ", ".join(what[k] for k in changed)
            raise CompareError(
                f"{self.dir} holds a run made with other settings ({differ} differ): give another "
                f"--work, or remove {self.dir} to redo it"
            )

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        settings = self.settings()
        write_atomic(self.dir / "settings.json", json.dumps(settings) + "\n")
        self.log = open(self.dir / "train.log", "w")
        cmd = settings["train"]
        (self.dir / "command.txt").write_text(" ".join(map(repr, cmd)) + "\n")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=self.env())
        self.started = time.time()

    def env(self) -> dict:
        """--threads CPU threads for this run's training and translation."""
        return dict(os.environ, OMP_NUM_THREADS=str(self.a.threads), MKL_NUM_THREADS=str(self.a.threads))

    def progress(self) -> int:
        matches = PROGRESS.findall((self.dir / "train.log").read_text(errors="replace")[-4000:])
        return int(matches[-1]) if matches else 0

    def finish(self) -> dict:
        """After training exits: evaluate the last checkpoint and write result.json."""
        self.log.close()
        log = (self.dir / "train.log").read_text(errors="replace")
        if self.proc.returncode != 0:
            last = ([line for line in log.splitlines() if line.strip()][-1:] or ["(no output)"])[0]
            raise CompareError(
                f"{self.name}: fairseq-train exited {self.proc.returncode}: "
                f"{last.removeprefix('error: ')} (log: {self.dir / 'train.log'})"
            )
        ppl = last_valid_ppl(log, self.a.updates)
        gen = subprocess.run(
            generate_command(self.a, self.dir / "checkpoints" / "checkpoint_last.pt"),
            capture_output=True,
            text=True,
            env=self.env(),
        )
        if gen.returncode != 0:
            raise CompareError(
                f"{self.name}: fairseq-generate exited {gen.returncode}: "
                f"{(gen.stderr.strip().splitlines() or ['(no output)'])[-1]}"
            )
        (self.dir / "generate.txt").write_text(gen.stdout)
        result = dict(
            recipe=self.recipe,
            model=self.model,
            seed=self.seed,
            updates=self.a.updates,
            valid_ppl=ppl,
            bleu=round(sacrebleu_of(gen.stdout), 2),
            minutes=round((time.time() - self.started) / 60, 1),
        )
        write_atomic(self.result_file, json.dumps(result) + "\n")
        return result


def run_all(a, say=print) -> list:
    """Train and evaluate every (recipe, model, seed), --jobs at a time; a progress line every
    --progress-every seconds. Returns the results (kept ones reused)."""
    runs = [Run(a, r, m, s) for r in a.recipes for s in a.seeds for m in a.models]
    for run in runs:
        run.check_settings()
    results = [json.loads(r.result_file.read_text()) for r in runs if r.done()]
    todo, active = [r for r in runs if not r.done()], []
    if results:
        say(f"[quality] {len(results)} of {len(runs)} runs already done in {a.work}: kept")
    last_report = time.time()
    try:
        while todo or active:
            while todo and len(active) < a.jobs:
                run = todo.pop(0)
                say(f"[quality] start {run.name} ({len(results) + len(active) + 1}/{len(runs)})")
                run.start()
                active.append(run)
            for run in [r for r in active if r.proc.poll() is not None]:
                active.remove(run)
                results.append(run.finish())
                say(
                    f"[quality] done {run.name}: valid ppl {results[-1]['valid_ppl']:.2f}, "
                    f"sacreBLEU {results[-1]['bleu']:.2f} ({results[-1]['minutes']} min)"
                )
            if active and time.time() - last_report >= a.progress_every:
                say("[quality] " + ", ".join(f"{r.name} {r.progress()}/{a.updates}" for r in active))
                last_report = time.time()
            time.sleep(1)
    finally:
        for run in active:  # an error or Ctrl-C: no training left running behind us
            run.proc.kill()
    return results


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
            raise CompareError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if a.warmup < 0 or not 0 <= a.dropout < 1:
        raise CompareError("--warmup must be >= 0 and --dropout in [0, 1)")
    if not a.seeds or len(set(a.seeds)) != len(a.seeds):
        raise CompareError(f"--seeds must be distinct, got {a.seeds}")
    for f in ("dict.{}.txt", "train.{}.idx", "valid.{}.idx", "test.{}.idx"):
        if not list(a.data_bin.glob(f.format("*"))):
            raise CompareError(
                f"{a.data_bin} has no {f.format('*')}: give a fairseq-preprocess "
                "--joined-dictionary output with train, valid and test splits"
            )
    rule = _standalone.load("guards/atomic.py")  # the shared rule for outputs (issue 30)
    try:
        rule.check_output(a.work, [a.data_bin], force=True, flag="--work")  # an existing --work is continued
        if a.out is not None:
            rule.check_output(a.out, [a.data_bin], a.force)
    except rule.PluginError as e:
        raise CompareError(str(e)) from None


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
    except CompareError as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:
        sys.exit("error: interrupted; finished runs are kept in --work, run the same command to continue")
    print(table(rows))
    if a.out is not None:
        write_atomic(a.out, json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    _standalone.one_line_errors()
    main()
