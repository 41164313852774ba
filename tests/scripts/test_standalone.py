"""scripts/_standalone.py: the scripts that do not import fairseq still end an unforeseen error in
one line (errors.py's hook, loaded from its file), and really import neither fairseq nor torch."""

import os
import subprocess
import sys

import pytest

from conftest import SCRIPTS

# every script that does not import the attn_only_plugin package (and with it fairseq)
STANDALONE = [
    "bleu_compound_split",
    "compare_quality",
    "evalb",
    "plot_loss",
    "prepare_libreoffice",
    "sacrebleu_detok",
    "shuffle_split",
    "spm_prepare",
    "table1",
    "training_flops",
]
UNEXPECTED = "unexpected: rerun with ATTN_ONLY_TRACEBACK=1 for the traceback and report it"

# Runs a script as `python scripts/NAME.py a b` would, with a failure nobody foresaw injected where
# every script passes: argument parsing (plot_loss parses by hand, then checks its output against its
# input with the shared rule, guards/atomic.check_output, which looks whether the input exists).
RUN_WITH_A_BUG = """
import argparse, os, runpy, sys
def boom(*args, **kwargs):
    raise KeyError("boom")
argparse.ArgumentParser.parse_args = boom
os.path.samefile = os.path.exists = boom
sys.argv = [sys.argv[1], "a", "b"]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run(code, *args, **env):
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONWARNINGS="ignore", **env),
        timeout=120,
    )


@pytest.mark.parametrize("name", STANDALONE)
def test_unforeseen_error_is_one_line(name):
    proc = run(RUN_WITH_A_BUG, str(SCRIPTS / f"{name}.py"))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip() == f"error: KeyError: 'boom'; {UNEXPECTED}", proc.stderr


def test_traceback_on_request():
    proc = run(RUN_WITH_A_BUG, str(SCRIPTS / "training_flops.py"), ATTN_ONLY_TRACEBACK="1")
    assert proc.returncode == 1 and "Traceback" in proc.stderr
    assert proc.stderr.strip().endswith("KeyError: 'boom'")


def test_known_cause_is_explained():
    """explain.py comes along: an OSError naming its path gets the path and what to do."""
    code = RUN_WITH_A_BUG.replace(
        'raise KeyError("boom")', 'raise PermissionError(13, "Permission denied", "/x/out.txt")'
    )
    proc = run(code, str(SCRIPTS / "spm_prepare.py"))
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        "error: /x/out.txt: Permission denied: no permission: write elsewhere or change the folder's permissions"
    )


@pytest.mark.parametrize("name", STANDALONE)
def test_imports_neither_fairseq_nor_torch(name):
    """The point of loading files by path: --help (and with it every top-level import and the
    package files the script loads) runs without fairseq or torch."""
    code = (
        "import runpy, sys\nsys.argv = [sys.argv[1], '--help']\ntry:\n"
        "    runpy.run_path(sys.argv[0], run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'fairseq', 'torch', 'attn_only_plugin'}))"
    )
    proc = run(code, str(SCRIPTS / f"{name}.py"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_the_list_is_complete():
    """A new script either imports the package (and gets the hook from its __init__) or uses _standalone."""
    for path in sorted(SCRIPTS.glob("*.py")):
        text = path.read_text()
        if path.name.startswith("_"):  # a helper beside the scripts (_standalone, _quality_runs), not a command
            continue
        uses_package = "import attn_only_plugin" in text or "from attn_only_plugin" in text
        assert uses_package or "_standalone.one_line_errors()" in text, path.name
        if path.stem in STANDALONE:
            assert "_standalone.one_line_errors()" in text, path.name


@pytest.mark.parametrize("name", STANDALONE)
def test_help_under_a_bare_python(name):
    """_standalone.py used importlib.machinery without importing it, which only the
    venv's start-up happened to have imported: under `python -S` (no site, as a Python outside the
    project's venv may start) every standalone script, --help included, ended in a traceback. Run as
    a file: runpy would import importlib.machinery itself."""
    bare = subprocess.run(
        [sys.executable, "-S", "-c", "import sys; print('importlib.machinery' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bare.stdout.strip() == "False"  # the condition of the bug, or this test could not fail
    import site

    packages = os.pathsep.join(site.getsitepackages())  # on the path, without site's start-up imports
    proc = subprocess.run(
        [sys.executable, "-S", str(SCRIPTS / f"{name}.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=packages),
    )
    assert proc.returncode == 0 and "usage:" in proc.stdout, proc.stderr
