"""A measurement in a fresh process (peak memory is per process), for benchmarks/benchmark.py: its
result, or its failure as one line (ATTN_ONLY_TRACEBACK=1 prints the traceback too), or the exit
status of a process that died without one. And for the scripts that run whole commands in turn
(gpu_levers.py, cli_train.py): a command with a time limit, and the environment that puts the GPU
machine's bundle of fairseq on its path.
"""

import argparse
import contextlib
import importlib.util
import json
import os
import queue as queues
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from attn_only_tools.guards import atomic
from attn_only_tools.guards.errors import PluginError

SDPA_BACKENDS = ("cudnn", "flash", "efficient", "math")  # kernels of torch F.scaled_dot_product_attention
# torch.backends.cuda's switch for each of SDPA_BACKENDS, in that order (enable_X, X_enabled)
_SDPA_FLAGS = ("cudnn_sdp", "flash_sdp", "mem_efficient_sdp", "math_sdp")
SDPA_ENV = "ATTN_ONLY_SDPA_BACKENDS"  # how benchmark.py --sdpa-backends reaches the measuring processes
REPO = Path(__file__).resolve().parents[2]  # where .gpu_bundle is


def restrict_sdpa(backends=None) -> None:
    """Let torch's F.scaled_dot_product_attention use only these CUDA backends (a subset of
    SDPA_BACKENDS; default: those named in the SDPA_ENV variable, none named = torch's own choice),
    in this process, for both models alike (the built-in's attention calls the same function)."""
    backends = os.environ.get(SDPA_ENV, "") if backends is None else ",".join(backends)
    if not backends:
        return
    import torch

    wanted = backends.split(",")
    for name, flag in zip(SDPA_BACKENDS, _SDPA_FLAGS, strict=True):
        getattr(torch.backends.cuda, f"enable_{flag}")(name in wanted)


@contextlib.contextmanager
def sdpa_restricted(backends):
    """restrict_sdpa(backends) in this process and, through SDPA_ENV, in the processes it starts,
    for the `with` block only: afterwards the variable and torch's four flags are as they were
    (so a caller of benchmark.run() keeps its own settings). No backends: nothing changes."""
    if not backends:
        yield
        return
    import torch

    on = torch.backends.cuda
    saved_env = os.environ.get(SDPA_ENV)
    saved = [getattr(on, f"{flag}_enabled")() for flag in _SDPA_FLAGS]
    os.environ[SDPA_ENV] = ",".join(backends)
    try:
        restrict_sdpa(backends)
        yield
    finally:
        for flag, enabled in zip(_SDPA_FLAGS, saved, strict=True):
            getattr(on, f"enable_{flag}")(enabled)
        if saved_env is None:
            os.environ.pop(SDPA_ENV, None)
        else:
            os.environ[SDPA_ENV] = saved_env


def _worker(target, args, queue):
    """Runs in the measuring process: ("ok", target(*args)) or ("error", one line) into queue."""
    try:
        restrict_sdpa()
        queue.put(("ok", target(*args)))
    except BaseException as e:  # noqa: B902 (Ctrl-C too: the parent must not wait for a result)
        if os.environ.get("ATTN_ONLY_TRACEBACK"):
            traceback.print_exc()
        first = (str(e).strip().splitlines() or [""])[0]
        queue.put(("error", f"{type(e).__name__}: {first}" if first else type(e).__name__))


def in_process(ctx, target, *args, poll_s=0.5):
    """target(*args) in a fresh process (peak memory is per process); its result, or PluginError
    with its one-line error, or its exit status if it died without one (killed, out of memory)."""
    q = ctx.Queue()
    p = ctx.Process(target=_worker, args=(target, args, q))
    p.start()
    try:
        while True:
            try:
                status, value = q.get(timeout=poll_s)
                break
            except queues.Empty:
                if p.is_alive():
                    continue
                try:  # it may have put its result just before ending
                    status, value = q.get(timeout=poll_s)
                    break
                except queues.Empty:
                    why = f"killed by signal {-p.exitcode}" if p.exitcode < 0 else f"exit status {p.exitcode}"
                    raise PluginError(
                        f"the {target.__name__} process died ({why}) without a result: out of "
                        "memory? try a smaller --batch-size or --preset"
                    ) from None
    finally:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
            p.join()
    if status == "error":
        raise PluginError(
            f"the {target.__name__} process failed: {value}: rerun with ATTN_ONLY_TRACEBACK=1 for its traceback"
        )
    return value


