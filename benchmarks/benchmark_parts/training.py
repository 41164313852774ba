"""Training speed for benchmarks/benchmark.py: target tokens/s over --updates steps (forward, the
paper's smoothed loss as paper_label_smoothed_ce computes it, backward, the optimizer's step)
after --warmup steps, the median of --repeats, both models in one process taking turns step by
step on the same batch; model FLOP/s by the analytic count of attn-only-training-flops and MFU
against the device's peak. Each model steps with the optimizer its fairseq-train recipe names
(fairseq's `adam` for the built-in, our `paper_adam` for ours, both with section 5.3's betas and
epsilon) unless --optimizer names one for both.
"""

import time
from collections import Counter

from .common import build_pair, device_batches, half_dtype, levers, pad_share, rotation, synchronizer
from .profile import OPTIMIZER_SCOPE, TRAINING_STEPS, profiled, trace_file


def peak_tflops(device, amp, given=None):
    """The rate MFU is measured against: `given`, else the data-sheet peak of a known GPU
    (attn-only-training-flops's table: bf16/fp16 tensor cores with --amp, else fp32), else None
    (a CPU's peak depends on its clock and vector units: give --peak-tflops)."""
    if given:
        return given
    if device != "cuda":
        return None
    import torch

    from attn_only_tools.cli.training_flops import TFLOPS

    name = torch.cuda.get_device_name()
    table = TFLOPS["bf16" if amp else "fp32"]
    return next((rate for gpu, rate in table.items() if gpu in name), None)


def model_flops(batch, shape, pad) -> float:
    """FLOPs of one training step on `batch` by the analytic count of attn-only-training-flops
    (forward + backward = 3 x forward, real tokens only, attention over each sentence's own
    lengths): the work the paper's model needs, whatever the implementation computes besides."""
    from attn_only_tools.cli.training_flops import attention_flops, layer_params

    p_enc, p_dec = layer_params(shape["layers"], shape["d_model"], shape["d_ff"], shape["vocab"])
    S, T = batch["src"].ne(pad).sum(1).tolist(), batch["tgt"].ne(pad).sum(1).tolist()
    attention = sum(attention_flops(shape["layers"], shape["d_model"], s, t, s, t) for s, t in zip(S, T, strict=False))
    return 6 * (p_enc * sum(S) + p_dec * sum(T)) + 3 * attention


RECIPE_OPTIMIZERS = {"fairseq": "adam", "ours": "paper_adam"}  # what each model's fairseq-train command names


def build_optimizer(name, params):
    """The optimizer `fairseq-train --optimizer NAME` builds, with section 5.3's beta_1 0.9,
    beta_2 0.98 and epsilon 1e-9: fairseq's `adam` (on a CPU, or a GPU without apex, its Python
    loop over the parameters) or our `paper_adam` (torch's fused Adam)."""
    from fairseq.optim.adam import FairseqAdam, FairseqAdamConfig

    from attn_only_plugin.optim.paper_adam import PaperAdam, PaperAdamConfig

    if name == "adam":
        return FairseqAdam(FairseqAdamConfig(adam_betas="(0.9, 0.98)", adam_eps=1e-9, lr=[1e-4], tpu=False), params)
    return PaperAdam(PaperAdamConfig(lr=[1e-4]), params)


def optimizer_for(which, optimizer):
    """The optimizer's name for model `which` ('ours' or 'fairseq') under --optimizer."""
    return RECIPE_OPTIMIZERS[which] if optimizer == "recipe" else optimizer


def trainer(model, device, amp, pad, optimizer, dtype=None, fused=False):
    """One training step of `model` on a batch: forward, the paper's smoothed loss (fused: from the
    logits, --fused-softmax-loss), backward, the optimizer's step (fairseq's `adam` or our
    `paper_adam`); returns the seconds of that last part. With amp, autocast to `dtype` (default
    float16 on CUDA, bfloat16 on a CPU)."""
    import torch

    opt = build_optimizer(optimizer, model.parameters())
    sync = synchronizer(device)

    def step(b):
        loss = smoothed_loss(model, b, device, amp, pad, dtype, fused)
        opt.zero_grad()
        loss.backward()
        sync()
        t = time.perf_counter()
        with torch.profiler.record_function(OPTIMIZER_SCOPE):  # what --profile counts as the optimizer's
            opt.step()
        sync()
        return time.perf_counter() - t

    return step


