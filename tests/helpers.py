"""The tests' one helpers module: tiny dictionaries and models (d_model <= 64) that run fast on a
CPU, and the real fairseq CLIs on a digit-reversal corpus. Fixtures are in conftest.py; no test
module imports another.
(A module of its own name: several conftest.py files exist, so `from conftest import` is ambiguous.)

Anything here that starts a process (it uses `subprocess`, as `run` does) puts every test that
calls it, directly, through another helper or through a fixture, in the slow tier: conftest.py
reads that from the code at collection (docs/development.md, "Test tiers").

Every process runs with one OpenMP thread: results then do not depend on how many cores the
machine has or how busy it is (a reduction split over 2 threads rounds differently from 1), and
two processes of a distributed run do not fight over the same cores.
"""

import contextlib
import hashlib
import os
import random
import re
import socket
import subprocess
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import attn_only_plugin  # noqa: F401  (registers everything)
from attn_only_plugin.guards.save_dir import LOCK_NAME
from attn_only_plugin.models.transformer import AttnOnlyTransformer, TransformerConfig
from attn_only_plugin.modules import step_graph
from attn_only_plugin.modules.step_graph import StepGraph

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

PLUGIN = str(ROOT / "attn_only_plugin")
BIN = Path(sys.executable).parent
ONE_THREAD = dict(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", PYTHONUNBUFFERED="1")
ENV = dict(os.environ, **ONE_THREAD)  # the environment at import; run() takes it at each call
TIMEOUT = 300  # seconds a training of the toy model may take before a test gives up on it
TINY = ["--encoder-layers", "2", "--decoder-layers", "2", "--d-model", "32", "--d-ff", "64", "--heads", "4"]
PAPER = ["--criterion", "paper_label_smoothed_ce", "--lr-scheduler", "noam", "--optimizer", "paper_adam"]
ARCH = ["--arch", "transformer_base", *TINY, "--learned-pos", "--warmup-updates", 10]
UPDATE_LOGGED = re.compile(r"num_updates=(\d+),")
PTB_SAMPLE = ROOT.parent / "shared" / "data" / "ptb-sample"  # not shipped with the repository


def make_dictionary(n_symbols: int = 20):
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(n_symbols):
        d.add_symbol(f"w{i}")
    return d


def build_model(dictionary, tgt_dictionary=None, **overrides):
    """A tiny model on a fake task; overrides are TransformerConfig fields."""
    values = dict(
        encoder_layers=2,
        decoder_layers=2,
        d_model=32,
        d_ff=64,
        heads=4,
        dropout=0.0,
        max_source_positions=64,
        max_target_positions=64,
    )
    values.update(overrides)
    task = SimpleNamespace(source_dictionary=dictionary, target_dictionary=tgt_dictionary or dictionary)
    torch.manual_seed(0)
    return AttnOnlyTransformer.build_model(TransformerConfig(**values), task).eval()


def ending_model(dictionary, **overrides):
    """A tiny random model (build_model) whose end-of-sentence logit gets 3 (sin(3 x_0) - 0.3),
    x_0 the first decoder feature: its hypotheses end at many lengths, from 2 to the cap, as a
    beam search's stopping rules need to be told apart."""
    import torch

    model = build_model(dictionary, **overrides)
    plain = model.decoder.output_layer

    def output_layer(self, x):
        logits = plain(x)
        logits[..., dictionary.eos()] += 3.0 * (torch.sin(3 * x[..., 0]) - 0.3)
        return logits

    model.decoder.output_layer = types.MethodType(output_layer, model.decoder)
    return model


def build_builtin(dictionary, d_model=32, d_ff=64, heads=4, layers=2, normalize_before=False, seed=1):
    """fairseq's built-in transformer of these sizes, learned positions (convertible to ours),
    shared embeddings, no dropout; freshly initialised from seed, in train mode."""
    import argparse

    from fairseq.models.transformer import TransformerModel
    from fairseq.models.transformer.transformer_legacy import base_architecture

    args = argparse.Namespace(
        encoder_embed_dim=d_model,
        decoder_embed_dim=d_model,
        encoder_ffn_embed_dim=d_ff,
        decoder_ffn_embed_dim=d_ff,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_learned_pos=True,
        decoder_learned_pos=True,
        share_all_embeddings=True,
        dropout=0.0,
        encoder_normalize_before=normalize_before,
        decoder_normalize_before=normalize_before,
        max_source_positions=64,
        max_target_positions=64,
    )
    base_architecture(args)
    task = SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    torch.manual_seed(seed)
    return TransformerModel.build_model(args, task)


def random_batch(dictionary, B=3, S=7, T=6, seed=0):
    """Left-padded sources (fairseq's default) with different lengths, right-padded targets."""
    g = torch.Generator().manual_seed(seed)
    n_special = dictionary.nspecial
    src = torch.randint(n_special, len(dictionary), (B, S), generator=g)
    src[:, -1] = dictionary.eos()
    src[1, :3] = dictionary.pad()  # row 1 is shorter, left-padded
    prev = torch.randint(n_special, len(dictionary), (B, T), generator=g)
    prev[:, 0] = dictionary.eos()
    return src, prev


def full_lprobs(model, src, prev):
    enc = model.encoder(src)
    out, _ = model.decoder(prev, encoder_out=enc)
    return torch.log_softmax(out, -1)  # (B, T, V)


# aten ops that wait for the device on CUDA (their output's size, or a Python value, depends on the
# data), or copy host data to the device (a tensor made from Python data): what a CUDA graph's capture
# refuses, or records once as a stale constant. index and index_put_ with a bool index count too.
HOST_OPS = {
    "aten._local_scalar_dense": "a tensor read on the host (.item(), int(), float(), bool())",
    "aten.nonzero": "nonzero (its size depends on the data)",
    "aten.masked_select": "masked_select (its size depends on the data)",
    "aten.repeat_interleave": "repeat_interleave by a tensor (its size depends on the data)",
    "aten._unique2": "unique (its size depends on the data)",
    "aten.unique_dim": "unique (its size depends on the data)",
    "aten.unique_consecutive": "unique_consecutive (its size depends on the data)",
    "aten.bincount": "bincount (its size depends on the data)",
    "aten.equal": "torch.equal (a Python bool)",
    "aten.is_nonzero": "a truth test of a tensor",
    "aten.allclose": "allclose (a Python bool)",
    "aten.lift_fresh": "a tensor made from Python data (a copy from the host)",
}
FROM_DATA = ("tensor", "as_tensor")  # torch's functions that make a tensor from Python data


class HostReads(TorchDispatchMode):
    """Records, while active, each aten op that a CUDA graph's capture refuses or replays stale
    (HOST_OPS), and each call of torch.tensor or torch.as_tensor: `found` lists (op, why). Runs
    anywhere, CPU included: it reads the ops, not a device. One case it lets through: on a CPU,
    `x[i] = number` makes its 0-dim tensor on the host (lift_fresh), where on any other device it
    is made there (scalar_tensor, a fill), so a 0-dim lift_fresh is not counted; torch.tensor(number)
    is, by its Python call."""

    def __init__(self):
        super().__init__()
        self.found = []
        self.saved = {}

    def __enter__(self):
        for name in FROM_DATA:
            self.saved[name] = original = getattr(torch, name)
            setattr(torch, name, self.spy(name, original))
        return super().__enter__()

    def __exit__(self, *exc):
        for name, original in self.saved.items():
            setattr(torch, name, original)
        return super().__exit__(*exc)

    def spy(self, name, original):
        def made_from_data(*args, **kwargs):
            self.found.append((f"torch.{name}", "a tensor made from Python data (a copy from the host)"))
            return original(*args, **kwargs)

        return made_from_data

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.name().split(".")[0].replace("::", ".")  # aten::index.Tensor -> aten.index
        if name == "aten.lift_fresh" and args[0].dim() == 0:
            pass  # x[i] = number on a CPU (class docstring)
        elif name == "aten.repeat_interleave" and (kwargs or {}).get("output_size") is not None:
            pass  # its size given: nothing to wait for
        elif name in HOST_OPS:
            self.found.append((name, HOST_OPS[name]))
        elif name in ("aten.index", "aten.index_put_", "aten.index_put") and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1] if i is not None
        ):
            self.found.append((name, "indexing by a bool mask (its size depends on the data)"))
        return func(*args, **(kwargs or {}))


