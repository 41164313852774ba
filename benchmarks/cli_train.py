"""fairseq-train itself, ours against the built-in: training tokens/s of transformer_big through the
real command line at the paper's ~25k source and ~25k target tokens a step (section 5.1, here in
one step: --max-tokens 29000 counts the pads), each speed lever of ours in a run of its own, on a
synthetic data-bin made on the spot (no data to carry), epoch 1 (every batch a new shape) and the
epochs after it (shapes seen before) apart, and each run's logged losses against ours's default at
the same updates.

    python benchmarks/cli_train.py --out cli.json                                  # one GPU, within --budget-s
    python benchmarks/cli_train.py --device cpu --preset tiny --out smoke.json     # the same runs, tiny: a check

benchmarks/benchmark.py times the two models' steps alone; fairseq-train adds its own work to every
step (its fp16 optimizer's master weights and loss scaling, the gradient norm, the data loader,
logging) and batches sorted by length as fairseq sorts them. Each run is `python -m fairseq_cli.train`
in its own process with its own time limit, with each model's recipe (ours: examples/pipeline.sh's
train_paper; the built-in: transformer_vaswani_wmt_en_de_big with fairseq's inverse_sqrt and adam),
the same seed, batches and updates, batches collated in fairseq's loader process as by default;
tokens/s are target tokens (fairseq's wps) over the logged
intervals of an epoch after its first (which holds the start, or the epoch boundary). A run starts
only while the budget has its limit left. On a GPU machine without fairseq, .gpu_bundle/site
(benchmarks/gpu_bundle.sh) goes on the runs' path. Exits 1 if a run failed or was skipped.
"""

import json
import re
import sys
import tempfile
import time
from pathlib import Path

from attn_only_tools.guards.errors import install_excepthook
from benchmark_parts import recipes
from benchmark_parts.data_bin import make_data
from benchmark_parts.processes import (
    bundle_environment,
    out_of_budget,
    parse_checked,
    run_each,
    run_limited,
    script_parser,
    write_results,
)

REPO = Path(__file__).resolve().parents[1]

# Both runs load the plugin, for its repairs of fairseq (attn_only_plugin/fairseq_fixes.py): the
# same batches (fairseq-fixed drops a last batch), and --bf16 that runs; the built-in's model,
# criterion and optimizer stay fairseq's.
PLUGIN = ["--user-dir", str(REPO / "attn_only_plugin")]
OURS = [*recipes.PAPER, "--warmup-updates", "4000"]  # examples/pipeline.sh's train_paper
# the built-in with shared embeddings (section 3.4), as ours
BUILTIN = ["--share-all-embeddings", *recipes.BUILTIN, "--lr", "0.0005", "--warmup-updates", "4000"]
# name: (what it measures, ours or the built-in, flags of the lever), in the order they run: the
# built-in, ours as it is and ours with every training lever first
RUNS = {
    "builtin": ("fairseq's built-in transformer, its recipe", "builtin", []),
    "ours": ("ours, its recipe (the default path)", "ours", []),
    "ours_levers": (
        "ours with --varlen-attention, --fused-softmax-loss and --compile-layers",
        "ours",
        ["--varlen-attention", "--fused-softmax-loss", "--compile-layers"],
    ),
    "ours_varlen": ("ours with --varlen-attention", "ours", ["--varlen-attention"]),
    "ours_fused_loss": ("ours with --fused-softmax-loss", "ours", ["--fused-softmax-loss"]),
    "ours_compile": ("ours with --compile-layers", "ours", ["--compile-layers"]),
}
# per preset: each model's architecture flags and the data's vocabulary
PRESETS = {
    "big": dict(
        ours=["--arch", "transformer_big"], builtin=["--arch", "transformer_vaswani_wmt_en_de_big"], vocab=37000
    ),
    "tiny": dict(
        ours=["--arch", "transformer_base", "--encoder-layers", "2", "--decoder-layers", "2"]
        + ["--d-model", "64", "--d-ff", "256", "--heads", "4"],
        builtin=["--arch", "transformer", "--encoder-layers", "2", "--decoder-layers", "2"]
        + ["--encoder-embed-dim", "64", "--decoder-embed-dim", "64", "--encoder-ffn-embed-dim", "256"]
        + ["--decoder-ffn-embed-dim", "256", "--encoder-attention-heads", "4", "--decoder-attention-heads", "4"],
        vocab=1000,
    ),
}
# per device: fairseq-train's flags, the precision by default (--precision), the data-bin's sentence
# pairs, the updates, the log interval, each kind of run's time limit (compile: torch.compile's
# first compilations) and the budget
SETTINGS = {
    "cuda": dict(
        flags=["--max-tokens", "29000"],  # ~25k source and ~25k target tokens a step (section 5.1)
        precision="fp16",
        pairs=60000,  # ~50 steps an epoch
        updates=130,
        interval=10,
        limit=dict(plain=120, compile=240),
        budget_s=540,
    ),
    "cpu": dict(  # a smoke run: every run end to end, no speed worth reading
        flags=["--cpu", "--max-tokens", "1200"],
        precision="fp32",
        pairs=400,
        updates=20,
        interval=5,
        limit=dict(plain=300, compile=900),
        budget_s=3600,
    ),
}
PRECISION = {"fp16": ["--fp16"], "bf16": ["--bf16"], "fp32": []}  # fairseq-train's flags


