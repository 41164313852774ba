"""fairseq-generate itself, ours against the built-in on the same trained weights: beam 4 (section
6.1's search settings) through the real command line, ours with its search levers, sentences/s by
fairseq-generate's own timer, in turns, and how many hypotheses are the built-in's.

    python benchmarks/cli_generate.py --out gen.json                                 # one GPU, within --budget-s
    python benchmarks/cli_generate.py --device cpu --preset tiny --out smoke.json    # the same runs, tiny: a check

benchmarks/benchmark.py decodes with random weights, so every hypothesis runs to the length cap
(input + 50 tokens) and no sentence of a batch ends before another: the case most favourable to a
search whose batch keeps its size (--batched-search), and the longest search over which to spread
a CUDA graph's capture. A translation model ends its hypotheses near the reference's length, at
different steps. So here a model of transformer_big's shape (fairseq's
transformer_vaswani_wmt_en_de_big with learned positions, which both sides express) is first trained
by fairseq-train for a few hundred updates on a synthetic task it learns that fast (the target is
a copy of the source; benchmark_parts/data_bin.py), made on the spot; its checkpoint is converted to
ours (attn-only-convert-checkpoint, the same function); then each run is one fairseq-generate
process over the same test sentences in batches of one shape (--batch-size with
--required-seq-len-multiple, as the kept graphs want), the runs in turns, --repeats times, who goes
first rotating. The table gives per run the sentences/s of each repeat and their median, the ratio
to the built-in's, how many of its best hypotheses are the built-in's, and what the model learnt:
its hypotheses' mean length over the references' (a random model's is ~3) and the exact copies.
A run starts only while the budget has its limit left. Exits 1 if a step failed or was skipped.
"""

import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from attn_only_tools import generate_log
from attn_only_tools.guards.errors import install_excepthook
from benchmark_parts import recipes
from benchmark_parts.data_bin import make_data
from benchmark_parts.processes import (
    bundle_environment,
    out_of_budget,
    parse_checked,
    run_limited,
    script_parser,
    write_results,
)

