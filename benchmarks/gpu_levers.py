"""Each speed lever of ours that is not the paper's, one row each, against fairseq's built-in in the
same row: eager, --compile-layers, attention on the packed rows (--varlen-attention, with a check of
its loss and gradients against the padded path), the loss from the logits (--fused-softmax-loss),
these three together, lengths padded to buckets, bf16, the fixed-size decoding cache, the batched
beam search, its CUDA-graphed decoder step and its whole step graphed, for transformer_big training
at ~25k target tokens a step (1280 sentences) on seen and fresh shapes with peak memory, and beam-4
generation; then three rows that profile where the time of the eager training step and of the
graphed beam searches goes (benchmark.py --profile); one results file (JSON, the tables inside).

    python benchmarks/gpu_levers.py --out levers.json                             # one GPU, within --budget-s
    python benchmarks/gpu_levers.py --device cpu --preset tiny --out smoke.json   # the same rows, tiny: a check

Each row is one benchmarks/benchmark.py run in its own process with its own time limit (the two models
in turns, docs/speed.md), so a row that fails or runs out of time leaves the others; a row starts
only while the budget has its limit left, else it is recorded as skipped. Rows run in the order of
ROWS, most wanted first. On a GPU machine without fairseq, .gpu_bundle/site (benchmarks/gpu_bundle.sh)
goes on the measuring processes' path. Exits 1 if a row failed or was skipped.
"""

import json
import sys
import time
from pathlib import Path

from attn_only_tools.guards.errors import install_excepthook
from benchmark_parts.processes import (
    bundle_environment,
    out_of_budget,
    parse_checked,
    run_each,
    run_limited,
    script_parser,
    write_results,
)
from benchmark_parts.profile import CATEGORIES, host_most
from benchmark_parts.report import describe_compile

HERE = Path(__file__).resolve().parent

