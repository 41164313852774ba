"""LibreOffice help corpus: extraction, alignment, cleaning, de-duplication, split by file,
atomic writing, the CLI's error line, and the committed embedded subset. No network, no apt."""

import shutil
import subprocess
from pathlib import Path

import pytest

from attn_only_tools.data.libreoffice import (
    align,
    build_splits,
    extract_paragraphs,
    find_help_root,
    make_subset,
    split_of,
    write_corpus,
)
from helpers import BIN

ROOT = Path(__file__).resolve().parents[3]
EMBEDDED = ROOT / "examples" / "data" / "libreoffice_en_de"

PAGE = """<!DOCTYPE html><html><head><title>{title}</title><meta charset="utf-8"></head><body>
<div id="DisplayArea"><h1 id="hd_id1" dir="auto"><a name="x"></a>{title}</h1>
<p id="par_id1" class="paragraph">{p1}</p>
<p id="par_id2">{shortcut} <span id="sw" class="switchinline"><span hidden="true" id="MACx" class="MAC">
<span class="keycode">Cmd</span></span><span hidden="true" id="defaultx"><span class="keycode">Ctrl</span></span>
</span><span class="keycode"> + F</span></p>
<p id="par_id3">LibreOffice</p>
<p id="par_id4">{shared}</p>
<p id="par_id5"> 1. </p>
<p>no id: ignored</p></div></body></html>"""

EN = dict(shortcut="Press", shared="Click &lt;OK&gt;.")
DE = dict(shortcut="Drücken Sie", shared="Klicken Sie auf &lt;OK&gt;.")


def make_trees(tmp_path: Path, n_files: int = 4):
    """Fake unpacked en-US and de help trees with the real layout; returns the two help roots."""
    roots = {}
    for lang, words, folder in (("en", EN, "en-US"), ("de", DE, "de")):
        root = tmp_path / lang / "usr" / "share" / "libreoffice" / "help" / folder
        for i in range(n_files):
            title = f"Page {i}" if lang == "en" else f"Seite {i}"
            p1 = (
                f"The <b>Find</b>&nbsp;toolbar\n\t number {i}."
                if lang == "en"
                else f"Die Symbolleiste <b>Suchen</b> Nummer {i}."
            )
            path = root / "text" / f"module{i % 2}" / f"page{i}.html"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(PAGE.format(title=title, p1=p1, **words), encoding="utf-8")
        roots[lang] = find_help_root(tmp_path / lang, lang)
    (roots["en"] / "text" / "only_english.html").write_text(PAGE.format(title="Lonely", p1="x", **EN))
    return roots["en"], roots["de"]


def test_extract_strips_markup_unescapes_and_keeps_default_variant():
    paras = extract_paragraphs(PAGE.format(title="Find &amp; Replace", p1="A <b>bold</b>\n  word<br/>here", **EN))
    assert paras == {
        "hd_id1": "Find & Replace",
        "par_id1": "A bold word here",
        "par_id2": "Press Ctrl + F",
        "par_id3": "LibreOffice",
        "par_id4": "Click <OK>.",
    }  # par_id5 has no letter


def test_repeated_id_in_one_page_gets_a_numbered_key():
    paras = extract_paragraphs('<p id="a">one</p><h2 id="a">two</h2><p id="a">three</p>')
    assert paras == {"a": "one", "a#2": "two", "a#3": "three"}


def test_find_help_root_reports_a_missing_tree(tmp_path):
    with pytest.raises(FileNotFoundError):
        find_help_root(tmp_path, "fr")


def test_align_cleans_and_pairs_by_file_and_id(tmp_path):
    en, de = make_trees(tmp_path)
    pairs = list(align(en, de))
    assert {rel for rel, *_ in pairs} == {f"text/module{i % 2}/page{i}.html" for i in range(4)}
    by_key = {(rel, pid): (src, tgt) for rel, pid, src, tgt in pairs}
    assert by_key[("text/module0/page0.html", "par_id1")] == (
        "The Find toolbar number 0.",
        "Die Symbolleiste Suchen Nummer 0.",
    )
    assert by_key[("text/module1/page3.html", "par_id2")] == ("Press Ctrl + F", "Drücken Sie Ctrl + F")
    assert all(pid != "par_id3" for _, pid, _, _ in pairs)  # identical sides dropped
    assert all("\t" not in s and "\n" not in s and "  " not in s for p in pairs for s in p[2:])


def test_align_drops_overlong_paragraphs(tmp_path):
    en, de = make_trees(tmp_path, n_files=1)
    page = en / "text" / "module0" / "page0.html"
    page.write_text(page.read_text().replace("The <b>Find</b>", "word " * 201))
    assert "par_id1" not in {pid for _, pid, _, _ in align(en, de)}
    assert "par_id1" in {pid for _, pid, _, _ in align(en, de, max_words=500)}


