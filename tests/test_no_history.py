"""No history in code (docs/development.md, "Conventions"): no issue numbers, dates or commit
hashes in the code, its comments, docstrings, messages and script headers. Figures live in docs/
with their date and commit; git log holds the rest."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ["attn_only_plugin", "attn_only_tools", "scripts", "benchmarks", "examples", "tests", ".ci"]
SUFFIXES = {".py", ".sh", ".yaml", ".toml", ".cfg", ".ini", ""}  # "": .ci/run
# the committed corpus (other people's text), and this file (the patterns' own examples)
SKIPPED = {ROOT / "examples" / "data", Path(__file__)}
HISTORY = {
    "an issue number": re.compile(r"\bissues? #?\d+", re.IGNORECASE),
    "a date": re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b(?! \d\d:\d\d)"),  # not a log line's timestamp
    "a commit hash": re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,12}\b"),
}


def _files():
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            if (
                path.is_file()
                and path.suffix in SUFFIXES
                and "__pycache__" not in path.parts
                and not any(path.is_relative_to(skip) for skip in SKIPPED)
            ):
                yield path


def test_no_issue_numbers_dates_or_commit_hashes_in_code():
    found = []
    for path in _files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for what, pattern in HISTORY.items():
                if pattern.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {what}: {line.strip()[:100]}")
    assert not found, "history belongs in git log and docs/, not in code:\n" + "\n".join(found)


def test_the_patterns_catch_what_they_are_for():
    assert HISTORY["an issue number"].search("the shared rule (issue 30)")
    assert HISTORY["a date"].search("measured 2026-11-25 on this CPU")
    assert not HISTORY["a date"].search("2026-01-01 10:00:00 | INFO | train_inner")
    assert HISTORY["a commit hash"].search("ours before 0843ef9")
    assert not HISTORY["a commit hash"].search("HAND = [0.9166667, 0.9490839]")
