"""WSJ parsing data for fairseq, section 6.3 of Vaswani et al. (2017): treebank files -> source
words and linearized target trees (Vinyals et al. 2015), and predictions -> scored trees.

Splits are chosen by WSJ file number (wsj_SSNN.mrg: section SS). The standard split is sections
02-21 train, 22 valid, 23 test; the NLTK sample (wsj_0001-0179) has no sections beyond 00-01, so
its development split is by file number (e.g. 1-159 / 160-169 / 170-179).
"""

import re
from pathlib import Path
from typing import Dict, Iterable, List, Sequence, Tuple

from .evalb import evaluate_lines
from .linearize import linearize, normalize, repair, replace_tags, right_branching_tree
from .ptb import read_trees, tree_to_str

STANDARD = {"train": (200, 2199), "valid": (2200, 2299), "test": (2300, 2399)}
_FILE = re.compile(r"wsj_(\d{4})\.mrg$", re.IGNORECASE)


def parse_ranges(spec: Iterable[str]) -> Dict[str, Tuple[int, int]]:
    """['train=1-159', 'valid=160-169', 'test=170-179'] -> {split: (first, last)} file numbers.
    A split named twice, a range that ends before it starts, and ranges that share files (test
    trees that would also be trained on) are refused."""
    ranges = {}
    for item in spec:
        m = re.fullmatch(r"(train|valid|test)=(\d+)-(\d+)", item)
        if not m:
            raise ValueError(f"bad split {item!r}: write it as train=1-159 (WSJ file numbers, inclusive)")
        split, first, last = m.group(1), int(m.group(2)), int(m.group(3))
        if split in ranges:
            raise ValueError(
                f"the {split} split is given twice ({split}={ranges[split][0]}-{ranges[split][1]} and "
                f"{item}): give each split once"
            )
        if first > last:
            raise ValueError(f"bad split {item!r}: the range ends before it starts; write it as {split}={last}-{first}")
        for other, (a, b) in ranges.items():
            if first <= b and a <= last:
                raise ValueError(
                    f"the {other} and {split} splits overlap ({other}={a}-{b} and {item} share files "
                    f"{max(a, first)}-{min(b, last)}), so the same trees would be in both: give "
                    "ranges that do not share files"
                )
        ranges[split] = (first, last)
    return ranges


def treebank_files(root: Path, first: int, last: int) -> List[Path]:
    found = [(int(m.group(1)), p) for p in root.rglob("*") for m in [_FILE.search(p.name)] if m]
    return [p for n, p in sorted(found) if first <= n <= last]


def linearized_split(files: Sequence[Path], target_words: bool = False):
    """(words, target tokens, gold tree line, gold POS tags) for every tree of `files`; the target's
    word slots are XX (Vinyals et al.) or, with `target_words`, the words (linearize.py)."""
    for path in files:
        for tree in read_trees(path):
            gold = normalize(tree)
            try:
                words, target = linearize(tree, target_words)
            except ValueError as e:
                raise ValueError(f"{path}: {e}") from None
            if words:
                yield words, target, tree_to_str(gold), gold.tags()


def score_predictions(
    predictions: Sequence[Sequence[str]],
    words: Sequence[Sequence[str]],
    gold_lines: Sequence[str],
    tags: Sequence[Sequence[str]],
):
    """Repair each predicted bracket sequence into a tree over its words (every token that is not a
    bracket is a word slot, XX or a word alike, filled with the gold words), put the gold POS tags
    back (EVALB finds punctuation by its tag), and score with EVALB's COLLINS.prm rules.
    Returns (EvalbResult, number of outputs that needed repair, predicted tree lines)."""
    repaired, lines = 0, []
    # strict=False, as before: a tags file of another length is reported by evaluate_lines (gold vs test lines)
    for pred, ws, ts in zip(predictions, words, tags, strict=False):
        tree, fixed = repair(list(pred), list(ws))
        repaired += fixed
        lines.append(tree_to_str(replace_tags(tree, ts)))
    return evaluate_lines(list(gold_lines), lines), repaired, lines


def right_branching_baseline(words: Sequence[Sequence[str]], gold_lines: Sequence[str], tags: Sequence[Sequence[str]]):
    lines = [
        tree_to_str(replace_tags(right_branching_tree(list(ws)), ts)) for ws, ts in zip(words, tags, strict=False)
    ]  # strict=False: as in score_predictions
    return evaluate_lines(list(gold_lines), lines)