# name: (what it measures, parts, benchmark.py flags of the lever)
ROWS = {
    "train_eager_seen": ("ours eager; shapes seen before (4 batches cycled)", "training", ["--batching", "random"]),
    "train_compile_seen": (
        "--compile-layers; seen shapes",
        "training",
        ["--batching", "random", "--compile-layers", "BACKEND"],
    ),
    "train_varlen_seen": (
        "--varlen-attention (attention on the packed rows); seen shapes",
        "training",
        ["--batching", "random", "--varlen-attention"],
    ),
    "train_varlen_fresh": (
        "--varlen-attention; every step a new shape",
        "training",
        ["--batching", "fresh", "--varlen-attention"],
    ),
    "train_fused_loss_seen": (
        "--fused-softmax-loss (the loss from the logits, compiled); seen shapes",
        "training",
        ["--batching", "random", "--fused-softmax-loss"],
    ),
    "train_varlen_fused_compile_seen": (
        "--varlen-attention, --fused-softmax-loss and --compile-layers together; seen shapes",
        "training",
        ["--batching", "random", "--varlen-attention", "--fused-softmax-loss", "--compile-layers", "BACKEND"],
    ),
    "gen_eager": ("beam 4, ours eager (first repeat new shapes, later ones seen)", "generation", []),
    "gen_static_cache": ("beam 4, ours with --static-decoding-cache", "generation", ["--static-cache"]),
    "gen_batched_search": (
        "beam 4, ours with --batched-search (a batch that keeps its size)",
        "generation",
        ["--batched-search"],
    ),
    "gen_cuda_graph": (
        "beam 4, ours with --batched-search, --static-decoding-cache and --cuda-graph-decoding",
        "generation",
        ["--static-cache", "--batched-search", "--cuda-graph"],
    ),
    "gen_cuda_graph_search": (
        "beam 4, ours with --batched-search, --static-decoding-cache and --cuda-graph-search (the whole step graphed)",
        "generation",
        ["--static-cache", "--batched-search", "--cuda-graph-search"],
    ),
    "gen_cuda_graph_search_32": (
        "gen_cuda_graph_search in 8 batches of 32 sentences, sources padded to multiples of 8 (3 shapes: a shape's "
        "later batches replay its graphs)",
        "generation",
        ["--static-cache", "--batched-search", "--cuda-graph-search", "--batch-size", "32", "--pad-to-multiple", "8"],
    ),
    "gen_cuda_graph_search_reorder": (
        "gen_cuda_graph_search with --beam-reorder-kernel (the caches' beam reorder by a Triton kernel)",
        "generation",
        ["--static-cache", "--batched-search", "--cuda-graph-search", "--beam-reorder-kernel"],
    ),
    "gen_cuda_graph_search_decode": (
        "gen_cuda_graph_search with --decode-attention-kernel (self-attention over the written positions only)",
        "generation",
        ["--static-cache", "--batched-search", "--cuda-graph-search", "--decode-attention-kernel"],
    ),
    "gen_cuda_graph_search_kernels": (
        "gen_cuda_graph_search with both Triton kernels (--beam-reorder-kernel, --decode-attention-kernel)",
        "generation",
        [
            "--static-cache",
            "--batched-search",
            "--cuda-graph-search",
            "--beam-reorder-kernel",
            "--decode-attention-kernel",
        ],
    ),
    "train_bucket_compile_fresh": (
        "--compile-layers, lengths padded to multiples of 8; fresh shapes",
        "training",
        ["--batching", "fresh", "--compile-layers", "BACKEND", "--pad-to-multiple", "8"],
    ),
    "train_eager_fresh": ("ours eager; every step a new shape", "training", ["--batching", "fresh"]),
    "train_bf16_seen": (
        "bf16 autocast, both models; seen shapes",
        "training",
        ["--batching", "random", "--half", "bfloat16"],
    ),
    "train_compile_fresh": (
        "--compile-layers; every step a new shape",
        "training",
        ["--batching", "fresh", "--compile-layers", "BACKEND"],
    ),
    "train_bucket_fresh": (
        "lengths padded to multiples of 8, both models; fresh shapes",
        "training",
        ["--batching", "fresh", "--pad-to-multiple", "8"],
    ),
    "gen_bf16": ("beam 4, both models in bf16", "generation", ["--half", "bfloat16"]),
    # where the time goes, after fewer timed updates than train_eager_seen's (the profile needs no more)
    "profile_train": (
        "train_eager_seen, then 3 steps of each model under torch.profiler",
        "training",
        ["--batching", "random", "--updates", "2", "--repeats", "1", "--profile"],
    ),
    "profile_gen_cuda_graph": (
        "gen_cuda_graph, then one batch of each model under torch.profiler",
        "generation",
        ["--static-cache", "--batched-search", "--cuda-graph", "--profile"],
    ),
    "profile_gen_cuda_graph_search": (
        "gen_cuda_graph_search, then one batch of each model under torch.profiler",
        "generation",
        ["--static-cache", "--batched-search", "--cuda-graph-search", "--profile"],
    ),
}
# per device: the benchmark's common flags, then those of training and of generation rows, and each
# kind of row's time limit in seconds (compile rows, --compile-layers or --fused-softmax-loss:
# torch.compile's first compilations; "profile":
# the seconds a --profile row gets beyond its kind's, for the profiled steps and reading their events)
SETTINGS = {
    "cuda": dict(
        common=["--device", "cuda", "--amp", "--no-ctranslate2"],
        training=["--batch-size", "1280", "--updates", "5", "--repeats", "2", "--warmup", "2"],  # ~25k tokens
        generation=["--batch-size", "256", "--generate", "256", "--repeats", "2", "--batching", "sorted"],
        limit=dict(training=75, compile=150, generation=60, profile=45),
        compile_backend="inductor",
        budget_s=480,
    ),
    "cpu": dict(  # a smoke run: the rows run end to end, no speed worth reading
        common=["--device", "cpu", "--no-ctranslate2", "--peak-tflops", "1"],
        training=["--batch-size", "4", "--updates", "1", "--repeats", "1", "--warmup", "0"],
        generation=["--batch-size", "4", "--generate", "4", "--repeats", "1"],
        limit=dict(training=300, compile=600, generation=300, profile=300),
        compile_backend="aot_eager",  # the same traced graphs without inductor's kernels (minutes on 2 cores)
        budget_s=3600,
    ),
}


