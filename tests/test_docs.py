"""README.md and docs/*.md cannot rot: every relative link (and its #anchor) resolves, and every
`scripts/...`, `benchmarks/...`, `examples/...`, `tests/...`, `attn_only_plugin/...` and
`attn_only_tools/...` path they name exists, and every `attn-only-*` command they name is a console script."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
PATH = re.compile(r"(?<![\w./$-])((?:scripts|benchmarks|examples|tests|attn_only_plugin|attn_only_tools)/[\w./-]*)")
COMMAND = re.compile(r"(?<![\w./$-])(attn-only-[a-z0-9]+(?:-[a-z0-9]+)*)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def anchors(page: Path) -> set:
    """GitHub's heading ids: lower case, punctuation but - and _ dropped, spaces to -, -N for repeats."""
    seen, ids = {}, set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", FENCE.sub("", page.read_text(encoding="utf-8")), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        ids.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return ids


def test_the_pages_are_there():
    names = {page_id(p) for p in PAGES}
    assert {"README.md", "docs/reliability.md", "docs/speed.md", "docs/model.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_relative_links_resolve(page):
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: {page_id(file)} has no heading #{anchor}")
    assert not broken, f"{page_id(page)}: broken links:\n" + "\n".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_named_paths_exist(page):
    missing = sorted(
        {p.rstrip(".-") for p in PATH.findall(page.read_text(encoding="utf-8")) if not (ROOT / p.rstrip(".-")).exists()}
    )
    assert not missing, f"{page_id(page)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_named_commands_exist(page):
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    missing = sorted(set(COMMAND.findall(page.read_text(encoding="utf-8"))) - set(scripts))
    assert not missing, f"{page_id(page)} names commands that are not console scripts: {missing}"


def test_the_checks_catch_rot(tmp_path):
    """The patterns find what they must: a link with an anchor, an image, a path inside a command."""
    text = (
        "see [a](docs/speed.md#on-the-cpu) and ![f](examples/figures/x.png);\n"
        "    python scripts/benchmark.py --out $OUT/b.json; `tests/test_resume.py` ends.\n"
    )
    assert LINK.findall(text) == ["docs/speed.md#on-the-cpu", "examples/figures/x.png"]
    assert PATH.findall(text) == ["examples/figures/x.png", "scripts/benchmark.py", "tests/test_resume.py"]
    (tmp_path / "p.md").write_text("# What `--user-dir x` does\n## Tried and not kept\n## Tried and not kept\n")
    assert anchors(tmp_path / "p.md") == {"what---user-dir-x-does", "tried-and-not-kept", "tried-and-not-kept-1"}
