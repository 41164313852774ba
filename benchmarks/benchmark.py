"""Side-by-side speed of our Transformer and fairseq's built-in `transformer` on the same work:
both get the same sizes, weights and batches, train in turns and translate the same sentences
with beam 4, and one table gives training tokens/s, peak memory, model FLOP/s, the optimizer
step and beam-4 sentences/s, ours against the built-in (JSON with --out).

    python benchmarks/benchmark.py --preset cpu --out benchmark.json      # 2-core CPU shape, fp32
    python benchmarks/benchmark.py --preset base --device cuda --amp        # the paper's base shape

Both models get identical sizes, weights and batches, and take turns (shared and virtual
machines drift in speed by 10-30% within minutes, which one-after-the-other runs read as a
difference between the models). Each measurement is its own module in benchmarks/benchmark_parts/,
readable alone: common.py (the two models, the batches: --batching random, sorted or fresh, the turns),
training.py (tokens/s, model FLOP/s and MFU, each model on its recipe's optimizer or
--optimizer's), memory.py (peak memory, a fresh process per model; --checkpoint-activations),
generation.py (beam 4 with fairseq's SequenceGenerator, identical hypotheses, and the CTranslate2
export in the same turns unless --no-ctranslate2), profile.py (--profile: where a step's time
goes, by kind of work, under torch.profiler), processes.py (a measurement in its own process),
report.py (the table). This file is the command: its flags, the table, the JSON.
A script, not a timed test. Counts that cannot be measured (--updates, --repeats, --batch-size,
--generate below 1, --warmup below 0, --peak-tflops not above 0) are refused before anything
runs; a measuring process that fails ends the benchmark with its one-line error
(ATTN_ONLY_TRACEBACK=1 prints its traceback too), one that dies with its exit status.
"""

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
from pathlib import Path

from attn_only_tools.guards.errors import PluginError
from benchmark_parts.common import BATCH_SIZE, FRESH_SHAPES, PRESETS, SPEED_PATHS, make_batches, pad_share  # noqa: F401
from benchmark_parts.common import levers as lever_defaults
from benchmark_parts.generation import generation, importable
from benchmark_parts.memory import train_memory
from benchmark_parts.processes import SDPA_BACKENDS, in_process, sdpa_restricted
from benchmark_parts.report import table
from benchmark_parts.training import model_flops, optimizer_for, peak_tflops, train_speed  # noqa: F401


def check_settings(updates, warmup, repeats, batch_size=None, n_gen=None, peak=None, batching="random") -> None:
    """Refuse counts that measure nothing (or divide by zero), or more fresh shapes than there
    are, before any process starts."""
    for flag, value, least in (
        ("--updates", updates, 1),
        ("--warmup", warmup, 0),
        ("--repeats", repeats, 1),
        ("--batch-size", batch_size, 1),
        ("--generate", n_gen, 1),
    ):
        if value is not None and value < least:
            raise ValueError(
                f"{flag} must be >= {least}, got {value}"
                + (": leave it out for the preset's" if flag in ("--batch-size", "--generate") else "")
            )
    steps = 2 * (warmup + repeats * updates)  # each model its own shapes
    if batching == "fresh" and steps > len(FRESH_SHAPES):
        raise ValueError(
            f"--batching fresh has {len(FRESH_SHAPES)} batch shapes and 2 x (--warmup + --repeats x --updates) = "
            f"{steps} steps would need more: fewer --updates or --repeats"
        )
    if peak is not None and not peak > 0:
        raise ValueError(f"--peak-tflops must be > 0, got {peak}: leave it out when the device's peak is not known")