def bundle_environment() -> dict:
    """The environment of a command that a script runs: .gpu_bundle/site (benchmarks/gpu_bundle.sh) on
    the path when it is there and this Python has no fairseq of its own (the bundle is built for the
    GPU machine's Python, whose compiled packages need not load on this one)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    bundle = REPO / ".gpu_bundle" / "site"
    if bundle.is_dir() and importlib.util.find_spec("fairseq") is None:
        env["PYTHONPATH"] = os.pathsep.join([str(bundle), str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def run_limited(cmd, seconds, env, cwd=None):
    """cmd in a session of its own, ended with everything it started after `seconds` (measuring
    processes hold the GPU): (status, seconds taken, stdout, stderr), status "ok", "timed out after N
    s" or "failed: " and the last line of its stderr."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd, start_new_session=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        return f"timed out after {seconds} s", seconds, stdout, stderr
    taken = round(time.perf_counter() - start, 1)
    if proc.returncode != 0:
        lines = [line for line in stderr.splitlines() if line.strip()] or ["no output"]
        return "failed: " + lines[-1][:300], taken, stdout, stderr
    return "ok", taken, stdout, stderr


def out_of_budget(left, cap, what) -> str | None:
    """The status of a `what` (row, run or step) not started because `left` seconds of the budget
    cannot hold its time limit `cap`; None when they can."""
    if left < cap:
        return f"skipped: {left:.0f} s of the budget left, the {what}'s limit is {cap} s"
    return None


def run_each(tag, names, what, run_one, budget_s) -> dict:
    """{name: run_one(name, seconds of budget_s left)} for each of names in order (each result a dict
    with a "status"), a line on stderr as each starts ("[tag] name: what[name]") and ends (its status)."""
    start, done = time.perf_counter(), {}
    for name in names:
        print(f"[{tag}] {name}: {what[name]}", file=sys.stderr, flush=True)
        done[name] = run_one(name, budget_s - (time.perf_counter() - start))
        print(f"[{tag}] {name}: {done[name]['status']}", file=sys.stderr, flush=True)
    return done


def write_results(out, results, *items) -> None:
    """results into out as JSON (whole or not at all), its "table" on stdout; exits 1 naming those
    of results[item] for each of items (its rows, runs or steps) whose status is not "ok"."""
    with atomic.atomic_output(out, "w") as f:
        json.dump(results, f, indent=2)
    print(results["table"])
    named = {name: r for item in items for name, r in results[item].items()}
    bad = [name for name, r in named.items() if r["status"] != "ok"]
    if bad:
        what = " and ".join(items)
        sys.exit(f"error: {len(bad)} of {len(named)} {what} did not finish ({', '.join(bad)}): see {out}")


def script_parser(doc, settings, items_help) -> argparse.ArgumentParser:
    """The command line of a script that runs commands in turn (settings: its per-device settings,
    each with a "budget_s"): the docstring's first paragraph as the description and its second as
    the examples, --device, --budget-s, --out and --force; parse it with parse_checked."""
    p = argparse.ArgumentParser(
        description=doc.split("\n\n")[0],
        epilog="examples:\n" + doc.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--device", choices=sorted(settings), default="cuda")
    budgets = ", ".join(f"{v['budget_s']} on {k}" for k, v in sorted(settings.items()))
    p.add_argument("--budget-s", type=float, help=f"seconds for all {items_help} together (default {budgets})")
    p.add_argument("--out", type=Path, required=True, help="the results file (JSON)")
    p.add_argument("--force", action="store_true", help="replace an existing --out")
    return p


def parse_checked(p, argv, settings):
    """p's arguments: an existing --out refused unless --force, --budget-s the device's by default
    and > 0 (else a one-line error)."""
    a = p.parse_args(argv)
    atomic.check_output(a.out, [], a.force)
    if a.budget_s is None:
        a.budget_s = settings[a.device]["budget_s"]
    if a.budget_s <= 0:
        sys.exit(f"error: --budget-s must be > 0, got {a.budget_s}")
    return a
