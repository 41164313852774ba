"""The treebank PCFG's lexicon (the classical baseline of Section 6.3 / Table 4 of Vaswani et al.
(2017)): P(word | tag) by relative frequency, and rare-word classes for words never seen in
training, in the manner of Klein & Manning (2003) and Petrov et al. (2006): a word seen once is
evidence of how unseen words of its shape and suffix are tagged.

* a word seen in training more than ``rare`` times (default 3): P(w | t) = c(t, w) / c(t);
* an unseen word: P(sig | t) = c_1(t, sig) / c(t), where c_1 counts the training tokens of words
  seen exactly once whose signature is sig (Good-Turing's view that the words seen once stand
  for the unseen ones). The signature backs off from shape + suffix to shape alone to ``UNK``
  when the finer class never occurred among the words seen once;
* a word seen 1 to ``rare`` times: its tag distribution is smoothed with its class's,
  P(t | w) = (c(t, w) + P(t | sig)) / (c(w) + 1) with P(t | sig) = c_1(t, sig) / c_1(sig), and
  P(w | t) = P(t | w) c(w) / c(t) by Bayes' rule (Petrov et al. 2006 smooth rare words alike;
  rare = 3 was chosen on the valid split, docs/parsing.md).

Departure, stated outright: the unseen-word mass is not taken out of the seen words', so P(. | t)
sums to more than 1 over seen and unseen words; for parsing a given sentence only the ratios
across tags of each word's factor matter, and those are the estimates above.
"""

from collections import defaultdict
from typing import Dict, List, Sequence, Tuple

import numpy as np

# Common English suffixes, longest first; "s" only where it is not "ss", "us" or "is".
SUFFIXES = (
    "ment",
    "ness",
    "able",
    "ible",
    "ing",
    "ion",
    "ity",
    "ive",
    "ous",
    "ful",
    "ist",
    "est",
    "ed",
    "ly",
    "er",
    "al",
    "ic",
    "en",
    "s",
    "y",
)


def signature(word: str, initial: bool = False) -> str:
    """Word-shape + suffix class, e.g. ``UNK-CAP-er`` (Comptroller), ``UNK-INITC-ly`` (a capitalized
    sentence-initial word), ``UNK-ALLCAPS`` (IBM), ``UNK-NUM`` (3.14), ``UNK-LC-DASH`` (ex-dividend),
    ``UNK-PUNCT`` (--)."""
    parts = ["UNK", _shape(word, initial)]
    if any(c.isdigit() for c in word):
        parts.append("NUM")
    if "-" in word and any(c.isalpha() for c in word):
        parts.append("DASH")
    suffix = _suffix(word)
    if suffix:
        parts.append(suffix)
    return "-".join(p for p in parts if p)


def _shape(word: str, initial: bool) -> str:
    letters = [c for c in word if c.isalpha()]
    if not letters:
        return "" if any(c.isdigit() for c in word) else "PUNCT"
    if len(letters) > 1 and all(c.isupper() for c in letters):
        return "ALLCAPS"
    if word[0].isupper():
        return "INITC" if initial else "CAP"
    return "MIXC" if any(c.isupper() for c in letters) else "LC"


def _suffix(word: str) -> str:
    lower = word.lower()
    if len(lower) < 4 or not lower[-1].isalpha() or any(c.isdigit() for c in lower):
        return ""
    for suffix in SUFFIXES:
        if lower.endswith(suffix) and not (suffix == "s" and lower[-2:] in ("ss", "us", "is")):
            return suffix
    return ""


def backoff(word: str, initial: bool = False) -> List[str]:
    """The classes tried for an unseen word, finest first: shape + suffix, shape, ``UNK``."""
    full = signature(word, initial)
    shape = "-".join(full.split("-")[:2])
    return list(dict.fromkeys([full, shape, "UNK"]))


class Lexicon:
    """Emission log probabilities of words (and unseen words' signatures) given tags."""

    def __init__(self, sentences: Sequence[Tuple[Sequence[str], Sequence[str]]], rare: int = 3):
        """sentences: (words, tags) of the training trees. Words seen at most `rare` times get their
        P(t | w) smoothed with their signature's (default 2: chosen on the valid split)."""
        self.rare = rare
        self.tags = sorted({t for _, tags in sentences for t in tags})
        column = {t: i for i, t in enumerate(self.tags)}
        self._count: Dict[str, np.ndarray] = defaultdict(lambda: np.zeros(len(self.tags)))
        for words, tags in sentences:
            for w, t in zip(words, tags, strict=False):
                self._count[w][column[t]] += 1
        self._count = dict(self._count)
        self._tag_total = sum(self._count.values())
        self._class: Dict[str, np.ndarray] = defaultdict(lambda: np.zeros(len(self.tags)))
        for words, tags in sentences:
            for i, (w, t) in enumerate(zip(words, tags, strict=False)):
                if self._count[w].sum() == 1:
                    for c in backoff(w, i == 0):
                        self._class[c][column[t]] += 1
        self._class = dict(self._class)

    def emission(self, word: str, initial: bool = False) -> np.ndarray:
        """(tags,) log P(word | tag); -inf where the tag never emits the word (or its class)."""
        counts = self._count.get(word)
        known = counts is not None and counts.sum() > self.rare
        cls = None if known else next((self._class[c] for c in backoff(word, initial) if c in self._class), None)
        with np.errstate(divide="ignore"):
            if counts is None:  # unseen: c_1(t, sig) / c(t)
                return np.log(cls / self._tag_total) if cls is not None else np.full(len(self.tags), -np.inf)
            if known or cls is None:  # c(t, w) / c(t)
                return np.log(counts / self._tag_total)
            n = counts.sum()  # rare: P(t | w) = (c(t, w) + P(t | sig)) / (c(w) + 1), times c(w) / c(t)
            return np.log((counts + cls / cls.sum()) / (n + 1) * n / self._tag_total)

    def scores(self, words: Sequence[str]) -> np.ndarray:
        """(n, tags) log P(word | tag) of a sentence (its first word is sentence-initial)."""
        rows = [self.emission(w, i == 0) for i, w in enumerate(words)]
        return np.stack(rows) if rows else np.zeros((0, len(self.tags)))

    def gold(self, tags: Sequence[str]) -> np.ndarray:
        """(n, tags) log scores that admit only the given tags (0 there); a tag never seen in
        training admits nothing."""
        column = {t: i for i, t in enumerate(self.tags)}
        out = np.full((len(tags), len(self.tags)), -np.inf)
        for i, t in enumerate(tags):
            if t in column:
                out[i, column[t]] = 0.0
        return out
