"""attn_only_tools runs without fairseq and torch: the package and every command of attn_only_tools.cli
import in a fresh interpreter where importing fairseq or torch raises, and each command still ends
an unforeseen error in one line (the one-line hook of attn_only_tools/guards/errors.py)."""

import os
import subprocess
import sys

import pytest

from helpers import ROOT, TOOLS

UNEXPECTED = "unexpected: rerun with ATTN_ONLY_TRACEBACK=1 for the traceback and report it"

# A meta-path finder, first on sys.meta_path, that refuses fairseq and torch (and the plugin, which
# imports them): an import of any of them anywhere below raises ImportError.
NO_FAIRSEQ = """
import importlib, sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("fairseq", "fairseq_cli", "torch", "attn_only_plugin"):
            raise ImportError(f"{name} is made unimportable by the test")
        return None
sys.meta_path.insert(0, Refuse())
"""

# Runs a command as `python -m attn_only_tools.cli.NAME a b` would, with a failure nobody foresaw
# injected where every command passes: argument parsing (plot_loss parses by hand, then checks its
# output against its input with the shared rule, guards/atomic.check_output, which looks whether the
# input exists).
RUN_WITH_A_BUG = """
import argparse, os, runpy, sys
def boom(*args, **kwargs):
    raise KeyError("boom")
argparse.ArgumentParser.parse_args = boom
os.path.samefile = os.path.exists = boom
sys.argv = [sys.argv[1], "a", "b"]
runpy.run_module(sys.argv[0], run_name="__main__")
"""


def run(code, *args, **env):
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONWARNINGS="ignore", **env),
        timeout=120,
    )


def test_every_module_imports_without_fairseq_or_torch():
    """The package, its subpackages and every command's module, imported with fairseq, torch and the
    plugin refused: a fairseq or torch import added anywhere in attn_only_tools (at module level)
    fails here. import-linter's "tools" contract checks the imports inside functions too."""
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in (ROOT / "attn_only_tools").rglob("*.py")
    )
    assert "attn_only_tools.cli.evalb" in modules and "attn_only_tools.generate_log" in modules
    code = NO_FAIRSEQ + (
        f"for name in {modules!r}:\n    importlib.import_module(name)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'fairseq', 'torch', 'attn_only_plugin'}))"
    )
    proc = run(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_the_refusal_would_be_seen():
    """The control: with the finder in place, importing fairseq (or torch) does fail, so the test above
    could fail."""
    for name in ("fairseq", "torch", "attn_only_plugin"):
        proc = run(NO_FAIRSEQ + f"import {name}")
        assert proc.returncode == 1 and "made unimportable by the test" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("name", TOOLS)
def test_help_runs_without_fairseq_or_torch(name):
    """--help (and with it every import the command makes before parsing its arguments)."""
    code = NO_FAIRSEQ + (
        "import runpy\nsys.argv = [sys.argv[1], '--help']\ntry:\n"
        "    runpy.run_module(sys.argv[0], run_name='__main__')\nexcept SystemExit:\n    pass\n"
    )
    proc = run(code, f"attn_only_tools.cli.{name}")
    assert proc.returncode == 0 and "usage:" in proc.stdout, proc.stderr[-2000:]


@pytest.mark.parametrize("name", TOOLS)
def test_unforeseen_error_is_one_line(name):
    proc = run(RUN_WITH_A_BUG, f"attn_only_tools.cli.{name}")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip() == f"error: KeyError: 'boom'; {UNEXPECTED}", proc.stderr


def test_traceback_on_request():
    proc = run(RUN_WITH_A_BUG, "attn_only_tools.cli.training_flops", ATTN_ONLY_TRACEBACK="1")
    assert proc.returncode == 1 and "Traceback" in proc.stderr
    assert proc.stderr.strip().endswith("KeyError: 'boom'")


def test_known_cause_is_explained():
    """explain.py comes along: an OSError naming its path gets the path and what to do."""
    code = RUN_WITH_A_BUG.replace(
        'raise KeyError("boom")', 'raise PermissionError(13, "Permission denied", "/x/out.txt")'
    )
    proc = run(code, "attn_only_tools.cli.spm_prepare")
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        "error: /x/out.txt: Permission denied: no permission: write elsewhere or change the folder's permissions"
    )


@pytest.mark.parametrize("name", TOOLS)
def test_help_under_a_bare_python(name):
    """Under `python -S` (no site, as a Python outside the project's venv may start) with the checkout
    and the venv's packages on PYTHONPATH, every command's --help runs: nothing relies on what the
    venv's start-up happens to import (scripts loaded by path once relied on importlib.machinery)."""
    import site

    packages = os.pathsep.join([str(ROOT), *site.getsitepackages()])  # without site's start-up imports
    proc = subprocess.run(
        [sys.executable, "-S", "-m", f"attn_only_tools.cli.{name}", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=packages),
    )
    assert proc.returncode == 0 and "usage:" in proc.stdout, proc.stderr
