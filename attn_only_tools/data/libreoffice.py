"""A real EN-DE / EN-FR parallel corpus from Debian's LibreOffice help packages (MPL-2.0).

Debian's libreoffice-help-<lang> packages ship the help as HTML, one tree per language under
usr/share/libreoffice/help/<dir> (en-US, de, fr), with the same file paths in every language and
the same id on each paragraph and heading (`<p id="par_id3147762">`, `<h2 id="hd_id3150620">`).
A sentence pair is the text of the same id in the same file in two languages. Not the paper's
WMT14 data: a small, freely licensed stand-in that a laptop can train on.

Pipeline: extract_paragraphs -> align (with keep_pair's cleaning) -> build_splits (split by help
file, de-duplication) -> write_corpus (atomic); make_subset picks the committed compact subset.
"""

import hashlib
import html
import os
import re
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

LANG_DIRS = {"en": "en-US", "de": "de", "fr": "fr"}  # language code -> help folder name
SPLITS = ("train", "valid", "test")
_TEXT_TAGS = {"p", "h1", "h2", "h3", "h4", "h5", "h6"}
_VOID = {"br", "img", "input", "meta", "link", "hr", "wbr", "col", "area", "source", "base"}
_BREAKS = {"br", "p", "div", "li", "td", "th", "tr", "table", "pre", "ul", "ol"}  # become a space
_SPACE = re.compile(r"\s+")
_LETTER = re.compile(r"[^\W\d_]")

Pair = Tuple[str, str]


class _ParagraphParser(HTMLParser):
    """Collects the text of every <p>/<h1>..<h6> that has an id.

    LibreOffice marks per-system and per-application variants as `<span hidden="true" id="MAC...">`
    next to `<span hidden="true" id="default...">` and lets JavaScript show one; here the `default`
    variant is kept and every other hidden element is dropped. An id that occurs again in the same
    page (pages that collect several topics repeat ids) gets the key `id#2`, `id#3`, ...
    """

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paragraphs: Dict[str, str] = {}
        self._seen: Dict[str, int] = {}
        self._key: Optional[str] = None
        self._parts: List[str] = []
        self._depth = 0  # open elements inside the current paragraph
        self._hidden_at = 0  # depth of the outermost dropped element, 0 when none

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if self._key is None:
            if tag in _TEXT_TAGS and attrs.get("id"):
                n = self._seen[attrs["id"]] = self._seen.get(attrs["id"], 0) + 1
                self._key = attrs["id"] if n == 1 else f"{attrs['id']}#{n}"
                self._parts, self._depth, self._hidden_at = [], 0, 0
            return
        if tag in _BREAKS and not self._hidden_at:
            self._parts.append(" ")
        if tag in _VOID:
            return
        self._depth += 1
        hidden = "hidden" in attrs and not (attrs.get("id") or "").startswith("default")
        if hidden and not self._hidden_at:
            self._hidden_at = self._depth

    def handle_startendtag(self, tag, attrs):
        if self._key is not None and tag in _BREAKS and not self._hidden_at:
            self._parts.append(" ")

    def handle_endtag(self, tag):
        if self._key is None or tag in _VOID:
            return
        if self._depth == 0:
            text = clean_text("".join(self._parts))
            if _LETTER.search(text):
                self.paragraphs[self._key] = text
            self._key = None
            return
        if self._hidden_at == self._depth:
            self._hidden_at = 0
        self._depth -= 1

    def handle_data(self, data):
        if self._key is not None and not self._hidden_at:
            self._parts.append(data)


def clean_text(text: str) -> str:
    """Unescape left-over entities, drop soft hyphens and collapse all whitespace (tabs,
    newlines, no-break spaces) to single spaces, so a sentence is always one line."""
    return _SPACE.sub(" ", html.unescape(text).replace("\u00ad", "")).strip()


def extract_paragraphs(html_text: str) -> Dict[str, str]:
    """{id: text} for the paragraphs and headings of one help page, markup stripped.
    Texts without any letter (empty, "1.", "=") are skipped."""
    parser = _ParagraphParser()
    parser.feed(html_text)
    parser.close()
    return parser.paragraphs


def find_help_root(unpacked: Path, lang: str) -> Path:
    """The help folder of an unpacked libreoffice-help package, e.g.
    <unpacked>/usr/share/libreoffice/help/de; FileNotFoundError when there is none."""
    name = LANG_DIRS.get(lang, lang)
    usual = unpacked / "usr" / "share" / "libreoffice" / "help" / name
    if usual.is_dir():
        return usual
    found = sorted(p for p in unpacked.glob(f"**/libreoffice/help/{name}") if p.is_dir())
    if not found:
        raise FileNotFoundError(f"no libreoffice/help/{name} folder under {unpacked}")
    return found[0]