def smoothed_loss(model, b, device, amp, pad, dtype, fused=False):
    """The paper's smoothed loss of `model` on batch `b`, as paper_label_smoothed_ce computes it
    (fused: with --fused-softmax-loss, from the logits)."""
    import torch

    from attn_only_plugin.criterions.fused_softmax import fused_label_smoothed_loss
    from attn_only_plugin.criterions.label_smoothed_ce import label_smoothed_nll_loss, target_lprobs

    sample = dict(
        net_input=dict(src_tokens=b["src"], src_lengths=b["lengths"], prev_output_tokens=b["prev"]), target=b["tgt"]
    )
    with torch.autocast(device_type=device, dtype=dtype or half_dtype({}, device), enabled=amp):
        scores, target = target_lprobs(model, sample, pad, normalized=not fused)  # log P, or logits
        return (fused_label_smoothed_loss if fused else label_smoothed_nll_loss)(scores, target, 0.1, pad)[0]


def varlen_check(model, b, device, amp, pad, dtype):
    """--varlen-attention's check: ours's loss and gradients on batch `b` with attention on the
    packed rows and on the padded path, dropout off (the same function: they differ by the half
    dtype's rounding only). The losses, their relative difference, the largest relative difference
    of a parameter's gradient (by its norm) and how many attention calls took the packed path (3
    per layer pair when the kernel runs; 0 where it cannot, e.g. on a CPU). With --compile-layers
    the check runs the eager layers: it checks the kernel, and torch.compile would treat its
    counting of the calls, its dropout off and its padded pass as new code to compile for each
    layer, past its recompile limit, which would leave the timed steps' layers eager."""

    import torch

    from attn_only_plugin.modules import varlen
    from attn_only_plugin.modules.dropout import Dropout

    drops = [m for m in model.modules() if isinstance(m, Dropout)]
    rates, kernel, calls = [m.p for m in drops], varlen.KERNEL, []
    varlen.KERNEL = lambda *args: calls.append(1) or kernel(*args)
    losses, grads = {}, {}
    try:
        for m in drops:
            m.p = 0.0
        with torch.compiler.set_stance("force_eager"):  # compiled layers run as their eager selves
            for path, on in (("packed", True), ("padded", False)):
                model.encoder.varlen = model.decoder.varlen = on
                model.zero_grad()
                loss = smoothed_loss(model, b, device, amp, pad, dtype)
                loss.backward()
                losses[path] = loss.item()
                grads[path] = [p.grad.float().clone() for p in model.parameters() if p.grad is not None]
    finally:
        for m, rate in zip(drops, rates, strict=True):
            m.p = rate
        model.encoder.varlen = model.decoder.varlen = True
        varlen.KERNEL = kernel
        model.zero_grad()
    apart = [float((g - h).norm() / h.norm().clamp(min=1e-30)) for g, h in zip(*grads.values(), strict=True)]
    return dict(
        loss_packed=losses["packed"],
        loss_padded=losses["padded"],
        loss_relative_difference=abs(losses["packed"] - losses["padded"]) / abs(losses["padded"]),
        gradient_relative_difference_max=max(apart),
        packed_attention_calls=len(calls),
    )


LIMIT_WORDS = ("recompile limit", "recompile_limit", "cache size limit", "cache_size_limit")


def compile_report() -> dict:
    """What torch.compile made in this process (ours's layers with --compile-layers, its loss's
    chunk functions with --fused-softmax-loss on CUDA; the built-in is never compiled): the graphs
    traced, the graph breaks by reason (the reason's first line), the frames that hit the recompile
    limit, and the frames it tried and left to run eagerly. A layer that breaks or hits the limit
    loses what compiling it was for. Where torch records a limit hit has moved between releases
    (as "unimplemented", as a graph break, under a category of its own): the category that counts
    the most of them."""
    from torch._dynamo.utils import counters

    breaks = Counter()
    for reason, n in counters["graph_break"].items():
        breaks[reason.splitlines()[0]] += n
    limits = [
        sum(n for key, n in keyed.items() if any(w in f"{category} {key}".lower() for w in LIMIT_WORDS))
        for category, keyed in counters.items()
    ]
    return dict(
        graphs=counters["stats"]["unique_graphs"],
        graph_breaks=sum(breaks.values()),
        graph_break_reasons=dict(breaks),
        recompile_limit_hits=max(limits, default=0),
        frames_left_eager=counters["frames"]["total"] - counters["frames"]["ok"],
    )


