"""Where a step's time goes, for benchmarks/benchmark.py --profile: after the timed measurement, a
few more steps of each model (training: TRAINING_STEPS steps on the same batches; generation: one
batch) under torch.profiler, the time summed by kind of work. On CUDA the time is the kernels' own
("clock": "cuda"), each kernel put in a category by its name, by the op that launched it and by the
ops around that one; on a CPU, which has no kernels, it is each op's own CPU time ("clock": "cpu").
The busy fraction is that time over the steps' wall time (the profiler's own cost included); it
passes 1 when kernels overlap on several streams.
"""

import time
from collections import defaultdict

from .common import synchronizer

TRAINING_STEPS = 3
OPTIMIZER_SCOPE = "optimizer step"  # the record_function around each training step's optimizer step

# Kernels or ops inside one of SCOPES (its own name or one of the ops around it matches) belong to
# that scope whatever they compute; the others to the first of KINDS that one of their names
# matches (its own first, then the op that launched it, then the ops around that one, innermost
# first); nothing matched: "other". Fragments are matched in lower case. Copies come before
# element-wise, as a copy kernel's name says "elementwise" too.
SCOPES = (
    ("optimizer", ("optimizer", "adam", "foreach", "multi_tensor")),
    ("attention", ("scaled_dot_product", "flash", "efficient_attention", "fmha", "sdpa", "cudnn", "attention")),
)
KINDS = (
    (
        "copies_casts",
        ("copy", "memcpy", "memset", "aten::cat", "catarray", "index", "gather", "scatter")
        + ("aten::fill_", "aten::zero_", "fillfunctor", "embedding", "clone", "contiguous"),
    ),
    (
        "matrix_products",
        ("gemm", "aten::mm", "addmm", "bmm", "matmul", "aten::linear", "cutlass", "sm90_", "sm80_", "xmma", "cublas"),
    ),
    (
        "norm_elementwise",
        ("norm", "dropout", "softmax", "gelu", "relu", "threshold", "elementwise", "reduce", "add", "mul", "div")
        + ("sub", "sum", "mean", "sqrt", "where", "masked", "bernoulli"),
    ),
)
CATEGORIES = ("matrix_products", "attention", "norm_elementwise", "copies_casts", "optimizer", "other")  # as shown
HOST_TOP = 10  # the host's names with the most own time, listed


def category(names) -> str:
    """The category of a kernel or op, given its names: its own, then (for a kernel) the op that
    launched it, then the ops around, innermost first."""
    names = [n.lower() for n in names]
    for kind, fragments in SCOPES:
        if any(f in n for n in names for f in fragments):
            return kind
    for n in names:
        for kind, fragments in KINDS:
            if any(f in n for f in fragments):
                return kind
    return "other"


def around(op) -> list:
    """The names of the ops (and record_function scopes) around `op`, innermost first."""
    names = []
    while op.cpu_parent is not None:
        op = op.cpu_parent
        names.append(op.name)
    return names


def host_ops(events) -> list:
    """The host's ops and CUDA runtime calls among the profiler's events: on the CPU, synchronous,
    not a scope (record_function's span)."""
    from torch.autograd import DeviceType

    return [
        e
        for e in events
        if e.device_type == DeviceType.CPU and not e.is_async and not getattr(e, "is_user_annotation", False)
    ]


def timed_work(events, device) -> list:
    """(names, microseconds, the op's or kernel's name, its op) of every piece of work: on CUDA each
    kernel, copy or set on the device, with the op that launched it when the profiler linked one
    (matched through that op's kernel list), scopes' spans on the device left out; on a CPU each op's
    own CPU time, scopes left out."""
    from torch.autograd import DeviceType

    if device != "cuda":
        return [((e.name, *around(e)), e.self_cpu_time_total, e.name, None) for e in host_ops(events)]
    launchers = defaultdict(list)  # (kernel name, duration) -> the ops that launched such a kernel
    for e in events:
        if e.device_type == DeviceType.CPU:
            for k in e.kernels:
                launchers[(k.name, k.duration)].append(e)
    work = []
    for e in events:
        if e.device_type != DeviceType.CPU and not getattr(e, "is_user_annotation", False):  # not a scope's span
            us = e.time_range.elapsed_us()
            ops = launchers.get((e.name, us))
            op = ops.pop() if ops else None
            names = (e.name, op.name, *around(op)) if op else (e.name,)
            work.append((names, us, e.name[:120], op.name if op else None))
    return work