def keep_pair(src: str, tgt: str, max_words: int = 200) -> bool:
    """Cleaning rule: both sides non-empty with a letter, not identical, at most max_words."""
    return (
        src != tgt
        and bool(_LETTER.search(src))
        and bool(_LETTER.search(tgt))
        and len(src.split()) <= max_words
        and len(tgt.split()) <= max_words
    )


def align(src_root: Path, tgt_root: Path, max_words: int = 200) -> Iterator[Tuple[str, str, str, str]]:
    """(relative path, paragraph id, source, target) for every id present in the same help file
    (same path relative to the two roots) on both sides and passing keep_pair; files in path order."""
    src_root, tgt_root = Path(src_root), Path(tgt_root)
    for src_file in sorted(src_root.rglob("*.html")):
        rel = src_file.relative_to(src_root).as_posix()
        tgt_file = tgt_root / rel
        if not tgt_file.is_file():
            continue
        src_par = extract_paragraphs(src_file.read_text(encoding="utf-8", errors="replace"))
        tgt_par = extract_paragraphs(tgt_file.read_text(encoding="utf-8", errors="replace"))
        for pid, src in src_par.items():
            tgt = tgt_par.get(pid)
            if tgt is not None and keep_pair(src, tgt, max_words):
                yield rel, pid, src, tgt


def _path_hash(relative_path: str) -> int:
    return int(hashlib.sha1(relative_path.encode("utf-8")).hexdigest(), 16)


def split_of(relative_path: str) -> str:
    """Split of a help file: sha1(relative path) mod 100 -> 0-1 valid, 2-3 test, else train
    (2% / 2% / 96% of the files), so a file never straddles two splits."""
    bucket = _path_hash(relative_path) % 100
    return "valid" if bucket < 2 else "test" if bucket < 4 else "train"


def build_splits(aligned: Iterable[Tuple[str, str, str, str]]) -> Dict[str, List[Pair]]:
    """{split: [(src, tgt), ...]} from align's output.

    Files are put in a fixed pseudo-random order (by sha1 of the path; paragraphs keep page order),
    so a prefix of a split samples the whole help rather than its first folders. Identical
    (src, tgt) pairs are kept once; test, then valid claim a duplicate first, and train also loses
    the pairs whose source sentence occurs in valid or test (no held-out source seen in training).
    """
    by_split: Dict[str, List[Tuple[int, int, Pair]]] = {s: [] for s in SPLITS}
    for i, (rel, _pid, src, tgt) in enumerate(aligned):
        by_split[split_of(rel)].append((_path_hash(rel), i, (src, tgt)))
    seen, held_out_src, result = set(), set(), {}
    for split in ("test", "valid", "train"):
        kept = []
        for _h, _i, pair in sorted(by_split[split]):
            if pair in seen or (split == "train" and pair[0] in held_out_src):
                continue
            seen.add(pair)
            kept.append(pair)
            if split != "train":
                held_out_src.add(pair[0])
        result[split] = kept
    return {s: result[s] for s in SPLITS}


def write_corpus(splits: Dict[str, List[Pair]], out: Path, src: str, tgt: str) -> Dict[str, int]:
    """Writes out/{split}.{src} and out/{split}.{tgt} (UTF-8, one sentence a line) and returns
    {split: pairs}. All files go to temporary names in `out` first and are renamed only when
    every one is complete, so a failure leaves no half-written corpus (only the old files)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    pending: List[Tuple[str, Path]] = []
    try:
        for split, pairs in splits.items():
            for side, lang in ((0, src), (1, tgt)):
                lines = [pair[side] for pair in pairs]
                if any("\n" in line or "\r" in line or not line.strip() for line in lines):
                    raise ValueError(f"{split}.{lang}: empty line or line break inside a sentence")
                fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{split}.{lang}.", suffix=".tmp")
                pending.append((tmp, out / f"{split}.{lang}"))
                with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
                    f.writelines(line + "\n" for line in lines)
                os.chmod(tmp, 0o644)  # mkstemp creates 0600; these are shared data files
        for tmp, final in pending:
            os.replace(tmp, final)
    finally:
        for tmp, _final in pending:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return {split: len(pairs) for split, pairs in splits.items()}


def make_subset(
    splits: Dict[str, List[Pair]], n_train: int, n_valid: int, n_test: int, max_words: int = 40
) -> Dict[str, List[Pair]]:
    """Deterministic compact subset: in each split, the first n pairs (in build_splits' order)
    whose two sides have at most max_words words each."""
    wanted = {"train": n_train, "valid": n_valid, "test": n_test}
    return {
        split: [p for p in splits[split] if max(len(p[0].split()), len(p[1].split())) <= max_words][: wanted[split]]
        for split in SPLITS
    }