def command(name, preset, device, data) -> list:
    """Run `name`'s fairseq-train command line."""
    _, model, flags = RUNS[name]
    s = SETTINGS[device]
    common = [data, *s["flags"], "--max-update", str(s["updates"]), "--seed", "1", "--log-format", "json"]
    common += ["--log-interval", str(s["interval"]), "--disable-validation", "--no-save"]  # fairseq's loader process
    recipe = OURS if model == "ours" else BUILTIN
    return [sys.executable, "-m", "fairseq_cli.train", *common, *PLUGIN, *PRESETS[preset][model], *recipe, *flags]


def limit(name, device) -> int:
    return SETTINGS[device]["limit"]["compile" if "--compile-layers" in RUNS[name][2] else "plain"]


def intervals(log: str) -> list:
    """fairseq-train's train_inner lines (--log-format json) as dicts of numbers, each with the
    updates it covers ("n")."""
    found = []
    for line in log.splitlines():
        if "| train_inner | {" in line:
            record = {k: float(v) for k, v in json.loads(line.split("| train_inner | ", 1)[1]).items()}
            record["n"] = record["num_updates"] - (found[-1]["num_updates"] if found else 0)
            found.append(record)
    return found


def gpu_gb(log: str) -> float | None:
    """The GPU's memory in GB, from the line of its CUDA environment that fairseq-train logs."""
    found = re.search(r"total memory = ([\d.]+) GB", log)
    return float(found.group(1)) if found else None


def tokens_per_s(records) -> float | None:
    """Target tokens over seconds across logged intervals (an interval's tokens: its mean target
    tokens a batch, wpb, times its updates; its seconds: those tokens over its wps), None if none."""
    if not records:
        return None
    tokens = [r["wpb"] * r["n"] for r in records]
    return sum(tokens) / sum(t / r["wps"] for t, r in zip(tokens, records, strict=True))


def summary(records, gpu_gb=None) -> dict:
    """tokens/s in epoch 1 and in the epochs after it, each without its first logged interval (the
    start or the epoch boundary; the warm-up of torch.compile), the last loss, and on a GPU of
    `gpu_gb` the peak memory allocated (fairseq logs gb_free: the GPU's memory less the peak
    allocated since the last log)."""
    first = [r for r in records if r["epoch"] == 1][1:]
    later = [r for r in records if r["epoch"] > 1]
    later = [r for i, r in enumerate(later) if i and r["epoch"] == later[i - 1]["epoch"]]
    free = [r["gb_free"] for r in records if "gb_free" in r]
    peak = gpu_gb - min(free) if free and gpu_gb else None
    return dict(
        tokens_per_s_epoch_1=tokens_per_s(first),
        tokens_per_s_later=tokens_per_s(later),
        updates=int(records[-1]["num_updates"]) if records else 0,
        epochs=int(records[-1]["epoch"]) if records else 0,
        last_loss=records[-1]["loss"] if records else None,
        peak_gb=peak,
    )


def loss_difference(records, reference) -> float | None:
    """The largest relative difference of the logged losses from `reference`'s at the same updates."""
    theirs = {r["num_updates"]: r["loss"] for r in reference}
    pairs = [(r["loss"], theirs[r["num_updates"]]) for r in records if r["num_updates"] in theirs]
    return max((abs(a - b) / abs(b) for a, b in pairs), default=None)


