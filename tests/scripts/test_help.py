"""`python scripts/NAME.py --help` for every script in scripts/: exit status 0, one paragraph that
says what the script does, and an example command line of that script."""

import re
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"

NAMES = sorted(p.stem for p in SCRIPTS.glob("*.py") if not p.name.startswith("_"))  # _x.py: a module of theirs


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
    assert len(words) >= 12, f"the description is {len(words)} words: say what {name}.py does"
    example = re.compile(rf"^\s+python3? scripts/{name}\.py( |$)")
    assert any(example.match(line) for part in parts[2:] for line in part), (
        f"no example `python scripts/{name}.py ...` after the description:\n{proc.stdout[-800:]}"
    )


def test_every_script_is_checked():
    assert len(NAMES) >= 10 and "benchmark" in NAMES and "plot_loss" in NAMES
