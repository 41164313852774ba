"""The test tiers (docs/development.md, "Test tiers"): helpers.starts_processes reads from a test's
code whether it starts a process, and conftest.py marks those tests `slow`, which
`bash scripts/test.sh --fast` leaves out."""

import ast
import os
import subprocess
from pathlib import Path
from subprocess import check_output

import pytest

import helpers
from helpers import TIERS, starts_processes


def _pure(x):
    return [i * 2 for i in range(x)]


def _calls_run():
    return helpers.run("fairseq-train", "--help")


def _calls_a_caller():
    return _calls_run()


def _process_in_a_comprehension(names):
    return [subprocess.run(["echo", n]) for n in names]


def _imported_by_name():
    return check_output(["true"])


def _imports_inside():
    import subprocess as sp

    return sp


def _multiprocessing_context(module):
    return module.mp.get_context("spawn")


def _sample(name: str):
    """One of the functions above, looked up by name: a test that named them in its code would
    itself refer to process starters, and so be slow."""
    return globals()[f"_{name}"]


def test_what_starts_a_process_is_read_from_the_code():
    assert not starts_processes(_sample("pure"))
    assert not starts_processes(helpers.build_model)  # a tiny model in this process
    for name in ("run", "train", "reversal_data"):  # train through run, reversal_data through preprocess
        assert starts_processes(getattr(helpers, name)), name
    for name in ("calls_run", "calls_a_caller", "process_in_a_comprehension", "imported_by_name"):
        assert starts_processes(_sample(name)), name
    assert starts_processes(_sample("imports_inside"))
    assert starts_processes(_sample("multiprocessing_context"))


def _marked(request, module: str) -> dict:
    """nodeid -> slow, as conftest.py decided it for every collected test of module (a path under
    tests/), deselected by `-m "not slow"` or not."""
    tiers = request.config.stash[TIERS]  # a KeyError: conftest.py's hook did not run
    marked = {nodeid: slow for nodeid, slow in tiers.items() if nodeid.startswith(f"tests/{module}::")}
    if not marked:
        pytest.skip(f"tests/{module} was not collected in this run (run the whole suite or --fast)")
    return marked


def test_cli_and_fixture_tests_are_slow_in_process_tests_are_not(request):
    # every test of test_end_to_end.py runs the CLIs or uses the data fixture that preprocesses
    assert all(_marked(request, "test_end_to_end.py").values())
    # test_bad_input.py: CLI cases and in-process cases side by side; the `setup` fixture trains
    bad_input = _marked(request, "test_bad_input.py")
    assert bad_input["tests/test_bad_input.py::test_missing_or_empty_data_directory"]  # fairseq-train
    assert bad_input["tests/test_bad_input.py::test_python_api_arguments_are_checked"]  # setup trains
    assert not bad_input["tests/test_bad_input.py::test_label_smoothing_and_warmup_ranges_in_process"]
    assert not bad_input["tests/test_bad_input.py::test_atomic_output_names_the_users_path"]
    # the model's own tests run in this process
    assert not any(_marked(request, "modules/test_attention.py").values())
    tiers = _marked(request, "test_tiers.py")
    assert not tiers["tests/test_tiers.py::test_what_starts_a_process_is_read_from_the_code"]


def test_test_sh_fast_leaves_the_slow_tests_out():
    """`bash scripts/test.sh --fast` (after its install check) collects the fast tests only; without
    --fast it collects both tiers."""
    paths = ["tests/test_tiers.py", "tests/test_end_to_end.py"]

    def collected(*flags):
        proc = subprocess.run(
            ["bash", str(helpers.ROOT / "scripts" / "test.sh"), *flags, "--collect-only", "-q", *paths],
            capture_output=True,
            text=True,
            cwd=helpers.ROOT,
            env=dict(os.environ, TEST_WORKERS="1"),  # collected in one process: no workers to start
            timeout=600,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        return [line for line in proc.stdout.splitlines() if "::" in line]

    fast, everything = collected("--fast"), collected()
    assert fast and not any("test_end_to_end.py" in nodeid for nodeid in fast)
    assert "tests/test_tiers.py::test_what_starts_a_process_is_read_from_the_code" in fast
    assert any("test_end_to_end.py" in nodeid for nodeid in everything) and set(fast) < set(everything)


def test_test_sh_refuses_a_bad_worker_count(tmp_path):
    """TEST_WORKERS (pytest-xdist workers; 1: one process) that is not a whole number >= 1 is refused
    in one line, before the install check."""
    for workers in ("0", "two", "-n"):
        proc = subprocess.run(
            ["bash", str(helpers.ROOT / "scripts" / "test.sh"), "--fast"],
            capture_output=True,
            text=True,
            env=dict(os.environ, TEST_WORKERS=workers, VENV=str(tmp_path / "no-venv")),
            timeout=60,
        )
        assert proc.returncode == 1 and proc.stderr.splitlines() == [
            f"error: TEST_WORKERS={workers}: give a whole number >= 1 (1 runs the tests in one process)"
        ], proc.stderr
    assert not (tmp_path / "no-venv").exists()


def test_no_test_module_imports_another():
    """Shared helpers and fixtures live in tests/helpers.py and the conftest files: a test module
    that imports another runs that module's collection-time code and ties the two together."""
    tests = Path(__file__).resolve().parent
    modules = {p.stem for p in tests.rglob("test_*.py")}
    found = []
    for path in tests.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(tests)}: {n}" for n in names if n.split(".")[0] in modules]
    assert not found, found
