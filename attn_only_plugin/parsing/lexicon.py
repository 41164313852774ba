"""The treebank PCFG's lexicon (the classical baseline of Section 6.3 / Table 4 of Vaswani et al.
(2017)): P(word | tag) by relative frequency, and rare-word classes for words never seen in
training, in the manner of Klein & Manning (2003) and Petrov et al. (2006): a word seen once is
evidence of how unseen words of its shape and suffix are tagged.

* a word seen in training: P(w | t) = c(t, w) / c(t);
* an unseen word: P(sig | t) = c_1(t, sig) / c(t), where c_1 counts the training tokens of words
  seen exactly once whose signature is sig (Good-Turing's view that the words seen once stand
  for the unseen ones). The signature backs off from shape + suffix to shape alone to ``UNK``
  when the finer class never occurred among the words seen once.

Departure, stated outright: the unseen-word mass is not taken out of the seen words', so P(. | t)
sums to more than 1 over seen and unseen words; for parsing a given sentence only the ratios
across tags of each word's factor matter, and those are the estimates above.
"""
from collections import Counter, defaultdict
from typing import Dict, List, Sequence, Tuple

import numpy as np

# Common English suffixes, longest first; "s" only where it is not "ss", "us" or "is".
SUFFIXES = ("ment", "ness", "able", "ible", "ing", "ion", "ity", "ive", "ous", "ful", "ist", "est",
            "ed", "ly", "er", "al", "ic", "en", "s", "y")


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

    def __init__(self, sentences: Sequence[Tuple[Sequence[str], Sequence[str]]]):
        """sentences: (words, tags) of the training trees."""
        counts = Counter((t, w) for words, tags in sentences for w, t in zip(words, tags))
        word_total = Counter()
        for (_, w), n in counts.items():
            word_total[w] += n
        self.tags = sorted({t for t, _ in counts})
        column = {t: i for i, t in enumerate(self.tags)}
        tag_total = np.zeros(len(self.tags))
        for (t, _), n in counts.items():
            tag_total[column[t]] += n
        self.words: Dict[str, Tuple[np.ndarray, np.ndarray]] = self._table(
            ((w, column[t]), n) for (t, w), n in counts.items())
        rare = Counter()
        for words, tags in sentences:
            for i, (w, t) in enumerate(zip(words, tags)):
                if word_total[w] == 1:
                    rare.update((c, column[t]) for c in backoff(w, i == 0))
        self.classes = self._table(rare.items())
        for table in (self.words, self.classes):
            for key, (cols, n) in table.items():
                table[key] = (cols, np.log(n / tag_total[cols]))

    @staticmethod
    def _table(items) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
        rows = defaultdict(list)
        for (key, col), n in items:
            rows[key].append((col, n))
        return {k: (np.array([c for c, _ in v]), np.array([n for _, n in v], dtype=np.float64))
                for k, v in rows.items()}

    def scores(self, words: Sequence[str]) -> np.ndarray:
        """(n, tags) log P(word | tag), -inf where a tag never emits the word (or its class)."""
        out = np.full((len(words), len(self.tags)), -np.inf)
        for i, w in enumerate(words):
            entry = self.words.get(w) or next(
                (self.classes[c] for c in backoff(w, i == 0) if c in self.classes), None)
            if entry is not None:
                out[i, entry[0]] = entry[1]
        return out

    def gold(self, tags: Sequence[str]) -> np.ndarray:
        """(n, tags) log scores that admit only the given tags (0 there); a tag never seen in
        training admits nothing."""
        column = {t: i for i, t in enumerate(self.tags)}
        out = np.full((len(tags), len(self.tags)), -np.inf)
        for i, t in enumerate(tags):
            if t in column:
                out[i, column[t]] = 0.0
        return out