class StorageReads(TorchDispatchMode):
    """Records, while active, the storages that the ops read or write and that were there before:
    made neither by an earlier op of the same run nor from Python data (lift_fresh), nor empty.
    A CUDA graph replays its capture's kernels on the addresses they had then; so a step replayed
    as a graph is right only where an eager rerun of it would touch the same storages as its
    capture did (`storages`: data_ptrs)."""

    def __init__(self):
        super().__init__()
        self.storages, self.made = set(), set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        fresh = func.name().startswith("aten::lift_fresh")  # torch.tensor's or x[i] = number's new data
        for t in [] if fresh else pytree.tree_leaves((args, kwargs)):
            if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes():
                ptr = t.untyped_storage().data_ptr()
                if ptr not in self.made:
                    self.storages.add(ptr)
        out = func(*args, **(kwargs or {}))
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.made.add(t.untyped_storage().data_ptr())
        return out


def fake_cuda(monkeypatch, graph=lambda g: contextlib.nullcontext(), replaying=lambda key: contextlib.nullcontext()):
    """torch.cuda stand-in for modules/step_graph.py (CUDA graphs without a GPU): capturing records
    the step, replay reruns it on the captured inputs;
    `graph(g)` is the context a capture runs the step in, `replaying(key)` the one a replay of the
    key's graph reruns it in. Returns the keys captured, in turn."""
    stream = SimpleNamespace(wait_stream=lambda other: None)
    cuda = dict(Stream=lambda: stream, current_stream=lambda: stream, stream=lambda s: contextlib.nullcontext())
    cuda.update(CUDAGraph=lambda: SimpleNamespace(pool=lambda: "pool"), graph=lambda g, pool=None: graph(g))
    monkeypatch.setattr(step_graph, "cuda", SimpleNamespace(**cuda))
    monkeypatch.setattr(step_graph, "graphable", lambda x: True)
    keys = []
    capture = StepGraph.capture

    def recording_capture(self, key, inputs):
        capture(self, key, inputs)
        keys.append(key)

        fn, (cuda_graph, static_inputs, output) = self.fn, self.graphs[key]

        def replay():  # referring to neither the graph nor its StepGraph, as a real graph does not
            with replaying(key):
                out = fn(*static_inputs)
            output.copy_(out)

        cuda_graph.replay = replay

    monkeypatch.setattr(StepGraph, "capture", recording_capture)
    return keys


