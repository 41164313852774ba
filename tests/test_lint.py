"""The tree keeps pyproject.toml's ruff settings (`ruff check .` finds nothing, `ruff format --check .`
changes nothing), ruff does read them (a file breaking them is reported), and the installed scripts
are every command's module."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUFF = Path(sys.executable).parent / "ruff"


def ruff(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    if not RUFF.exists():
        pytest.fail(f"{RUFF} is missing: run `bash scripts/install.sh` (it installs ruff)")
    return subprocess.run([str(RUFF), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_tree_is_lint_clean():
    proc = ruff("check", "--no-cache", ".")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_the_tree_is_formatted():
    """`ruff format` (pyproject.toml's [tool.ruff.format]) would change nothing."""
    proc = ruff("format", "--check", "--no-cache", ".")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_the_formatter_reads_the_settings(tmp_path):
    """A file the formatter would change is reported, at the project's line length."""
    (tmp_path / "ugly.py").write_text("x = [1,2]\n" + f"y = f({', '.join(['aaaaaaaaaa'] * 11)})\n")
    proc = ruff("format", "--check", "--no-cache", "--config", ROOT / "pyproject.toml", "ugly.py", cwd=tmp_path)
    assert proc.returncode == 1 and "ugly.py" in proc.stdout, proc.stdout + proc.stderr
    (tmp_path / "ugly.py").write_text("x = [1, 2]\n" + f"y = f({', '.join(['aaaaaaaaaa'] * 9)})\n")  # 112 characters
    proc = ruff("format", "--check", "--no-cache", "--config", ROOT / "pyproject.toml", "ugly.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_settings_are_the_projects(tmp_path):
    """One finding per selected family, at the project's line length of 120 (121 is too long)."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import sys\nimport os\n\n\n"  # I001: not sorted; F401: unused
        f"x = {'1' * 116}\n"  # 120 characters: allowed
        f"y = {'1' * 117}\n"  # 121: E501
        "z = [a for a, b in zip(range(2), range(3))]\n"  # B905: zip without strict=
        "w = '%d' % 1 \n"
    )  # UP031; W291: trailing space
    proc = ruff(
        "check", "--no-cache", "--config", ROOT / "pyproject.toml", "--output-format", "concise", bad.name, cwd=tmp_path
    )
    found = {line.split(" ")[1] for line in proc.stdout.splitlines() if line.startswith("bad.py:")}
    assert proc.returncode == 1 and found == {"I001", "F401", "E501", "B905", "UP031", "W291"}, proc.stdout
    assert "bad.py:6:" in proc.stdout and "bad.py:5:" not in proc.stdout


def test_every_command_is_a_console_script():
    """pyproject.toml's [project.scripts]: each module of attn_only_tools/cli/ and attn_only_plugin/cli/
    has exactly one console script, attn-only-NAME (NAME's underscores as hyphens), and nothing else is
    listed; every shim in scripts/ names a real one and calls its module's main."""
    tomllib = pytest.importorskip("tomllib")  # the standard library's from Python 3.11
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    modules = {
        f"{package}.cli.{p.stem}": p.stem
        for package in ("attn_only_tools", "attn_only_plugin")
        for p in (ROOT / package / "cli").glob("[!_]*.py")
    }
    targets = [entry.split(":")[0] for entry in scripts.values()]
    assert sorted(targets) == sorted(modules), "a cli module without its console script, or one listed twice"
    assert all(entry.endswith(":main") for entry in scripts.values())
    for name, entry in scripts.items():
        assert name == "attn-only-" + modules[entry.split(":")[0]].replace("_", "-"), name
    assert not tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"].get("script-files")
    shims = 0
    for path in sorted((ROOT / "scripts").glob("*.py")):
        text = path.read_text()
        moved = re.match(r'"""moved to (attn-only-[a-z0-9-]+) \((attn_only_\w+\.cli\.\w+)\);', text)
        if moved is None:  # a measurement that moved to benchmarks/: the shim runs it from there
            assert "benchmarks" in text and (ROOT / "benchmarks" / path.name).is_file(), path.name
            continue
        shims += 1
        assert scripts.get(moved.group(1)) == f"{moved.group(2)}:main", path.name
        assert f"from {moved.group(2)} import main" in text and "path.insert" not in text, path.name
    new = {"translate_transformers", "hypotheses"}  # commands with no scripts/X.py before them
    assert shims == len(modules) - len(new) and new <= set(modules.values())


def test_moved_shell_study_runs_from_its_new_place():
    """studies/reversal_search.sh, the name it had before benchmarks/, runs that script with the
    same environment: a bad SEEDS gets the moved script's own one-line refusal."""
    proc = subprocess.run(
        ["bash", str(ROOT / "studies" / "reversal_search.sh")],
        capture_output=True,
        text=True,
        env=dict(os.environ, SEEDS="x"),
        timeout=60,
    )
    assert proc.returncode == 1 and proc.stderr == "error: SEEDS holds 'x': give whole numbers\n", proc.stderr