def command(name, preset, device, json_out):
    """The benchmark.py command line of row `name`."""
    _, parts, flags = ROWS[name]
    s = SETTINGS[device]
    head = [sys.executable, str(HERE / "benchmark.py"), "--preset", preset, *s["common"], "--parts", parts]
    flags = [s["compile_backend"] if f == "BACKEND" else f for f in flags]
    return head + s[parts] + flags + ["--out", str(json_out)]


def limit(name, device) -> int:
    """Row `name`'s time limit in seconds."""
    _, parts, flags = ROWS[name]
    limits = SETTINGS[device]["limit"]
    compiles = "--compile-layers" in flags or "--fused-softmax-loss" in flags  # torch.compile's first compilations
    return limits["compile" if compiles else parts] + (limits["profile"] if "--profile" in flags else 0)


def run_row(name, preset, device, folder, seconds_left):
    """Row `name`: its command, exit status, seconds, the benchmark's JSON or the last line of its
    error; skipped when the budget has less than its limit left."""
    out = Path(folder) / f"{name}.json"
    cmd, cap = command(name, preset, device, out), limit(name, device)
    row = dict(what=ROWS[name][0], command=" ".join(cmd[1:]), limit_s=cap)
    if skipped := out_of_budget(seconds_left, cap, "row"):
        return dict(row, status=skipped)
    status, seconds, _, _ = run_limited(cmd, cap, bundle_environment())
    row.update(status=status, seconds=seconds)
    if status == "ok" and not out.exists():
        row["status"] = "failed: no results file"
    return dict(row, result=json.loads(out.read_text())) if row["status"] == "ok" else row


def cells(row) -> list:
    """A row's table cells: ours, built-in, ratio (per repeat), peak memory, and for generation the
    identical hypotheses (and the Triton kernels' checks), for --varlen-attention its check
    (packed against padded path, one batch), for the compiled levers what torch.compile made."""
    if row["status"] != "ok":
        return [row["status"]] + [""] * 4
    r = row["result"]
    t, g = r["training"], r["generation"]
    if t:
        ours, theirs = t["ours"], t["fairseq"]
        ratios = ", ".join(f"{x:.2f}" for x in t["ratio_per_repeat"])
        checks = [varlen_cell(ours.get("varlen_check"))]
        if "torch_compile" in ours:
            checks.append("compile: " + describe_compile(ours["torch_compile"]))
        return [
            f"{ours['tokens_per_s']:.0f} tokens/s",
            f"{theirs['tokens_per_s']:.0f}",
            f"{ours['tokens_per_s'] / theirs['tokens_per_s']:.2f}x ({ratios})",
            f"{ours['peak_mib']:.0f} / {theirs['peak_mib']:.0f} MiB",
            "; ".join(filter(None, checks)),
        ]
    ratios = ", ".join(f"{x:.2f}" for x in g["ratio_per_repeat"])
    return [
        f"{g['ours']['sentences_per_s']:.1f} sentences/s",
        f"{g['fairseq']['sentences_per_s']:.1f}",
        f"{g['ours']['sentences_per_s'] / g['fairseq']['sentences_per_s']:.2f}x ({ratios})",
        "",
        f"{g['identical_sentences']} of {g['sentences']}"
        + captures_cell(g.get("graphs_captured_per_repeat"))
        + reorder_cell(g.get("reorder_kernel_check"))
        + decode_cell(g.get("decode_kernel_check")),
    ]


def reorder_cell(check) -> str:
    """--beam-reorder-kernel's check in a few words: whether the kernel ran, gave torch's reorder
    of a test buffer, and how often the timed searches called it; "" without one."""
    if not check:
        return ""
    if not check["kernel_runs"]:
        return "; reorder kernel: cannot run here (torch's ops)"
    same = "equal to" if check["equal"] else "NOT equal to"
    return f"; reorder kernel: {same} torch's reorder, {check['calls']} calls"