def reference_varlen(q, k, v, queries, keys, causal):
    """What modules/varlen.py's kernel computes, for a CPU: per row b, its packed queries against
    its packed keys (N, h, d)."""
    (cu_q, _), (cu_k, _) = queries.sequences, keys.sequences
    out = []
    for b in range(len(cu_q) - 1):
        qb, kb, vb = (
            t[int(lo) : int(hi)].transpose(0, 1)
            for t, lo, hi in ((q, *cu_q[b : b + 2]), (k, *cu_k[b : b + 2]), (v, *cu_k[b : b + 2]))
        )
        out.append(F.scaled_dot_product_attention(qb, kb, vb, is_causal=causal).transpose(0, 1))  # (n_b, h, d_v)
    return torch.cat(out)  # (N, h, d_v)


def traceable_varlen(q, k, v, queries, keys, causal):
    """varlen.py's kernel's maths without a host read (reference_varlen loops over the
    rows, which torch.compile cannot trace): each packed row's sentence from the offsets, attention
    within a sentence, causal by the positions inside it. (N, h, d_v)."""
    (cu_q, _), (cu_k, _) = queries.sequences, keys.sequences
    rows_q, rows_k = torch.arange(q.size(0)), torch.arange(k.size(0))
    seq_q = torch.bucketize(rows_q, cu_q[1:], right=True)  # (N,) each query row's sentence
    seq_k = torch.bucketize(rows_k, cu_k[1:], right=True)  # (N_s,)
    mask = seq_q[:, None] == seq_k[None, :]  # (N, N_s)
    if causal:
        mask &= (rows_q - cu_q[seq_q])[:, None] >= (rows_k - cu_k[seq_k])[None, :]
    q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # (h, N, d_k)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(0, 1)  # (N, h, d_v)