def step_batches(d, device, batch_size, batching, n_steps):
    """Each model's batches, step k taking batch k modulo their number: the same 4 for both, or
    with "fresh" batching one per step, each of a new shape, and other shapes for each model (so
    that neither finds the shapes the other has just run in the per-shape caches of cuBLAS and cuDNN)."""
    if batching != "fresh":
        return dict.fromkeys(("fairseq", "ours"), device_batches(d, device, batch_size, batching))
    both = device_batches(d, device, batch_size, batching, n=2 * n_steps)
    return {"fairseq": both[0::2], "ours": both[1::2]}


def train_speed(
    shape, device, amp, updates, warmup, repeats, batch_size, batching, optimizer, profile=False, trace=None
):
    """Runs in its own process: both models train side by side, taking turns step by step on the
    same batch (who goes first alternates), so that a machine whose speed drifts slows both alike.
    Per repeat, target tokens/s and model FLOP/s over `updates` steps each, after `warmup` (with the
    varlen lever, after varlen_check on ours's first batch); with `profile`, then TRAINING_STEPS
    more steps of each model under the profiler (profile.py; `trace`: the folder for their Chrome
    traces)."""
    theirs, ours, d = build_pair(shape)
    models = {"fairseq": theirs, "ours": ours}
    steps = {
        name: trainer(
            m.to(device).train(),
            device,
            amp,
            d.pad(),
            optimizer_for(name, optimizer),
            half_dtype(shape, device),
            fused=name == "ours" and levers(shape)["fused_loss"],
        )
        for name, m in models.items()
    }
    batches = step_batches(d, device, batch_size, batching, warmup + repeats * updates)

    def batch(name, k):  # model `name`'s batch at step k (warm-up steps first)
        return batches[name][k % len(batches[name])]

    check = None
    if levers(shape)["varlen"]:  # before any step changes the weights
        check = varlen_check(models["ours"], batch("ours", 0), device, amp, d.pad(), half_dtype(shape, device))
    sync = synchronizer(device)
    for k in range(warmup):
        for name, step in steps.items():
            step(batch(name, k))
    seconds = {name: [0.0] * repeats for name in steps}
    in_optimizer = dict.fromkeys(steps, 0.0)
    for r in range(repeats):
        for i in range(updates):
            for name in rotation(["fairseq", "ours"], r + i):
                sync()
                t = time.perf_counter()
                in_optimizer[name] += steps[name](batch(name, warmup + r * updates + i))
                sync()
                seconds[name][r] += time.perf_counter() - t

    def work(name, r, count):  # `count` summed over repeat r's batches of model `name`
        return sum(count(batch(name, warmup + r * updates + i)) for i in range(updates))

    def tokens(b):
        return int(b["tgt"].ne(d.pad()).sum())

    def flops(b):
        return model_flops(b, shape, d.pad())

    result = {
        name: dict(
            tokens_per_s_per_repeat=[work(name, r, tokens) / s for r, s in enumerate(secs)],
            flops_per_s_per_repeat=[work(name, r, flops) / s for r, s in enumerate(secs)],
            pad_share=pad_share(batches[name], d.pad()),
            step_ms=1e3 * sum(secs) / (repeats * updates),
            optimizer_ms=1e3 * in_optimizer[name] / (repeats * updates),
        )
        for name, secs in seconds.items()
    }
    if check:
        result["ours"]["varlen_check"] = check
    if levers(shape)["compile"] or levers(shape)["fused_loss"]:
        result["ours"]["torch_compile"] = compile_report()
    done = warmup + repeats * updates  # the profiled steps go on through the same batches
    for name, step in steps.items() if profile else ():
        result[name]["profile"] = profiled(
            lambda i, name=name, step=step: step(batch(name, done + i)),
            TRAINING_STEPS,
            device,
            trace_file(trace, "training", name),
        )
    return result