def host_time(events, steps) -> tuple:
    """The host's side of the profiled steps: each op's and each CUDA runtime call's own CPU time
    (its children's left out), ms per step in all, and the HOST_TOP names with the most. Where the
    wall time goes while the device waits: kernel launches, a CUDA graph's capture and instantiation,
    the host waiting for the device (a synchronisation, a copy to the host), the ops' own dispatch;
    what the wall time has beyond the total is Python between the ops (and the profiler's own cost)."""
    own = defaultdict(lambda: [0.0, 0])
    for e in host_ops(events):
        own[e.name][0] += e.self_cpu_time_total / 1e3 / steps
        own[e.name][1] += 1
    ranked = sorted(own.items(), key=lambda item: -item[1][0])[:HOST_TOP]
    top = [dict(name=name, ms_per_step=round(t, 3), calls_per_step=n / steps) for name, (t, n) in ranked]
    return round(sum(t for t, _ in own.values()), 3), top


def summary(events, steps, wall_s, device) -> dict:
    """The profile of `steps` steps that took wall_s seconds: per step the wall and device time,
    the device time by category (CATEGORIES; they sum to device_ms_per_step), the busy fraction,
    the kernels run (on a CPU: the ops) and, on CUDA, the launches from the host (a CUDA graph's
    replay is one), and the 15 kernels (on a CPU: ops) with the most time; and the host's own time
    in ops and CUDA calls (host_time)."""
    work = timed_work(events, device)
    ms = dict.fromkeys(CATEGORIES, 0.0)
    top = defaultdict(lambda: [0.0, 0])
    for names, us, name, op in work:
        kind = category(names)
        ms[kind] += us / 1e3 / steps
        top[(name, op, kind)][0] += us / 1e3 / steps
        top[(name, op, kind)][1] += 1
    total = sum(ms.values())
    launches = sum(e.name.startswith(("cudaLaunch", "cuLaunch", "cudaGraphLaunch")) for e in events)
    ranked = sorted(top.items(), key=lambda item: -item[1][0])[:15]
    host_ms, host_top = host_time(events, steps)
    return dict(
        clock="cuda" if device == "cuda" else "cpu",
        steps=steps,
        wall_ms_per_step=round(1e3 * wall_s / steps, 3),
        device_ms_per_step=round(total, 3),
        ms_per_step={kind: round(t, 3) for kind, t in ms.items()},
        busy_fraction=round(total / (1e3 * wall_s / steps), 4),
        kernels_per_step=len(work) / steps,
        launches_per_step=launches / steps if device == "cuda" else None,
        top=[
            dict(name=name, op=op, category=kind, ms_per_step=round(t, 3), calls_per_step=n / steps)
            for (name, op, kind), (t, n) in ranked
        ],
        host_ms_per_step=host_ms,
        host_top=host_top,
    )


def profiled(step, steps, device, trace=None) -> dict:
    """summary() of step(0) ... step(steps - 1) under torch.profiler (CPU, and CUDA activities on
    CUDA); with `trace` (a file path), its Chrome trace there too."""
    from pathlib import Path

    from torch.profiler import ProfilerActivity, profile

    sync = synchronizer(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    sync()
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        for i in range(steps):
            step(i)
        sync()
        wall = time.perf_counter() - start
    if trace:
        Path(trace).parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace))
    return summary(prof.events(), steps, wall, device)


def trace_file(folder, part, model):
    """The Chrome trace's path for `model`'s `part` under --profile-trace's folder, or None."""
    return f"{folder}/{part}_{model}.json" if folder else None


def host_most(p, n=3) -> str:
    """The n host names with the most own time in profile p, with their ms per step."""
    return ", ".join(f"{h['name']} {h['ms_per_step']:.1f}" for h in p["host_top"][:n])


def describe(p) -> str:
    """One line of a profile: per step the wall and device time, busy fraction, kernels, categories,
    and the host's own time in ops and CUDA calls with the names that took most of it."""
    kinds = ", ".join(f"{kind} {t:.1f}" for kind, t in p["ms_per_step"].items())
    return (
        f"{p['wall_ms_per_step']:.1f} ms a step on the wall, {p['device_ms_per_step']:.1f} ms of {p['clock']} time "
        f"({p['busy_fraction']:.0%} busy, {p['kernels_per_step']:.0f} {'kernels' if p['clock'] == 'cuda' else 'ops'}):"
        f" {kinds}; the host {p['host_ms_per_step']:.1f} ms in ops and calls, most in {host_most(p)}"
    )