def check_cached_decoding(model, dictionary):
    src, prev = random_batch(dictionary, B=4)
    beam = torch.tensor([0, 0, 2, 2])  # 2 sentences x beam 2: each hypothesis starts from its sentence
    src = src[beam]
    # SequenceGenerator's reorders: within a sentence's beam (step 3), then the batch shrinks
    # to the second sentence's beam (step 5)
    decode_with_reorders(model, src, prev, model.encoder(src), {3: torch.tensor([1, 1, 3, 2]), 5: torch.tensor([2, 3])})


def decode_with_reorders(model, src, prev, enc, orders, reference=None, atol=1e-5):
    """Incremental decoding of prev with the beam reorders `orders` (step -> new order); every
    step must equal (to atol) the full pass of `reference` (default: the model itself) over the
    reordered batch. Returns the final encoder_out and state."""
    reference = model if reference is None else reference
    full, state = full_lprobs(reference, src, prev), {}
    for t in range(prev.size(1)):
        if t in orders:
            order = orders[t]
            enc = model.encoder.reorder_encoder_out(enc, order)
            model.decoder.reorder_incremental_state_scripting(state, order)
            src, prev = src[order], prev[order]
            full = full_lprobs(reference, src, prev)
        out, _ = model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)
        assert torch.allclose(torch.log_softmax(out[:, -1].float(), -1), full[:, t], atol=atol), f"step {t}"
    return enc, state


# The commands: each module of attn_only_tools/cli/ and attn_only_plugin/cli/ is the console script
# attn-only-NAME (pyproject.toml's [project.scripts]); benchmarks/NAME.py are run as files.
TOOLS = sorted(p.stem for p in (ROOT / "attn_only_tools" / "cli").glob("[!_]*.py"))
PLUGIN_TOOLS = sorted(p.stem for p in (ROOT / "attn_only_plugin" / "cli").glob("[!_]*.py"))
BENCHMARKS = sorted(p.stem for p in (ROOT / "benchmarks").glob("[!_]*.py"))


def tool(name):
    """The module behind the command NAME, imported by its name: attn_only_tools.cli.NAME,
    attn_only_plugin.cli.NAME, or benchmarks/NAME.py's module (pytest.ini puts benchmarks/ on the path,
    as running the script puts its own folder)."""
    import importlib

    if name in TOOLS:
        return importlib.import_module(f"attn_only_tools.cli.{name}")
    if name in PLUGIN_TOOLS:
        return importlib.import_module(f"attn_only_plugin.cli.{name}")
    return importlib.import_module(name)


def command(name) -> list:
    """The command line that runs NAME as a user does: its console script, or python benchmarks/NAME.py."""
    if name in TOOLS or name in PLUGIN_TOOLS:
        return [str(BIN / f"attn-only-{name.replace('_', '-')}")]
    return [sys.executable, str(ROOT / "benchmarks" / f"{name}.py")]


# --- the test tiers (conftest.py marks `slow` what starts a process) ---------------------------------

# Names in a function's code that start processes: the modules (global or imported inside the
# function), subprocess's functions and multiprocessing's contexts by attribute (`mp.get_context`);
# and the same functions imported by name (`from subprocess import run`).
PROCESS_NAMES = {"subprocess", "multiprocessing", "Popen", "check_call", "check_output", "get_context"}
PROCESS_STARTERS = (subprocess.run, subprocess.Popen, subprocess.call, subprocess.check_call, subprocess.check_output)

TIERS = pytest.StashKey[dict]()  # conftest.py's decisions: nodeid -> slow, for every collected test