REPO = Path(__file__).resolve().parents[1]
PLUGIN = ["--user-dir", str(REPO / "attn_only_plugin")]  # both: the plugin's repairs (all sentences kept)
STATIC = ["--model-overrides", "{'static_decoding_cache': True}"]
# name: (what it measures, whose checkpoint, fairseq-generate flags of the lever)
RUNS = {
    "builtin": ("fairseq's built-in, its search", "builtin", []),
    "ours": ("ours on the same weights, fairseq's search", "ours", []),
    "ours_batched": ("ours, --batched-search", "ours", ["--task", "translation_paper", "--batched-search"]),
    "ours_graph": (
        "ours, --batched-search, fixed-size caches, --cuda-graph-search",
        "ours",
        ["--task", "translation_paper", "--batched-search", *STATIC, "--cuda-graph-search"],
    ),
    "ours_kernels": (
        "ours_graph with --beam-reorder-kernel and --decode-attention-kernel",
        "ours",
        ["--task", "translation_paper", "--batched-search", *STATIC, "--cuda-graph-search"]
        + ["--beam-reorder-kernel", "--decode-attention-kernel"],
    ),
}
DEFAULT_RUNS = ["builtin", "ours_graph", "ours_kernels"]
# the trained model: fairseq's architecture (learned positions, shared embeddings: what ours expresses)
PRESETS = {
    "big": dict(arch=["--arch", "transformer_vaswani_wmt_en_de_big"], vocab=37000, words=2000),
    "tiny": dict(
        arch=["--arch", "transformer", "--encoder-layers", "2", "--decoder-layers", "2"]
        + ["--encoder-embed-dim", "64", "--decoder-embed-dim", "64", "--encoder-ffn-embed-dim", "256"]
        + ["--decoder-ffn-embed-dim", "256", "--encoder-attention-heads", "4", "--decoder-attention-heads", "4"],
        vocab=1000,
        words=200,
    ),
}
TRAIN = [
    "--encoder-learned-pos",
    "--decoder-learned-pos",
    "--share-all-embeddings",
    *recipes.BUILTIN,
    "--dropout",
    "0.1",
    "--seed",
    "1",
    "--no-epoch-checkpoints",
    "--no-save-optimizer-state",  # a checkpoint of the weights: the conversion drops the rest
    "--disable-validation",
    "--log-format",
    "simple",
]
SEARCH = ["--gen-subset", "test", "--beam", "4", "--lenpen", "0.6", "--max-len-a", "1", "--max-len-b", "50"]
# per device: the data, fairseq-train's and fairseq-generate's flags, repeats, each step's time
# limit and the budget
SETTINGS = {
    "cuda": dict(
        pairs=60000,
        test=1024,
        train=["--fp16", "--max-tokens", "29000", "--max-update", "300", "--lr", "3e-4", "--warmup-updates", "100"],
        generate=["--fp16", "--batch-size", "128", "--required-seq-len-multiple", "8"],
        repeats=2,
        limit=dict(train=150, convert=60, generate=60),
        budget_s=560,
    ),
    "cpu": dict(  # a smoke run: every step end to end, no speed worth reading
        pairs=2000,
        test=32,
        train=["--cpu", "--max-tokens", "2000", "--max-update", "300", "--lr", "2e-3", "--warmup-updates", "50"],
        generate=["--cpu", "--batch-size", "16", "--required-seq-len-multiple", "8"],
        repeats=1,
        limit=dict(train=300, convert=120, generate=300),
        budget_s=3600,
    ),
}
TRANSLATED = re.compile(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in [\d.]+s \(([\d.]+) sentences/s")


def commands(name, preset, device, folder: Path) -> list:
    """Run `name`'s fairseq-generate command line."""
    _, model, flags = RUNS[name]
    path = folder / ("ours.pt" if model == "ours" else "checkpoints/checkpoint_last.pt")
    s = SETTINGS[device]
    return [sys.executable, "-m", "fairseq_cli.generate", str(folder / "data-bin"), "--path", str(path)] + (
        SEARCH + s["generate"] + PLUGIN + flags
    )


def prepare(preset, device, folder: Path) -> list:
    """The command lines that make the trained checkpoint and ours's conversion of it, in order."""
    s = SETTINGS[device]
    train = [sys.executable, "-m", "fairseq_cli.train", str(folder / "data-bin"), *PLUGIN, *PRESETS[preset]["arch"]]
    train += TRAIN + s["train"] + ["--save-dir", str(folder / "checkpoints")]
    convert = [sys.executable, "-m", "attn_only_plugin.cli.convert_checkpoint", "--to", "ours"]
    convert += [str(folder / "checkpoints" / "checkpoint_last.pt"), str(folder / "ours.pt")]
    return [("train", train), ("convert", convert)]


def read_generation(log: str) -> dict:
    """sentences/s (fairseq-generate's timer: the searches alone) and the best hypothesis of every
    sentence, with its reference, from fairseq-generate's output."""
    found = TRANSLATED.search(log)
    sentences = generate_log.parse(log.splitlines())
    return dict(
        sentences_per_s=float(found.group(3)) if found else None,
        hypotheses={i: s.hypothesis for i, s in sentences.items()},
        references={i: s.target for i, s in sentences.items()},
    )


def learnt(hypotheses: dict, references: dict) -> dict:
    """What the model learnt: its hypotheses' mean length over the references', exact copies."""
    ids = [i for i in hypotheses if hypotheses[i] is not None and references.get(i) is not None]
    length = sum(len(hypotheses[i].split()) for i in ids) / max(1, sum(len(references[i].split()) for i in ids))
    return dict(length_ratio=length, exact=sum(hypotheses[i] == references[i] for i in ids), sentences=len(ids))


def table(runs, model) -> str:
    """The runs as a Markdown table, what the model learnt below it."""
    head = "| run | what | sentences/s (repeats) | ratio to the built-in | best hypotheses as the built-in's |"
    lines = [head, "|" + "---|" * 5]
    base = runs.get("builtin", {}).get("median")
    for name, r in runs.items():
        speeds = ", ".join(f"{x:.1f}" for x in r["sentences_per_s"]) or r["status"]
        ratio = f"{r['median'] / base:.2f}x" if base and r.get("median") else ""
        same = f"{r['identical']} of {r['sentences']}" if "identical" in r else ""
        median = f"**{r['median']:.1f}** ({speeds})" if r.get("median") else speeds
        lines.append(f"| {name} | {r['what']} | {median} | {ratio} | {same} |")
    if model:
        lines += ["", f"The model's hypotheses (built-in): mean length {model['length_ratio']:.2f}x the references',"]
        lines[-1] += f" {model['exact']} of {model['sentences']} exact copies."
    return "\n".join(lines)


def train_and_convert(preset, device, folder: Path, budget_s, start, env) -> dict:
    """The trained checkpoint and ours's conversion of it: {step: its status, seconds and the last
    line of fairseq-train's log}, stopping at a step that fails or that the budget cannot hold."""
    steps = {}
    for step, cmd in prepare(preset, device, folder):
        cap, left = SETTINGS[device]["limit"][step], budget_s - (time.perf_counter() - start)
        print(f"[cli_generate] {step}: {' '.join(cmd[1:4])} ...", file=sys.stderr, flush=True)
        if skipped := out_of_budget(left, cap, "step"):
            steps[step] = dict(status=skipped)
            break
        status, seconds, out, err = run_limited(cmd, cap, env)
        logged = [line for line in (out + err).splitlines() if "| train_inner |" in line or "| train |" in line]
        steps[step] = dict(status=status, seconds=seconds, last_log=logged[-1][-300:] if logged else None)
        if status != "ok":
            break
    return steps


def generate_in_turns(names, preset, device, folder: Path, budget_s, start, env) -> dict:
    """Each run --repeats times, in turns, who goes first rotating: {run: its command, status,
    sentences/s per repeat, and its first repeat's best hypotheses and references}. A run that
    fails is not run again; one that the budget cannot hold keeps the repeats it has."""
    s = SETTINGS[device]
    runs = {n: dict(what=RUNS[n][0], command=" ".join(commands(n, preset, device, folder)[1:])) for n in names}
    for r in runs.values():
        r.update(status="ok", sentences_per_s=[])
    for repeat in range(s["repeats"]):
        for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
            cap, left, r = s["limit"]["generate"], budget_s - (time.perf_counter() - start), runs[name]
            if r["status"] != "ok" or left < cap:
                continue
            print(f"[cli_generate] {name}, repeat {repeat + 1}", file=sys.stderr, flush=True)
            status, _, out, err = run_limited(commands(name, preset, device, folder), cap, env)
            got = read_generation(out + "\n" + err)
            if status == "ok" and got["sentences_per_s"] is None:
                status = "failed: no 'Translated' line in fairseq-generate's output"
            r["status"] = status
            if status == "ok":
                r["sentences_per_s"].append(got["sentences_per_s"])
                r.setdefault("hypotheses", got["hypotheses"])
                r.setdefault("references", got["references"])
    for r in runs.values():
        if r["status"] == "ok" and not r["sentences_per_s"]:
            r["status"] = "skipped: the budget ran out"
    return runs


def main(argv=None) -> None:
    p = script_parser(__doc__, SETTINGS, "steps and runs")
    p.add_argument("--preset", choices=sorted(PRESETS), default="big", help="big: transformer_big's shape (default)")
    p.add_argument("--runs", nargs="+", choices=list(RUNS), default=DEFAULT_RUNS, help=f"default {DEFAULT_RUNS}")
    a = parse_checked(p, argv, SETTINGS)
    s, start = SETTINGS[a.device], time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cli-generate-") as folder:
        folder = Path(folder)
        print(f"[cli_generate] a data-bin of {s['pairs']} copied sentence pairs", file=sys.stderr, flush=True)
        preset = PRESETS[a.preset]
        make_data(folder / "data-bin", preset["vocab"], s["pairs"], kind="copy", words=preset["words"], test=s["test"])
        env = bundle_environment()
        steps = train_and_convert(a.preset, a.device, folder, a.budget_s, start, env)
        ok = all(step["status"] == "ok" for step in steps.values())  # it stops at the first that is not
        names = list(dict.fromkeys(a.runs))
        runs = generate_in_turns(names, a.preset, a.device, folder, a.budget_s, start, env) if ok else {}
    builtin = runs.get("builtin", {}).get("hypotheses")
    for r in runs.values():
        if r["sentences_per_s"]:
            r["median"] = statistics.median(r["sentences_per_s"])
        if builtin and r.get("hypotheses"):
            r["identical"] = sum(r["hypotheses"].get(i) == h for i, h in builtin.items())
            r["sentences"] = len(builtin)
    model = learnt(builtin, runs["builtin"]["references"]) if builtin else None
    results = dict(device=a.device, preset=a.preset, budget_s=a.budget_s, seconds=round(time.perf_counter() - start, 1))
    text = table(runs, model) if runs else "; ".join(f"{k}: {v['status']}" for k, v in steps.items())
    if steps.get("train", {}).get("last_log"):
        text += f"\nfairseq-train's last line: {steps['train']['last_log']}"
    write_results(a.out, dict(results, steps=steps, model=model, settings=s, runs=runs, table=text), "steps", "runs")


if __name__ == "__main__":
    install_excepthook()  # an error that ends the run is one `error:` line
    main()
