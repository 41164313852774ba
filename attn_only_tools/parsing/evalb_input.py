"""EVALB's input side (Section 6.3 of Vaswani et al. 2017 scores parses with EVALB): the
parameter file (``COLLINS.prm`` by default) and evalb.c's reading of one bracketed line.

``read_sentence`` follows evalb.c's read_line: words under a DELETE_LABEL tag are removed at reading
time, and QUOTE_LABEL terminals are remembered so that ``fix_quotes`` can put back a quote
deleted on one side only (evalb.c's fix_quote). The departures from evalb.c's reading (no length
limits; ``PluginError`` where evalb.c would loop or read out of bounds) are listed in ``evalb.py``,
which scores what this module reads.
"""

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Sequence, Tuple

from ..guards.errors import PluginError

WHITESPACE = " \t\n\v\f\r"
TERMINATORS = WHITESPACE + "()"


@dataclass
class Params:
    """EVALB parameters; the defaults are COLLINS.prm."""

    delete_labels: Tuple[str, ...] = ("TOP", "-NONE-", ",", ":", "``", "''", ".")
    delete_labels_for_length: Tuple[str, ...] = ("-NONE-",)
    quote_labels: Tuple[str, ...] = ()
    eq_labels: Tuple[Tuple[str, str], ...] = (("ADVP", "PRT"),)
    eq_words: Tuple[Tuple[str, str], ...] = ()
    labeled: bool = True
    max_error: int = 10
    cutoff_len: int = 40

    def label_eq(self, a: str, b: str) -> bool:
        return a == b or (a, b) in self.eq_labels or (b, a) in self.eq_labels

    def word_eq(self, a: str, b: str) -> bool:
        return a == b or (a, b) in self.eq_words or (b, a) in self.eq_words


COLLINS = Params()
_LISTS = {
    "DELETE_LABEL": "delete_labels",
    "DELETE_LABEL_FOR_LENGTH": "delete_labels_for_length",
    "QUOTE_LABEL": "quote_labels",
    "EQ_LABEL": "eq_labels",
    "EQ_WORD": "eq_words",
}
_INTS = {"MAX_ERROR": "max_error", "CUTOFF_LEN": "cutoff_len", "LABELED": "labeled"}


def _atoi(text: str) -> int:
    match = re.match(r"\s*([+-]?\d+)", text)
    return int(match.group(1)) if match else 0


def read_params(path) -> Params:
    """Parse a ``.prm`` file as evalb.c does (an empty list stays empty)."""
    values = {name: [] for name in _LISTS.values()}
    ints = {}
    for line in Path(path).read_text(encoding="utf-8", errors="replace").split("\n"):
        line = line[:1] + line[1:].rstrip(WHITESPACE)
        if line.startswith("#") or len(line) < 3:
            continue
        key = "" if line[0] in WHITESPACE else line.split(None, 1)[0]
        value = line[len(key) :].lstrip(WHITESPACE)
        if key in _LISTS and key.startswith("EQ_"):
            if len(value.split()) != 2:
                warnings.warn(f"{key} requires two values", stacklevel=2)
                continue
            values[_LISTS[key]].append(tuple(value.split()))
        elif key in _LISTS:
            values[_LISTS[key]].append(value)
        elif key in _INTS:
            ints[_INTS[key]] = _atoi(value)
        elif key != "DEBUG":
            warnings.warn(f"Unknown keyword ({line}) in parameter file", stacklevel=2)
    ints["labeled"] = bool(ints.get("labeled", 1))
    return Params(**{k: tuple(v) for k, v in values.items()}, **ints)


@dataclass
class Bracket:
    start: int
    label: str
    end: int = -1
    result: int = 0


@dataclass
class Quote:
    word: str
    label: str
    index: int
    bracket: int
    ends: List[int]


@dataclass
class Sentence:
    terminals: List[Tuple[str, str]] = field(default_factory=list)
    brackets: List[Bracket] = field(default_factory=list)
    quotes: List[Quote] = field(default_factory=list)
    length: int = 0


def _scan(line: str, p: int) -> Tuple[int, str]:
    start = p
    while p < len(line) and line[p] not in TERMINATORS:
        p += 1
    return p, line[start:p]


def read_sentence(line: str, params: Params, errors: List[str]) -> Sentence:
    """evalb.c's read_line: terminals, brackets and quote terminals of one line."""
    sent, stack, p = Sentence(), [], 0
    while p < len(line):
        if line[p] in WHITESPACE:
            p += 1
        elif line[p] == "(":
            p, label = _scan(line, p + 1)
            if p == len(line) or line[p] in WHITESPACE:  # fgets keeps the "\n"
                q = p
                while q < len(line) and line[q] in WHITESPACE:
                    q += 1
                q, word = _scan(line, q)
                if q < len(line) and line[q] == ")":
                    _terminal(sent, stack, label, word, params)
                    p = q + 1
                    continue
                if word:
                    raise PluginError(f"more than two elements in bracket ({label} {word} ...")
                if q >= len(line):
                    errors.append("More than two elements in a bracket")
            stack.append(len(sent.brackets))
            sent.brackets.append(Bracket(len(sent.terminals), label))
        elif line[p] == ")":
            if not stack:
                raise PluginError("Bracketing unbalance (too many close bracket)")
            sent.brackets[stack.pop()].end = len(sent.terminals)
            p += 1
        else:
            raise PluginError(f"Reading sentence: text outside brackets at {line[p : p + 20]!r}")
    if stack:
        errors.append("Bracketing is unbalanced (too many open bracket)")
    return sent


def _terminal(sent: Sentence, stack: List[int], label: str, word: str, params: Params):
    if label not in params.delete_labels_for_length:
        sent.length += 1
    if label in params.quote_labels and word in ("'", '"', "/"):
        sent.quotes.append(Quote(word, label, len(sent.terminals), len(sent.brackets), stack[:]))
    if label not in params.delete_labels:
        sent.terminals.append((word, label))


def fix_quotes(gold: Sentence, test: Sentence, deleted: Sequence[str]) -> None:
    """evalb.c's fix_quote: put back a quote terminal deleted on one side only."""
    for i, test_quote in enumerate(test.quotes):
        index = test_quote.index
        for j, gold_quote in enumerate(gold.quotes):
            if gold_quote.index != index or gold_quote.label == test_quote.label:
                continue
            if gold_quote.label in deleted and test_quote.label not in deleted:
                _reinsert(gold_quote, gold, gold.quotes[j:])
            elif test_quote.label in deleted and gold_quote.label not in deleted:
                _reinsert(test_quote, test, test.quotes[i:])


def _reinsert(quote: Quote, sent: Sentence, later: List[Quote]) -> None:
    sent.terminals.insert(quote.index, (quote.word, quote.label))
    for bracket in sent.brackets[quote.bracket :]:
        bracket.start += 1
        bracket.end += 1
    for k in quote.ends:
        sent.brackets[k].end += 1
    for other in later:
        other.index += 1