def _code_objects(code):
    yield code
    for const in code.co_consts:  # nested functions, lambdas, comprehensions
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _in_tests(obj) -> bool:
    """Whether obj (a function or a module) is defined in a file under tests/."""
    path = getattr(getattr(obj, "__code__", None), "co_filename", None) or getattr(obj, "__file__", None) or ""
    return bool(path) and Path(path).resolve().is_relative_to(TESTS)


def _referenced(func) -> tuple:
    """The names func's code uses (nested functions included), and the objects they resolve to: its
    globals, and the attributes of those names of the modules of tests/ it uses (helpers.run)."""
    names = {name for code in _code_objects(func.__code__) for name in code.co_names}
    found = [func.__globals__[name] for name in names if name in func.__globals__]
    modules = [obj for obj in found if isinstance(obj, types.ModuleType) and _in_tests(obj)]
    found += [getattr(module, name) for module in modules for name in names if hasattr(module, name)]
    return names, found


def starts_processes(func, seen=None) -> bool:
    """Whether func, or a function of tests/ that it refers to (followed transitively), starts a
    process: PROCESS_NAMES in its code, or one of PROCESS_STARTERS by another name."""
    seen = set() if seen is None else seen
    func = getattr(func, "__func__", func)  # a bound method: its function
    if id(func) in seen or not hasattr(func, "__code__"):
        return False
    seen.add(id(func))
    names, found = _referenced(func)
    if names & PROCESS_NAMES or any(obj is starter for obj in found for starter in PROCESS_STARTERS):
        return True
    for obj in found:
        if isinstance(obj, type) and _in_tests(getattr(obj, "__init__", None)):
            obj = obj.__init__  # a helper class of tests/: what constructing it runs
        if isinstance(obj, types.FunctionType) and _in_tests(obj) and starts_processes(obj, seen):
            return True
    return False


# --- the real CLIs on the digit-reversal corpus ---------------------------------------------------


# fairseq's CLIs that load batches through a torch DataLoader, whose default --num-workers 1 starts
# a loader process per run (and, in a process that runs several CLIs, waits up to 5 s for it to
# stop when its iterator is collected); the toy data sets load in no time in the CLI's own process
LOADERS = {"fairseq-train", "fairseq-generate", "fairseq-validate", "fairseq-interactive"}


