"""`attn-only-NAME --help` for every console script and `python benchmarks/NAME.py --help` for every
measurement: exit status 0, one paragraph that says what the command does, and an example command
line of that command; and `python scripts/NAME.py` still runs each (the shims)."""

import re
import subprocess
import sys

import pytest

from helpers import BENCHMARKS, PLUGIN_TOOLS, ROOT, TOOLS

NAMES = sorted(TOOLS + PLUGIN_TOOLS + BENCHMARKS)  # benchmarks/_x.py: a module of theirs, not a command


def blocks(text: str) -> list:
    """The help text cut at blank lines, each block a list of its lines."""
    return [b.splitlines() for b in re.split(r"\n\s*\n", text.strip())]


@pytest.mark.parametrize("name", NAMES)
def test_help_has_a_description_and_an_example(name, cli):
    proc = cli(name, "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    parts = blocks(proc.stdout)
    assert parts[0][0].startswith("usage:"), proc.stdout[:500]
    section = re.compile(r"^[a-z][a-z ]*:$")  # "options:", "positional arguments:"
    description = parts[1]  # the block after the usage lines: one paragraph, then the options
    assert not section.match(description[0]), f"no description after the usage lines:\n{proc.stdout[:800]}"
    assert section.match(parts[2][0]), f"the description is more than one paragraph:\n{proc.stdout[:1500]}"
    words = " ".join(description).split()
    assert len(words) >= 12, f"the description is {len(words)} words: say what {name} does"
    said = f"python benchmarks/{name}.py" if name in BENCHMARKS else f"attn-only-{name.replace('_', '-')}"
    example = re.compile(rf"^\s+(python3? )?{re.escape(said.removeprefix('python '))}( |$)")
    assert any(example.match(line) for part in parts[2:] for line in part), (
        f"no example `{said} ...` after the description:\n{proc.stdout[-800:]}"
    )


def test_every_command_is_checked():
    assert len(NAMES) >= 20 and "benchmark" in NAMES and "plot_loss" in NAMES and "translate_transformers" in NAMES


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "scripts").glob("*.py")))
def test_the_old_script_paths_still_run(name):
    """python scripts/NAME.py --help: each shim reaches its command (or the measurement in benchmarks/)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / f"{name}.py"), "--help"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0 and proc.stdout.startswith("usage:"), proc.stderr[-2000:]
