"""Table 1 of Vaswani et al. (2017), measured: one self-attention layer, full (O(n^2 d)) and
restricted to a neighbourhood (O(r n d), r = 2R + 1), forward and backward, against sequence length
n, with the position-wise FFN layer beside it; time and peak memory on a log-log plot with the
paper's complexity lines (docs/attention_variants.md).

    python benchmarks/table1.py --out table1.png --json table1.json     # n = 64 .. 4096, R = 16, 64
    python benchmarks/table1.py --lengths 64 256 --windows 4 --repeats 1 --out small.png
    python benchmarks/table1.py --device cuda --out table1_gpu.png                 # on a GPU

Layers: "full" is the model's self-attention (the projections W^Q, W^K, W^V, W^O around Eq. (1),
torch's fused kernel); "masked R" the same full attention with the window as a mask (what a mask
costs: nothing less); "restricted R" the band only (window.banded_attention, the path the model
takes on long inputs); "FFN" section 3.3's layer. One sentence of n tokens, d_model 512, h 8,
d_ff 2048 (base), float32. Each point runs in a fresh process: time is the median of --repeats
forward+backward passes after one warm-up in CPU seconds of the process (wall seconds are in the
JSON too: on shared cores they count the other processes' turns), memory the process's peak
resident size minus its size before the first pass. The complexity lines pass through each
curve's longest point. A script, not a timed test; --threads sets torch's threads (default 1).
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from attn_only_tools.guards import atomic
from attn_only_tools.guards.errors import install_excepthook

SHAPE = dict(d_model=512, h=8, d_ff=2048)  # Table 3 "base"


def measure_one(kind: str, window: int, n: int, repeats: int, threads: int, device: str = "cpu") -> dict:
    """Seconds (median) and peak memory (bytes above the start) of forward + backward of one layer
    over one sentence of n positions; run in its own process (main's --one). On a GPU: wall
    seconds after synchronizing, and CUDA's peak allocated memory."""
    import torch

    from attn_only_plugin import modules  # imports fairseq too: a few seconds more per point, not measured
    from attn_only_plugin.modules import window as window_py

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    d, h = SHAPE["d_model"], SHAPE["h"]
    x = torch.randn(1, n, d, device=device, requires_grad=True)  # (B, n, d_model)
    if kind == "ffn":
        layer = modules.PositionwiseFeedForward(d, SHAPE["d_ff"], 0.0).to(device)
        step = lambda: layer(x)  # noqa: E731
    else:
        mha = modules.MultiHeadAttention(d, h, d // h, d // h).to(device)
        pos = torch.arange(n, device=device)
        mask = window_py.position_mask(None, pos, pos, window, False) if kind == "masked" else None  # (n, n)

        def step():
            q, k, v = mha.qkv(x).view(1, n, 3, h, d // h).permute(2, 0, 3, 1, 4)  # 3 x (B, h, n, d_k)
            if kind == "restricted":
                y = window_py.banded_attention(q, k, v, window)  # (B, h, n, d_v)
            else:
                y, _ = modules.scaled_dot_product_attention(q, k, v, mask)  # (B, h, n, d_v)
            return mha.out(y.transpose(1, 2).reshape(1, n, d))  # (B, n, d_model)

    rss_kb = int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize() // 1024
    gpu = device != "cpu"
    if gpu:
        torch.cuda.synchronize()
        start_bytes = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    cpu, wall = [], []
    for _ in range(repeats + 1):  # the first is the warm-up
        start, start_wall = time.process_time(), time.perf_counter()
        step().sum().backward()
        if gpu:
            torch.cuda.synchronize()
        cpu.append(time.process_time() - start)
        wall.append(time.perf_counter() - start_wall)
    if gpu:
        peak = torch.cuda.max_memory_allocated() - start_bytes
    else:
        peak = max(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_kb) * 1024
    return dict(
        kind=kind,
        window=window,
        n=n,
        seconds=statistics.median(wall[1:] if gpu else cpu[1:]),
        wall_seconds=statistics.median(wall[1:]),
        peak_bytes=peak,
    )


def curves(windows):
    """(kind, R, label) of every measured curve."""
    out = [("full", 0, "full self-attention")]
    out += [("masked", windows[0], f"full, masked to R = {windows[0]}")]
    out += [("restricted", r, f"restricted, R = {r} (band only)") for r in windows]
    return out + [("ffn", 0, "FFN (section 3.3)")]


def run(lengths, windows, repeats, threads, device="cpu", progress=print) -> list:
    """Every curve at every n, each point in a fresh process."""
    rows = []
    for kind, window, label in curves(windows):
        for n in lengths:
            cmd = [sys.executable, __file__, "--one", kind, str(window), str(n), str(repeats), str(threads), device]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
                raise SystemExit(f"error: measuring {label} at n = {n} failed: {last}")
            rows.append(dict(json.loads(proc.stdout.strip().splitlines()[-1]), label=label))
            progress(
                f"{label:32s} n = {n:5d}: {rows[-1]['seconds'] * 1e3:9.1f} ms, "
                f"{rows[-1]['peak_bytes'] / 2**20:8.1f} MiB"
            )
    return rows


def plot(rows, out: Path, device: str = "cpu") -> None:
    """Two log-log panels (time, peak memory) against n, with O(n^2 d) through the full layer's and
    O(r n d) through each restricted layer's longest point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    atomic_output = atomic.atomic_output
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    labels = list(dict.fromkeys(r["label"] for r in rows))
    time_label = "CPU time" if device == "cpu" else f"{device} time"
    for ax, key, unit, scale in [
        (axes[0], "seconds", f"{time_label}, forward + backward (s)", 1.0),
        (axes[1], "peak_bytes", "peak memory above start (MiB)", 2.0**-20),
    ]:
        for label in labels:
            pts = [r for r in rows if r["label"] == label and r[key] > 0]
            if not pts:
                continue
            (line,) = ax.plot([p["n"] for p in pts], [p[key] * scale for p in pts], "o-", label=label)
            last = pts[-1]
            if last["kind"] in ("full", "restricted"):
                growth = (lambda n: n * n) if last["kind"] == "full" else (lambda n: n)  # d and r are constants
                ns = [p["n"] for p in pts]
                ax.plot(
                    ns,
                    [last[key] * scale * growth(n) / growth(last["n"]) for n in ns],
                    "--",
                    color=line.get_color(),
                    alpha=0.6,
                    label="O(n^2 d)" if last["kind"] == "full" else f"O(r n d), r = {2 * last['window'] + 1}",
                )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(unit)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(
        f"Table 1, measured ({device}): one layer, d_model {SHAPE['d_model']}, h {SHAPE['h']}, d_ff {SHAPE['d_ff']}"
    )
    fig.tight_layout()
    with atomic_output(out, "wb") as f:
        fig.savefig(f, format="png", dpi=100)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--one"]:  # one point, in its own process (run)
        kind, window, n, repeats, threads = argv[1], *map(int, argv[2:6])
        print(json.dumps(measure_one(kind, window, n, repeats, threads, argv[6])))
        return
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="examples:\n" + __doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256, 512, 1024, 2048, 4096])
    p.add_argument("--windows", type=int, nargs="+", default=[16, 64], help="R of the restricted layers")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch's CPU threads (default 1)")
    p.add_argument("--device", default="cpu", help="cpu, or cuda for a GPU (time: wall seconds; memory: CUDA's peak)")
    p.add_argument("--out", type=Path, required=True, help="the PNG to write")
    p.add_argument("--json", type=Path, help="write the measurements here too")
    a = p.parse_args(argv)
    for name in ("lengths", "windows"):
        if min(getattr(a, name)) < 1:
            sys.exit(f"error: --{name} must all be >= 1, got {min(getattr(a, name))}")
    if a.repeats < 1 or a.threads < 1:
        sys.exit(f"error: --repeats and --threads must be >= 1, got {a.repeats} and {a.threads}")
    rows = run(sorted(a.lengths), a.windows, a.repeats, a.threads, a.device)
    plot(rows, a.out, a.device)
    if a.json:
        with atomic.atomic_output(a.json, "w") as f:
            json.dump(dict(shape=SHAPE, device=a.device, threads=a.threads, repeats=a.repeats, rows=rows), f, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    install_excepthook()  # an error that ends the run is one `error:` line
    main()