def run(
    preset,
    device="cpu",
    amp=False,
    updates=5,
    warmup=2,
    repeats=3,
    batch_size=None,
    n_gen=None,
    parts=("training", "generation"),
    batching="random",
    peak=None,
    optimizer="recipe",
    recompute=False,
    ct2=True,
    without=(),
    sdpa=(),
    levers=None,
    profile=False,
    trace=None,
):
    """Both measurements; batch_size defaults to the preset's (BATCH_SIZE), n_gen to two batches;
    ours without the speed paths named in `without` (SPEED_PATHS), to measure what each buys; with
    `sdpa` (names in SDPA_BACKENDS), torch's fused attention restricted to those backends while it
    measures (the caller's settings are back on return); `levers`: the speed levers that are not
    the paper's to turn on (benchmarks/common.py's levers: compile, static_cache, pad_to, half,
    batched_search, cuda_graph, graph_search, reorder_kernel, decode_kernel, varlen, fused_loss);
    `profile`: each model's steps once more under torch.profiler after the timed ones (profile.py),
    with `trace` a folder for their Chrome traces."""
    check_settings(updates, warmup, repeats, batch_size, n_gen, peak, batching)
    shape = dict(PRESETS[preset], without=sorted(without)) if without else PRESETS[preset]
    if levers:
        shape = dict(shape, levers=levers)
    batch_size = BATCH_SIZE[preset] if batch_size is None else batch_size
    n_gen = 2 * batch_size if n_gen is None else n_gen
    peak = peak_tflops(device, amp, peak)
    train, gen = {}, {}
    # here (generation) and, through the environment, in every measuring process; restored after
    with sdpa_restricted(sdpa):
        if "training" in parts:
            train = training_part(
                shape,
                device,
                amp,
                updates,
                warmup,
                repeats,
                batch_size,
                batching,
                peak,
                optimizer,
                recompute,
                profile,
                trace,
            )
        if "generation" in parts:
            gen = generation_part(shape, device, amp, n_gen, batch_size, batching, repeats, ct2, profile, trace)
    return dict(
        preset=preset,
        shape=shape,
        device=device,
        amp=amp,
        threads=int(os.environ.get("OMP_NUM_THREADS", 0)),
        batching=batching,
        batch_size=batch_size,
        peak_tflops=peak,
        sdpa_backends=sorted(sdpa) or "torch's choice",
        training=train,
        generation=gen,
    )


def training_part(
    shape,
    device,
    amp,
    updates,
    warmup,
    repeats,
    batch_size,
    batching,
    peak,
    optimizer,
    recompute,
    profile=False,
    trace=None,
):
    """Training speed (benchmarks/training.py) and each model's peak memory (benchmarks/memory.py),
    each in a fresh process: per model its medians, and the ratios of the repeats; with `profile`,
    each model's profile (profile.py)."""
    ctx = mp.get_context("spawn")
    print(f"[benchmark] training speed: both models in turns, {repeats} x {updates} updates each", file=sys.stderr)
    train = in_process(
        ctx, train_speed, shape, device, amp, updates, warmup, repeats, batch_size, batching, optimizer, profile, trace
    )
    for which, t in train.items():
        print(f"[benchmark] training memory: {which}", file=sys.stderr)
        t["peak_mib"] = in_process(
            ctx, train_memory, which, shape, device, amp, max(2, warmup + 1), batch_size, batching, optimizer
        )
        t["optimizer"] = optimizer_for(which, optimizer)
        t["tokens_per_s"] = statistics.median(t["tokens_per_s_per_repeat"])
        t["flops_per_s"] = statistics.median(t.pop("flops_per_s_per_repeat"))
        t["mfu"] = t["flops_per_s"] / (peak * 1e12) if peak else None
    if recompute:
        print("[benchmark] training memory: ours with --checkpoint-activations", file=sys.stderr)
        train["ours"]["peak_mib_checkpointed"] = in_process(
            ctx, train_memory, "ours", shape, device, amp, max(2, warmup + 1), batch_size, batching, optimizer, True
        )
    train["ratio_per_repeat"] = [
        o / f
        for o, f in zip(
            train["ours"]["tokens_per_s_per_repeat"], train["fairseq"]["tokens_per_s_per_repeat"], strict=False
        )
    ]
    return train


