"""Shared fixtures (the helpers themselves live in helpers.py) and the test tiers.

The tiers: a test is `slow` when it starts a process (a fairseq CLI, a script, a recipe, a
compiler) or uses a fixture that does, e.g. one that trains with fairseq-train. That is read from
the code at collection (helpers.starts_processes), not written by hand on each test: a test
function, each fixture it uses and every function of tests/ they call (helpers.run, helpers.train,
a module's own wrapper, ...) are followed through the names their code refers to; reaching
`subprocess` or `multiprocessing` makes the test slow.
`bash scripts/test.sh --fast` runs the others (`-m "not slow"`). docs/development.md, "Test tiers".
"""

import os
import subprocess
from pathlib import Path

# Triton's interpreter, for the Triton kernels' tests on a CPU (where Triton is installed): set
# before anything imports triton, whose own library functions are interpreted only if it is on
# then. A kernel still runs only where a test turns its flag on; those that test the fallback
# turn the interpreter off again (modules/beam_reorder.py's `available` reads it at each call).
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from helpers import (
    ARCH,
    PLUGIN_TOOLS,
    TIERS,
    command,
    forking,
    make_dictionary,
    reversal_data,
    run_forked,
    starts_processes,
    tool,
    train,
)


def pytest_collection_modifyitems(config, items):
    """Mark `slow` every test that starts a process itself or through one of its fixtures (before
    `-m "not slow"` deselects them); config.stash[TIERS] keeps nodeid -> slow for test_tiers.py."""
    tiers = config.stash.setdefault(TIERS, {})
    for item in items:
        funcs = [getattr(item, "function", None)]
        for name in item.fixturenames:
            funcs += [fixturedef.func for fixturedef in item._fixtureinfo.name2fixturedefs.get(name, ())]
        tiers[item.nodeid] = any(func is not None and starts_processes(func) for func in funcs)
        if tiers[item.nodeid]:
            item.add_marker(pytest.mark.slow)
    # The modules with the most slow tests first (stable otherwise): pytest-xdist's --dist loadfile
    # hands out modules in this order, so the long ones start early and the in-process ones fill
    # the end, instead of a long module starting last while the other workers have nothing left.
    slow_in = {}
    for item in items:
        slow_in[item.path] = slow_in.get(item.path, 0) + tiers[item.nodeid]
    items.sort(key=lambda item: -slow_in[item.path])


@pytest.fixture
def dictionary():
    return make_dictionary()


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread here and in the CLIs (for modules that use it): cases that check error
    paths, where a tiny model's ops cost milliseconds each when torch's threads compete with
    another job for the cores."""
    import torch

    saved_env, saved_threads = os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads()
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved_threads)
    if saved_env is None:
        del os.environ["OMP_NUM_THREADS"]
    else:
        os.environ["OMP_NUM_THREADS"] = saved_env


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """root/bin: digit-reversal data-bin (300 training sentences); root/ckpt: a model of ARCH
    trained for 3 updates (one epoch). One per module that uses it."""
    root = tmp_path_factory.mktemp("bad_input")
    reversal_data(root, 300)
    train(root / "bin", root / "ckpt", *ARCH, max_update=3)
    return root


@pytest.fixture(scope="module")
def checkpoint(setup):
    return setup / "ckpt" / "checkpoint_last.pt"


@pytest.fixture
def script():
    """script('training_flops') -> the module of that command (helpers.tool)."""
    return tool


@pytest.fixture
def cli():
    """cli('average_checkpoints', *args) -> CompletedProcess of the command as a user runs it:
    attn-only-average-checkpoints ARGS (a console script), python benchmarks/NAME.py ARGS. The
    plugin's console scripts run forked (helpers.run_forked), the others as fresh processes."""

    def run(name, *args):
        env, argv = dict(os.environ, PYTHONWARNINGS="ignore"), [*map(str, args)]
        if name in PLUGIN_TOOLS and forking():  # the plugin's commands import fairseq: forked as fairseq's CLIs are
            return run_forked(Path(command(name)[0]).name, argv, stdin=None, cwd=os.getcwd(), env=env, timeout=600)
        return subprocess.run([*command(name), *argv], capture_output=True, text=True, env=env, timeout=600)

    return run


@pytest.fixture
def dynamo_counters():
    """torch.compile's counters (torch._dynamo.utils.counters), its caches and counts emptied
    before and after the test: the counts are the test's own, and no later test meets its graphs."""
    import torch
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    yield counters
    torch._dynamo.reset()
    counters.clear()