def run(tool, *args, ok=True, stdin=None, cwd=None, timeout=900):
    """Run tool (a program in the venv's bin/, or a path) with args, one OpenMP thread, in ROOT;
    fail the test with the output's tail if ok and it fails. Returns the CompletedProcess. fairseq's
    CLIs load their batches in their own process (--num-workers 0) unless args say otherwise."""
    argv = [*map(str, args)]
    if Path(str(tool)).name in LOADERS and "--num-workers" not in argv:
        argv += ["--num-workers", "0"]
    env, cwd = dict(os.environ, **ONE_THREAD), cwd or ROOT
    name = Path(str(tool)).name
    if name in FORKED and BIN / tool == BIN / name and forking():  # fairseq's own, by name or as BIN / name
        proc = run_forked(name, argv, stdin=stdin, cwd=cwd, env=env, timeout=timeout)
    else:
        proc = subprocess.run(
            [str(BIN / tool), *argv],  # BIN / an absolute path is that path
            capture_output=True,
            text=True,
            input=stdin,
            cwd=cwd,
            env=env,
            timeout=timeout,
        )
    if ok and proc.returncode != 0:
        raise AssertionError(f"{tool} failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    return proc


# --- fairseq's CLIs forked from a process that has imported their libraries ---------------------
#
# Each start of a fairseq CLI imports torch, scikit-learn, scipy, hydra and fairseq (about 2 s on
# these machines, scikit-learn a third of it: fairseq's audio task and sentence-prediction criterion
# import it), longer than most of the tiny runs the tests make, several hundred times a suite. run()
# starts fairseq's console scripts (and conftest.py's cli fixture the plugin's, which import fairseq
# too) in a child forked from one process per test process that has imported those libraries once,
# but not fairseq: fairseq's modules configure logging when
# imported, and each CLI sets up logging its own way before or after importing fairseq. The child
# sets the arguments, working folder, environment and standard streams it is given, calls the
# console script's entry point (fairseq_cli.X:cli_main) as the script does, imports fairseq and,
# through --user-dir, the plugin as a fresh process would, and exits with its status. What differs
# from a fresh process: Python's start-up (interpreter options, PYTHONWARNINGS) and what the
# libraries read from the environment while being imported are the server's, the test process's
# environment plus ONE_THREAD. ATTN_ONLY_TEST_FORK=0 starts every command as a fresh process
# instead; test_forked_cli.py checks that a forked run prints what a fresh one prints.

PRELOADED = ("torch", "numpy", "scipy.stats", "sklearn.metrics", "omegaconf", "hydra", "sacrebleu", "torch.onnx")
FORKED = {f"fairseq-{name}" for name in ("train", "generate", "interactive", "preprocess", "validate", "score")}


def _fork_server(ask_preload):
    """The server's program (run_forked runs this function's source with `python -c`): imports the
    modules ask_preload names, then reads requests on standard input, one JSON line each (tool,
    argv, cwd, env, and the files to use as the child's stdin, stdout and stderr); for each, the
    child's pid and then its exit status (negative for a signal, as subprocess reports it) on
    standard output, one JSON line each. Ends at end of input."""
    import atexit
    import importlib
    import importlib.metadata
    import json
    import os
    import sys
    import tempfile

    with tempfile.TemporaryFile() as said:  # what the imports print: every child prints it first
        stderr = os.dup(2)
        os.dup2(said.fileno(), 2)
        for name in ask_preload:
            importlib.import_module(name)
        sys.stderr.flush()
        os.dup2(stderr, 2)
        os.close(stderr)
        said.seek(0)
        said_at_import = said.read()
    scripts = {ep.name: ep for ep in importlib.metadata.entry_points(group="console_scripts")}
    requests, replies = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):  # the children's streams are their own files, never this pipe
        os.dup2(null, fd)
    for line in requests:
        ask = json.loads(line)
        pid = os.fork()
        if pid == 0:
            requests.close()
            replies.close()
            os.chdir(ask["cwd"])
            os.environ.clear()
            os.environ.update(ask["env"])
            for fd, path, flags in zip((0, 1, 2), ask["streams"], (os.O_RDONLY, os.O_WRONLY, os.O_WRONLY), strict=True):
                opened = os.open(path, flags)
                os.dup2(opened, fd)
                os.close(opened)
            os.write(2, said_at_import)
            sys.argv = [ask["argv0"], *ask["argv"]]
            try:
                code = scripts[ask["tool"]].load()()  # what the console script does: sys.exit(cli_main())
            except SystemExit as stop:
                code = stop.code
            except BaseException:  # as Python ends a program: its excepthook (ours prints one line)
                sys.excepthook(*sys.exc_info())
                code = 1
            if code is not None and not isinstance(code, int):
                print(code, file=sys.stderr)
                code = 1
            atexit._run_exitfuncs()  # logging's flush among them
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code or 0)
        print(json.dumps(pid), file=replies)
        print(json.dumps(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])), file=replies)


def forking() -> bool:
    """Whether run() and the cli fixture fork fairseq's and the plugin's console scripts (unless
    ATTN_ONLY_TEST_FORK=0)."""
    return os.environ.get("ATTN_ONLY_TEST_FORK", "1") != "0"


# (pid of the test process, the OpenMP threads the libraries were imported with) -> the server's Popen
_SERVER = {}