def generation_part(shape, device, amp, n_gen, batch_size, batching, repeats, ct2, profile=False, trace=None):
    """Beam-4 generation (benchmarks/generation.py) in this process, in batches of half a training
    batch; without the ctranslate2 package, without its columns and a line saying so; with
    `profile`, each model's profile of one batch (profile.py)."""
    if ct2 and not importable("ctranslate2"):
        print(
            "[benchmark] ctranslate2 is not installed: no CTranslate2 columns (bash scripts/install.sh; on a GPU "
            "machine the wheel in .gpu_bundle_ct2/, docs/speed.md)",
            file=sys.stderr,
        )
        ct2 = False
    print(f"[benchmark] generation, beam 4{', fp16' if amp and device == 'cuda' else ''}", file=sys.stderr)
    return generation(
        shape,
        device,
        n_gen,
        max(1, batch_size // 2),
        batching,
        repeats,
        half=amp and device == "cuda",
        ct2=ct2,
        profile=profile,
        trace=trace,
    )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="examples:\n" + __doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument(
        "--amp",
        action="store_true",
        help="mixed precision: on CUDA fp16 autocast training and fp16 generation; on a CPU bf16 autocast training",
    )
    p.add_argument("--updates", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--batch-size",
        type=int,
        help=f"sentences per training batch, half as many per generation batch (default: the preset's, {BATCH_SIZE})",
    )
    p.add_argument("--generate", type=int, help="sentences to translate (default: two batches of --batch-size)")
    p.add_argument(
        "--parts",
        nargs="+",
        choices=["training", "generation"],
        default=["training", "generation"],
        help="what to measure (default: both)",
    )
    p.add_argument(
        "--batching",
        choices=["random", "sorted", "fresh"],
        default="random",
        help="random: lengths drawn per sentence; sorted: one source length per batch, as "
        "fairseq's length-sorted batching gives; fresh: sorted, but a shape not seen before at every "
        "training step, as in fairseq-train's first epoch (default: random)",
    )
    p.add_argument(
        "--peak-tflops", type=float, help="the device's peak rate for MFU (default: the data sheet's, for known GPUs)"
    )
    p.add_argument(
        "--optimizer",
        choices=["recipe", "adam", "paper_adam"],
        default="recipe",
        help="recipe: each model with the one its fairseq-train command names (fairseq's adam for the "
        "built-in, paper_adam for ours); adam or paper_adam: that one for both (default: recipe)",
    )
    p.add_argument(
        "--checkpoint-activations",
        action="store_true",
        help="also measure ours training with --checkpoint-activations (peak memory only)",
    )
    p.add_argument(
        "--no-ctranslate2",
        action="store_true",
        help="leave out the CTranslate2 generation columns (they need the ctranslate2 package)",
    )
    p.add_argument(
        "--without",
        nargs="+",
        choices=sorted(SPEED_PATHS),
        default=[],
        help="turn these speed paths of ours off, to measure what each buys: packing (training without "
        "the pads); the maths is the same (docs/speed.md)",
    )
    p.add_argument(
        "--sdpa-backends",
        nargs="+",
        choices=SDPA_BACKENDS,
        default=[],
        help="let torch's fused attention use only these CUDA kernels, in both models (default: torch's "
        "choice; on an H100 cudnn): to time which suits new batch shapes (docs/speed.md, GPUs)",
    )
    p.add_argument(
        "--compile-layers",
        nargs="?",
        const="inductor",
        metavar="BACKEND",
        help="ours with --compile-layers (torch.compile of its layers), with torch.compile's backend BACKEND "
        "(default inductor; aot_eager traces the same graphs without generating kernels: a cheap check on a CPU)",
    )
    p.add_argument(
        "--static-cache",
        action="store_true",
        help="ours with --static-decoding-cache (fixed-size self-attention caches in beam search)",
    )
    p.add_argument(
        "--batched-search",
        action="store_true",
        help="ours decoded by --batched-search's generator (a batch that keeps its size), not SequenceGenerator",
    )
    p.add_argument(
        "--cuda-graph",
        action="store_true",
        help="with --batched-search and --static-cache: ours with --cuda-graph-decoding (eager on a CPU)",
    )
    p.add_argument(
        "--cuda-graph-search",
        action="store_true",
        help="with --batched-search and --static-cache: ours with --cuda-graph-search (the whole search step, "
        "decoder and search, as one CUDA graph; eager on a CPU)",
    )
    p.add_argument(
        "--beam-reorder-kernel",
        action="store_true",
        help="with --batched-search and --static-cache: ours with --beam-reorder-kernel (the caches' beam "
        "reorder by a Triton kernel, in place, one read and one write of each moved value; on a CPU torch's ops)",
    )
    p.add_argument(
        "--decode-attention-kernel",
        action="store_true",
        help="with --batched-search and --static-cache: ours with --decode-attention-kernel (each decoding "
        "step's self-attention by a Triton kernel that reads only the positions written so far; on a CPU torch's)",
    )
    p.add_argument(
        "--varlen-attention",
        action="store_true",
        help="ours with --varlen-attention (training's attention on the packed rows, FlashAttention's "
        "variable-length kernel; on a CPU the padded path), and a check of its loss and gradients against "
        "the padded path's on one batch",
    )
    p.add_argument(
        "--fused-softmax-loss",
        action="store_true",
        help="ours's loss and its gradient straight from the logits (the criterion's --fused-softmax-loss; "
        "torch.compile on CUDA, eager on a CPU)",
    )
    p.add_argument(
        "--pad-to-multiple",
        type=int,
        default=1,
        help="pad every batch's source and target lengths up to a multiple of this, both models "
        "(fairseq's --required-seq-len-multiple): fewer shapes (default 1: none)",
    )
    p.add_argument(
        "--half",
        choices=["float16", "bfloat16"],
        default="float16",
        help="with --amp on CUDA: the autocast and generation dtype of both models (default float16)",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="after the timed steps, 3 more training steps and one generation batch of each model under "
        "torch.profiler: per step the wall and device time, by category (matrix products, attention, "
        "norm and element-wise, copies and casts, optimizer, other), the busy fraction, kernels, the top 15 "
        "(on a CPU each op's own CPU time); in the JSON under each model's 'profile'",
    )
    p.add_argument(
        "--profile-trace", type=Path, metavar="DIR", help="--profile, and a Chrome trace per model and part in DIR"
    )
    p.add_argument("--out", type=Path, help="write the results as JSON here")
    a = p.parse_args(argv)
    try:
        check_settings(a.updates, a.warmup, a.repeats, a.batch_size, a.generate, a.peak_tflops, a.batching)
        if a.pad_to_multiple < 1:
            raise ValueError(f"--pad-to-multiple must be >= 1, got {a.pad_to_multiple}")
        for flag, on in (("--cuda-graph", a.cuda_graph), ("--cuda-graph-search", a.cuda_graph_search)):
            if on and not (a.batched_search and a.static_cache):
                raise ValueError(f"{flag} graphs the step of --batched-search with --static-cache: add both")
        for flag, on in (
            ("--beam-reorder-kernel", a.beam_reorder_kernel),
            ("--decode-attention-kernel", a.decode_attention_kernel),
        ):
            if on and not (a.batched_search and a.static_cache):
                raise ValueError(f"{flag} works on --static-cache's caches in --batched-search: add both")
    except ValueError as e:
        sys.exit(f"error: {e}")
    chosen = dict(compile=a.compile_layers, static_cache=a.static_cache, pad_to=a.pad_to_multiple, half=a.half)
    chosen.update(batched_search=a.batched_search, cuda_graph=a.cuda_graph, varlen=a.varlen_attention)
    chosen.update(graph_search=a.cuda_graph_search, fused_loss=a.fused_softmax_loss)
    chosen.update(reorder_kernel=a.beam_reorder_kernel, decode_kernel=a.decode_attention_kernel)
    off = dict(lever_defaults({}), compile=None)  # --compile-layers' default None (True == 1: compared per lever)
    levers = {k: v for k, v in chosen.items() if v != off[k]}
    import attn_only_plugin  # noqa: F401  (its one-line errors here too, as in the measuring processes)

    try:
        r = run(
            a.preset,
            a.device,
            a.amp,
            a.updates,
            a.warmup,
            a.repeats,
            a.batch_size,
            a.generate,
            a.parts,
            a.batching,
            a.peak_tflops,
            a.optimizer,
            a.checkpoint_activations,
            ct2=not a.no_ctranslate2,
            without=a.without,
            sdpa=a.sdpa_backends,
            levers=levers,
            profile=a.profile or a.profile_trace is not None,
            trace=a.profile_trace and str(a.profile_trace.resolve()),
        )
    except PluginError as e:
        sys.exit(f"error: {e}")
    print(table(r))
    if a.out:
        a.out.write_text(json.dumps(r, indent=2))


if __name__ == "__main__":
    main()