def run(name, preset, device, data, folder, seconds_left, extra) -> dict:
    """Run `name`: its command, status, seconds, logged intervals and summary; skipped when the budget
    has less than its limit left."""
    cmd, cap = command(name, preset, device, str(data)) + list(extra), limit(name, device)
    result = dict(what=RUNS[name][0], command=" ".join(cmd[1:]), limit_s=cap)
    if skipped := out_of_budget(seconds_left, cap, "run"):
        return dict(result, status=skipped)
    status, seconds, stdout, stderr = run_limited(cmd, cap, bundle_environment(), cwd=folder)
    log = stdout + "\n" + stderr
    records = intervals(log)
    result.update(status=status, seconds=seconds, intervals=records, **summary(records, gpu_gb(log)))
    if status == "ok" and not records:
        result["status"] = "failed: no train_inner line in fairseq-train's log"
    return result


def table(runs) -> str:
    """The runs as a Markdown table."""
    head = "| run | what | tokens/s, epoch 1 (new shapes) | tokens/s, later epochs (seen shapes) | "
    head += "later / built-in | last loss | losses vs ours | peak GPU memory |"
    lines = [head, "|" + "---|" * 8]
    builtin = runs.get("builtin", {}).get("tokens_per_s_later")
    for name, r in runs.items():
        if r["status"] != "ok":
            lines.append(f"| {name} | {r['what']} | {r['status']} |" + " |" * 5)
            continue
        ratio = f"{r['tokens_per_s_later'] / builtin:.2f}x" if builtin and r["tokens_per_s_later"] else ""
        diff = r.get("loss_vs_ours")
        cells = [
            _count(r["tokens_per_s_epoch_1"]),
            _count(r["tokens_per_s_later"]),
            ratio,
            f"{r['last_loss']:.3f} at update {r['updates']}",
            "" if diff is None else f"{diff:.1e} apart at most",
            "" if r["peak_gb"] is None else f"{r['peak_gb']:.1f} GB",
        ]
        lines.append(f"| {name} | {r['what']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _count(x) -> str:
    return "" if x is None else f"{x:.0f}"


def main(argv=None) -> None:
    p = script_parser(__doc__, SETTINGS, "runs")
    p.add_argument("--preset", choices=sorted(PRESETS), default="big", help="big: transformer_big (default)")
    p.add_argument("--runs", nargs="+", choices=list(RUNS), default=list(RUNS), help="the runs (default all)")
    p.add_argument(
        "--precision",
        choices=sorted(PRECISION),
        help="fairseq-train's: fp16 (--fp16, the default on cuda), bf16 (--bf16) or fp32 (the default on cpu)",
    )
    p.add_argument(
        "--dropout", type=float, help="every run's --dropout (0: no draws, which compiled layers make otherwise)"
    )
    a = parse_checked(p, argv, SETTINGS)
    if a.dropout is not None and not 0 <= a.dropout < 1:
        sys.exit(f"error: --dropout must be in [0, 1), got {a.dropout}")
    precision = a.precision or SETTINGS[a.device]["precision"]
    if precision == "fp16" and a.device == "cpu":
        sys.exit("error: --precision fp16 needs a GPU (fairseq-train --fp16): on a CPU give bf16 or fp32")
    extra = PRECISION[precision] + ([] if a.dropout is None else ["--dropout", str(a.dropout)])
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cli-train-") as folder:
        data = Path(folder) / "data-bin"
        s = SETTINGS[a.device]
        print(f"[cli_train] a data-bin of {s['pairs']} random sentence pairs", file=sys.stderr, flush=True)
        make_data(data, PRESETS[a.preset]["vocab"], s["pairs"])
        what = {name: RUNS[name][0] for name in a.runs}
        left = a.budget_s - (time.perf_counter() - start)
        runs = run_each(
            "cli_train", a.runs, what, lambda n, t: run(n, a.preset, a.device, data, folder, t, extra), left
        )
    reference = runs.get("ours", {}).get("intervals")
    for name, r in runs.items():  # ours's levers only: the built-in starts from other weights
        if reference and r.get("intervals") and name != "ours" and RUNS[name][1] == "ours":
            r["loss_vs_ours"] = loss_difference(r["intervals"], reference)
    results = dict(device=a.device, preset=a.preset, precision=precision, budget_s=a.budget_s)
    results.update(seconds=round(time.perf_counter() - start, 1), settings=SETTINGS[a.device])
    write_results(a.out, dict(results, runs=runs, table=table(runs)), "runs")


if __name__ == "__main__":
    install_excepthook()  # an error that ends the run is one `error:` line
    main()