def decode_cell(check) -> str:
    """--decode-attention-kernel's check in a few words: whether the kernel ran, how far its output
    was from torch's attention on a test step, and how often the timed searches called it."""
    if not check:
        return ""
    if not check["kernel_runs"]:
        return "; decode kernel: cannot run here (torch's)"
    return f"; decode kernel: {check['max_abs_difference']:.1e} from torch's attention, {check['calls']} calls"


def captures_cell(per_repeat) -> str:
    """The CUDA graphs a graphed search captured in each repeat, when it captured any: "" else."""
    if not per_repeat or not any(per_repeat):
        return ""
    return "; graphs captured per repeat: " + ", ".join(map(str, per_repeat))


def varlen_cell(check) -> str:
    """--varlen-attention's check in a few words: how far its loss and gradients are from the padded
    path's, and how many attention calls took the packed path; "" without one."""
    if not check:
        return ""
    return (
        f"varlen check: loss {check['loss_relative_difference']:.1e} apart, gradients "
        f"{check['gradient_relative_difference_max']:.1e}, {check['packed_attention_calls']} packed calls"
    )


def table(rows) -> str:
    """The rows as a Markdown table; below it, for the rows with a profile, where a step's time goes."""
    head = (
        "| row | what | ours | built-in | ours / built-in (repeats) | peak memory ours / built-in | identical; checks |"
    )
    lines = [head, "|" + "---|" * 7]
    lines += [f"| {name} | {row['what']} | " + " | ".join(cells(row)) + " |" for name, row in rows.items()]
    profiles = profile_lines(rows)
    return "\n".join(lines + (["", *profiles] if profiles else []))


def profile_lines(rows) -> list:
    """A Markdown table of the rows' profiles (benchmark.py --profile), one line per model and part:
    per step (a generation batch) the wall time, the device time by category (ms), the busy fraction,
    the kernels run, and the host's own time in ops and CUDA calls with the three names that took most
    of it; [] when no row has one."""
    body = []
    for name, row in rows.items():
        result = row.get("result") or {}
        for part in ("training", "generation"):
            for which in ("ours", "fairseq"):
                p = (result.get(part) or {}).get(which, {}).get("profile")
                if p:
                    kinds = " | ".join(f"{p['ms_per_step'][kind]:.1f}" for kind in CATEGORIES)
                    wall, device = p["wall_ms_per_step"], p["device_ms_per_step"]
                    body.append(
                        f"| {name} | {which} | {p['clock']} | {wall:.1f} | {device:.1f} | {p['busy_fraction']:.0%}"
                        f" | {p['kernels_per_step']:.0f} | {kinds} | {p['host_ms_per_step']:.1f} | {host_most(p)} |"
                    )
    if not body:
        return []
    head = "| row | model | clock | wall ms | device ms | busy | kernels | " + " | ".join(CATEGORIES)
    head += " | host ms | host: most |"
    return [head, "|" + "---|" * (9 + len(CATEGORIES)), *body]


def main(argv=None) -> None:
    p = script_parser(__doc__, SETTINGS, "rows")
    p.add_argument("--preset", default="big", help="benchmarks/benchmark.py's --preset (default big, transformer_big)")
    p.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS), help="the rows to run (default all)")
    a = parse_checked(p, argv, SETTINGS)
    import tempfile

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu-levers-") as folder:
        what = {name: ROWS[name][0] for name in a.rows}
        rows = run_each("gpu_levers", a.rows, what, lambda n, t: run_row(n, a.preset, a.device, folder, t), a.budget_s)
    results = dict(device=a.device, preset=a.preset, budget_s=a.budget_s, seconds=round(time.perf_counter() - start, 1))
    write_results(a.out, dict(results, rows=rows, table=table(rows)), "rows")


if __name__ == "__main__":
    install_excepthook()  # an error that ends the run is one `error:` line
    main()