def test_build_splits_deduplicates_and_never_splits_a_file(tmp_path):
    en, de = make_trees(tmp_path, n_files=4)
    pairs = list(align(en, de))
    splits = build_splits(pairs)
    everything = [p for s in splits.values() for p in s]
    assert len(everything) == len(set(everything))
    assert everything.count(("Click <OK>.", "Klicken Sie auf <OK>.")) == 1  # in all four files
    assert sum(len(s) for s in splits.values()) == len(pairs) - 6  # par_id2 and par_id4: 3 copies each
    for rel, _pid, src, tgt in pairs:
        if src not in ("Click <OK>.", "Press Ctrl + F"):
            assert (src, tgt) in splits[split_of(rel)]
    files = [f"text/f{i}.html" for i in range(400)]  # many files: all splits used, each file once
    aligned = [(rel, f"p{j}", f"{rel} s{j}", f"{rel} t{j}") for rel in files for j in range(3)]
    splits = build_splits(aligned)
    owner = {}
    for split, split_pairs in splits.items():
        for src, _tgt in split_pairs:
            assert owner.setdefault(src.split()[0], split) == split
    assert set(owner.values()) == {"train", "valid", "test"}
    assert 0.9 < len(splits["train"]) / len(aligned) < 0.99


def test_held_out_sources_are_removed_from_train():
    held = next(f"f{i}" for i in range(1000) if split_of(f"f{i}") == "test")
    train = next(f"f{i}" for i in range(1000) if split_of(f"f{i}") == "train")
    splits = build_splits([(held, "p", "Open", "Öffnen"), (train, "p", "Open", "Öffne"), (train, "q", "A", "B")])
    assert splits == {"train": [("A", "B")], "valid": [], "test": [("Open", "Öffnen")]}


def test_write_corpus_is_atomic(tmp_path):
    good = {"train": [("a b", "c d"), ("e", "f")], "valid": [("g", "h")], "test": [("i", "j")]}
    assert write_corpus(good, tmp_path, "en", "de") == {"train": 2, "valid": 1, "test": 1}
    assert (tmp_path / "train.de").read_text(encoding="utf-8") == "c d\nf\n"
    bad = {"train": [("new", "neu")], "valid": [("x", "")], "test": [("i", "j")]}
    with pytest.raises(ValueError):
        write_corpus(bad, tmp_path, "en", "de")
    assert (tmp_path / "train.en").read_text() == "a b\ne\n"  # old corpus untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{s}.{lang}" for s in good for lang in ("en", "de"))


def test_make_subset_is_deterministic_and_bounded():
    splits = {
        "train": [(f"w{i} " * (i % 60 + 1), f"t{i}") for i in range(300)],
        "valid": [("v", "w")] * 3,
        "test": [("x", "y")] * 3,
    }
    sub = make_subset(splits, 50, 2, 5, max_words=40)
    assert sub == make_subset(splits, 50, 2, 5, max_words=40)
    assert len(sub["train"]) == 50 and len(sub["valid"]) == 2 and len(sub["test"]) == 3
    assert all(len(s.split()) <= 40 for s, _ in sub["train"])
    assert sub["train"][:40] == splits["train"][:40]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--debs-dir", "{tmp}/missing"], "error: --debs-dir"),
        (["--debs-dir", "{tmp}"], "error: no libreoffice-help-en-us_*.deb in"),
    ],
)
def test_cli_fails_with_one_error_line(tmp_path, args, message):
    if "deb in" in message and shutil.which("dpkg-deb") is None:
        message = "error: dpkg-deb not found"  # checked before the .deb files are looked for
    out = tmp_path / "out"
    cmd = [
        str(BIN / "attn-only-prepare-libreoffice"),
        "--workdir",
        str(tmp_path / "w"),
        "--out",
        str(out),
    ] + [a.format(tmp=tmp_path) for a in args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), proc.stderr
    assert not out.exists()


def test_embedded_subset_is_committed_and_well_formed():
    for split in ("train", "valid", "test"):
        en = (EMBEDDED / f"{split}.en").read_text(encoding="utf-8").split("\n")
        de = (EMBEDDED / f"{split}.de").read_text(encoding="utf-8").split("\n")
        assert en[-1] == de[-1] == ""  # each file ends with a newline
        en, de = en[:-1], de[:-1]
        assert len(en) == len(de) >= 400, split
        assert all(s.strip() and "\t" not in s for s in en + de), split
    assert (EMBEDDED / "LICENSE").read_text(encoding="utf-8").startswith("Mozilla Public License")
    assert "MPL-2.0" in (EMBEDDED / "README.md").read_text(encoding="utf-8")