def run_forked(tool, argv, *, stdin, cwd, env, timeout) -> subprocess.CompletedProcess:
    """Run the console script tool (fairseq's or the plugin's) with argv as a child of the fork
    server (above), as subprocess.run would: its stdout and stderr as text, TimeoutExpired after
    timeout seconds (the child killed)."""
    import inspect
    import json
    import select
    import signal
    import tempfile

    key = (os.getpid(), env.get("OMP_NUM_THREADS"))  # OpenMP reads it once, when torch is imported
    server = _SERVER.get(key)
    if server is None or server.poll() is not None:
        code = inspect.getsource(_fork_server) + f"\n_fork_server({PRELOADED!r})\n"
        pipes = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)  # unbuffered: select() sees every line
        server = subprocess.Popen([sys.executable, "-c", code], **pipes, env=env)
        _SERVER[key] = server
    with tempfile.TemporaryDirectory(prefix="forked-") as tmp:
        streams = [Path(tmp, name) for name in ("stdin", "stdout", "stderr")]
        streams[0].write_text(stdin or "")
        for path in streams[1:]:
            path.touch()
        ask = dict(tool=tool, argv0=str(BIN / tool), argv=argv, cwd=str(cwd), env=env, streams=[*map(str, streams)])
        server.stdin.write(json.dumps(ask).encode() + b"\n")
        pid = json.loads(server.stdout.readline())
        if not select.select([server.stdout], [], [], timeout)[0]:
            os.kill(pid, signal.SIGKILL)
            server.stdout.readline()
            raise subprocess.TimeoutExpired([tool, *argv], timeout, streams[1].read_text(), streams[2].read_text())
        code = json.loads(server.stdout.readline())
        out, err = (path.read_text(errors="replace") for path in streams[1:])
    return subprocess.CompletedProcess([str(BIN / tool), *argv], code, out, err)


def write_reversal(root: Path, n_train: int, n_valid: int = 100, n_test: int = 100, seed: int = 0):
    """root/{train,valid,test}.{src,tgt}: strings of 3-8 digits and their reversals (no test split
    when n_test is 0)."""
    rng = random.Random(seed)
    for split, n in [("train", n_train), ("valid", n_valid), ("test", n_test)]:
        if not n:
            continue
        rows = [[str(rng.randint(0, 9)) for _ in range(rng.randint(3, 8))] for _ in range(n)]
        (root / f"{split}.src").write_text("".join(" ".join(r) + "\n" for r in rows))
        (root / f"{split}.tgt").write_text("".join(" ".join(reversed(r)) + "\n" for r in rows))


def preprocess(raw: Path, dest: Path, joined=True):
    """fairseq-preprocess raw/{train,valid[,test]}.{src,tgt} into the data-bin dest."""
    test = ["--testpref", raw / "test"] if (raw / "test.src").exists() else []
    run(
        "fairseq-preprocess",
        "--source-lang",
        "src",
        "--target-lang",
        "tgt",
        "--trainpref",
        raw / "train",
        "--validpref",
        raw / "valid",
        *test,
        "--destdir",
        dest,
        "--workers",
        "1",
        *(["--joined-dictionary"] if joined else []),
    )


def reversal_data(root: Path, n_train: int, n_valid: int = 100, n_test: int = 100, seed: int = 0) -> Path:
    """write_reversal into root, binarized with a joined dictionary; returns the data-bin root/bin."""
    write_reversal(root, n_train, n_valid, n_test, seed)
    preprocess(root, root / "bin")
    return root / "bin"


def toy_data(root: Path, n_train: int = 200, n_test: int = 0) -> Path:
    """The small corpus of the resume, distributed and export tests: 200 training sentences (13
    batches of 16, the last one 8), 20 valid; returns the data-bin."""
    return reversal_data(root, n_train, n_valid=20, n_test=n_test)


def train(data_bin, save_dir, *extra, max_update=20, ok=True):
    """fairseq-train with the paper's criterion, schedule and optimizer, seed 1, on the CPU."""
    return run(
        "fairseq-train",
        data_bin,
        "--user-dir",
        PLUGIN,
        *PAPER,
        "--max-tokens",
        2000,
        "--max-update",
        max_update,
        "--save-dir",
        save_dir,
        "--cpu",
        "--seed",
        1,
        "--log-format",
        "simple",
        "--log-interval",
        10,
        *extra,
        ok=ok,
    )


