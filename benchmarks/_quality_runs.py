"""The runs of benchmarks/compare_quality.py: each (recipe, model, seed)'s fairseq-train and
fairseq-generate commands, the subprocess that trains and then evaluates it, and --jobs of them side
by side (run_all). compare_quality.py holds the command line, its checks and the table.

Like compare_quality.py, it imports neither fairseq nor torch (sacrebleu inside sacrebleu_of).
"""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from attn_only_tools import generate_log
from attn_only_tools.guards import atomic
from attn_only_tools.guards.errors import PluginError
from benchmark_parts import recipes

REPO = Path(__file__).resolve().parents[1]
SIZES = dict(layers=2, d_model=128, d_ff=512, heads=4)  # the quality study's shape; --layers etc. override
ALIKE = [*recipes.BUILTIN, "--lr", "2e-3"]
PAPER = [*recipes.PAPER, "--lr-multiplier", "0.5"]  # section 5.3, peak 2.2e-3 at d_model 128
VALID = re.compile(r"valid on 'valid' subset .*\| ppl ([0-9.]+) .*\| num_updates (\d+)")
PROGRESS = re.compile(r"num_updates[= ](\d+)")  # train_inner: num_updates=N; epoch end: | num_updates N


def write_atomic(path: Path, text: str) -> None:
    """TEXT into PATH through the package's atomic_output (guards/atomic.py): the old file or the
    whole new one, never half of it."""
    with atomic.atomic_output(path, "w", encoding="utf-8") as f:
        f.write(text)


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

    sentences = generate_log.parse(generate_output.splitlines(), "fairseq-generate's output")
    hyp = {i: s.detokenized[0][1] for i, s in sentences.items() if s.detokenized}
    ref = {i: s.target for i, s in sentences.items() if s.target is not None}
    if not hyp or hyp.keys() != ref.keys():
        raise PluginError(f"fairseq-generate printed {len(hyp)} hypotheses for {len(ref)} references")
    keys = sorted(ref)
    return sacrebleu.corpus_bleu([hyp[k] for k in keys], [[ref[k] for k in keys]]).score


def last_valid_ppl(log: str, updates: int) -> float:
    found = [(float(p), int(n)) for p, n in VALID.findall(log)]
    if not found or found[-1][1] != updates:
        raise PluginError(f"no validation at update {updates} in the training log")
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
        """Refuse a run folder (finished or begun) that other settings made."""
        recorded = self.dir / "settings.json"
        if not self.dir.exists():
            return
        if not recorded.exists():
            if self.done() or (self.dir / "checkpoints").exists():
                raise PluginError(
                    f"{self.dir} holds a run with no record of its settings: give another --work, "
                    f"or remove {self.dir} to redo it"
                )
            return
        old, new = json.loads(recorded.read_text()), self.settings()
        changed = [k for k in new if old.get(k) != new[k]]
        if changed:
            what = {"train": "fairseq-train flags", "generate": "fairseq-generate flags", "data_bin": "data-bin files"}
            differ = ", ".join(what[k] for k in changed)
            raise PluginError(
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
            raise PluginError(
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
            raise PluginError(
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