def train_args(data: Path, save_dir: Path, max_update: int, dropout: float, *extra) -> list:
    """fairseq-train's arguments (without the program) on the toy model: fixed batches of 16
    sentences, seed 3, a log line for every update (`num_updates=N`) on stdout, batches loaded in
    the CLI's own process (LOADERS)."""
    return [
        data,
        "--num-workers",
        0,
        "--user-dir",
        PLUGIN,
        "--arch",
        "transformer_base",
        "--encoder-layers",
        2,
        "--decoder-layers",
        2,
        "--d-model",
        32,
        "--d-ff",
        64,
        "--heads",
        4,
        "--dropout",
        dropout,
        "--criterion",
        "paper_label_smoothed_ce",
        "--lr-scheduler",
        "noam",
        "--warmup-updates",
        50,
        "--optimizer",
        "paper_adam",
        "--cpu",
        "--batch-size",
        16,
        "--max-update",
        max_update,
        "--save-dir",
        save_dir,
        "--seed",
        3,
        "--log-format",
        "simple",
        "--log-interval",
        1,
        *extra,
    ]


def generate(setup, path, *extra, data=None):
    """fairseq-generate of checkpoint path on setup/bin (or data), beam 2, 5 tokens at most; not
    required to succeed."""
    return run(
        "fairseq-generate",
        data or setup / "bin",
        "--user-dir",
        PLUGIN,
        "--path",
        path,
        "--cpu",
        "--beam",
        2,
        "--batch-size",
        50,
        "--max-len-a",
        0,
        "--max-len-b",
        5,
        *extra,
        ok=False,
    )


def interactive(setup, checkpoint, stdin, *extra):
    """fairseq-interactive of checkpoint on setup/bin's dictionaries reading stdin; not required
    to succeed."""
    return run(
        "fairseq-interactive",
        setup / "bin",
        "--user-dir",
        PLUGIN,
        "--path",
        checkpoint,
        "--cpu",
        "--beam",
        2,
        "--max-len-a",
        0,
        "--max-len-b",
        5,
        *extra,
        stdin=stdin,
        ok=False,
    )


def one_line_error(proc, *expected):
    """Non-zero exit, no traceback, and the last line of stderr is `error: ...` containing `expected`."""
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and all(e in last for e in expected), last
    return last


def snapshot(folder: Path) -> dict:
    """name -> sha256 of every file under folder (empty if it does not exist), without the lock
    file SAVE_DIR/.train.lock that every fairseq-train run creates or rewrites (save_dir.py): it
    holds a pid, not anything saved."""
    if not folder.exists():
        return {}
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != LOCK_NAME
    }


def load(checkpoint: Path) -> dict:
    """A fairseq checkpoint through torch's safe unpickler (the plugin allow-lists fairseq's types)."""
    return torch.load(checkpoint, weights_only=True)


def num_updates(state: dict) -> int:
    return state["optimizer_history"][-1]["num_updates"]


def free_port() -> int:
    """A TCP port nobody listens on now (the OS picks it when binding port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TREE_LABELS = ("S", "NP", "VP", "PP")


def tree_dictionary(with_orphan=True):
    """A target dictionary of the linearized trees' symbols: XX and an open and a close bracket per label."""
    from fairseq.data import Dictionary

    d = Dictionary()
    for symbol in ["XX"] + [b + label for label in TREE_LABELS for b in "()"]:
        d.add_symbol(symbol)
    if with_orphan:
        d.add_symbol("(ORPHAN")  # no ")ORPHAN": could never be closed
    return d


def fake_checkpoint(path, scale, shape=(2, 3), extra=None):
    """A fairseq-format checkpoint whose tensors hold known values; embed/out are one tensor (tied)."""
    emb = torch.arange(float(shape[0] * shape[1])).reshape(shape) * scale
    model = {
        "embed.weight": emb,
        "out.weight": emb,
        "bias": torch.tensor([scale, -2.0 * scale], dtype=torch.float64),
        "half": torch.tensor([scale], dtype=torch.float16),
        "steps": torch.tensor([int(scale)]),
    }
    model.update(extra or {})
    torch.save(
        {
            "model": model,
            "cfg": {"model": {"_name": "attn_only_transformer"}, "tag": str(path)},
            "optimizer_history": [{"num_updates": int(scale)}],
            "extra_state": {"epoch": 1},
            "last_optimizer_state": {"state": {0: {"exp_avg": torch.ones(3)}}},
        },
        path,
    )
