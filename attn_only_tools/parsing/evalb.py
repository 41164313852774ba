"""Section 6.3 of Vaswani et al. (2017) scores parses with EVALB (Sekine & Collins, 1997).

A Python re-implementation of ``evalb.c`` with ``COLLINS.prm`` as default
parameters that reproduces its numbers and its printed report: labelled
bracket recall / precision / F-measure, complete match, crossing brackets and
tagging accuracy, per sentence and in total (all, and length <= CUTOFF_LEN).

The rules kept from evalb.c: words under a DELETE_LABEL tag are removed at
reading time, which shifts later word indices; brackets left spanning zero
words are ignored; phrase labels are cut at the first ``-`` or ``=``; a
bracket whose cut label equals a DELETE_LABEL (through EQ_LABEL too) is
ignored; an unlabelled top bracket ``( (S ...) )`` is an ordinary bracket with
the empty label; each gold bracket takes the first unmatched test bracket with
the same span and an equivalent label; a test sentence without words is
skipped; different word counts (after QUOTE_LABEL repair) or words make an
error sentence, which like skipped ones stays out of the totals; after
MAX_ERROR + 1 errors the run stops.

Departures, stated outright: no limits on line, word, label and bracket
counts (evalb.c silently overflows at 5000 chars / 200 words or brackets);
text that makes evalb.c loop or read out of bounds (a stray ``)``, a word
outside a bracket, ``(NP a b)``) raises ``PluginError`` at once; DEBUG output
is not produced. Reading the parameters and the trees is ``evalb_input.py``.
"""

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Sequence

from .evalb_input import COLLINS, Bracket, Params, PluginError, Sentence, fix_quotes, read_params, read_sentence

__all__ = [  # the scorer's API; COLLINS, PluginError, Params and read_params come from evalb_input
    "COLLINS",
    "PluginError",
    "EvalbResult",
    "Params",
    "SentenceResult",
    "Totals",
    "evaluate_lines",
    "evaluate_trees",
    "format_report",
    "format_sentence",
    "read_lines",
    "read_params",
    "score_sentence",
    "summary",
]
RULE = "=" * 76


def _massage(brackets: List[Bracket], params: Params) -> int:
    """Mark ignored brackets (result 5), cut labels; return the number kept."""
    for bracket in brackets:
        bracket.result = 0
        if bracket.start == bracket.end:
            bracket.result = 5
            continue
        for index, char in enumerate(bracket.label):
            if char in "-=":
                bracket.label = bracket.label[:index]
                break
        if any(params.label_eq(bracket.label, d) for d in params.delete_labels):
            bracket.result = 5
    return sum(bracket.result != 5 for bracket in brackets)


@dataclass
class SentenceResult:
    """One row of EVALB's table; ``status`` 0 valid, 1 error, 2 skipped."""

    line: int
    length: int
    status: int = 0
    matched: int = 0
    gold: int = 0
    test: int = 0
    crossing: int = 0
    words: int = 0
    correct_tags: int = 0
    errors: List[str] = field(default_factory=list)

    @property
    def recall(self) -> float:
        return 100.0 * self.matched / self.gold if self.gold else 0.0

    @property
    def precision(self) -> float:
        return 100.0 * self.matched / self.test if self.test else 0.0


def score_sentence(gold_line: str, test_line: str, line: int = 1, params: Params = COLLINS) -> SentenceResult:
    """evalb.c's read_line (both sides) and calc_result for one sentence pair."""
    errors: List[str] = []
    gold, test = read_sentence(gold_line, params, errors), read_sentence(test_line, params, errors)
    result = SentenceResult(line, gold.length, errors=errors)
    if not test.terminals:
        result.status = 2
        return result
    if len(gold.terminals) != len(test.terminals):
        fix_quotes(gold, test, params.delete_labels)
    mismatch = _word_mismatch(gold, test, params)
    if mismatch:
        errors.append(mismatch)
    result.status = 1 if errors else 0
    if not mismatch:
        _compare(gold, test, params, result)
    return result


def _word_mismatch(gold: Sentence, test: Sentence, params: Params) -> str:
    if len(gold.terminals) != len(test.terminals):
        return f"Length unmatch ({len(gold.terminals)}|{len(test.terminals)})"
    for (a, _), (b, _) in zip(gold.terminals, test.terminals, strict=True):
        if not params.word_eq(a, b):
            return f"Words unmatch ({a}|{b})"
    return ""


def _compare(gold: Sentence, test: Sentence, params: Params, result: SentenceResult):
    result.gold = _massage(gold.brackets, params)
    result.test = _massage(test.brackets, params)
    for g in gold.brackets:
        if g.result == 5:
            continue
        for t in test.brackets:
            if (
                t.result == 0
                and (g.start, g.end) == (t.start, t.end)
                and (not params.labeled or params.label_eq(g.label, t.label))
            ):
                g.result = t.result = 1
                result.matched += 1
                break
    kept = [g for g in gold.brackets if g.result != 5]
    result.crossing = sum(any(_crosses(g, t) for g in kept) for t in test.brackets if t.result != 5)
    result.words = len(gold.terminals)
    result.correct_tags = sum(
        params.label_eq(a, b) for (_, a), (_, b) in zip(gold.terminals, test.terminals, strict=True)
    )


def _crosses(g: Bracket, t: Bracket) -> bool:
    return (g.start < t.start < g.end < t.end) or (t.start < g.start < t.end < g.end)


@dataclass
class Totals:
    """evalb.c's TOTAL_* (or TOT40_*) counters; error and skipped sentences add nothing."""

    sentences: int = 0
    errors: int = 0
    skipped: int = 0
    gold: int = 0
    test: int = 0
    matched: int = 0
    complete: int = 0
    words: int = 0
    crossing: int = 0
    no_crossing: int = 0
    two_or_less: int = 0
    correct_tags: int = 0

    def add(self, r: SentenceResult) -> None:
        self.sentences += 1
        if r.status:
            self.errors += r.status == 1
            self.skipped += r.status == 2
            return
        self.gold, self.test = self.gold + r.gold, self.test + r.test
        self.matched += r.matched
        self.complete += r.gold == r.test == r.matched
        self.words, self.crossing = self.words + r.words, self.crossing + r.crossing
        self.no_crossing += r.crossing == 0
        self.two_or_less += r.crossing <= 2
        self.correct_tags += r.correct_tags

    @property
    def valid(self) -> int:
        return self.sentences - self.errors - self.skipped

    @property
    def recall(self) -> float:
        return 100.0 * self.matched / self.gold if self.gold > 0 else 0.0

    @property
    def precision(self) -> float:
        return 100.0 * self.matched / self.test if self.test > 0 else 0.0

    @property
    def fmeasure(self) -> float:
        """2PR/(P+R) in percent; NaN when both are zero, as in evalb.c."""
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else math.nan

    def per_valid(self, count: int, scale: float = 100.0) -> float:
        return scale * count / self.valid if self.valid > 0 else 0.0

    @property
    def tagging_accuracy(self) -> float:
        return 100.0 * self.correct_tags / self.words if self.words > 0 else 0.0


def summary(split: str, n: int, t: "Totals") -> str:
    """The one-line F1 summary attn-only-parse-eval and attn-only-pcfg-baseline print for SPLIT's n sentences."""
    return (
        f"EVALB (COLLINS.prm) on {split}, {n} sentences ({t.valid} valid): F1 {t.fmeasure:.2f} "
        f"(recall {t.recall:.2f}, precision {t.precision:.2f}, complete match {t.per_valid(t.complete):.2f})"
    )


@dataclass
class EvalbResult:
    sentences: List[SentenceResult]
    params: Params
    all: Totals
    cut: Totals


def evaluate_lines(gold_lines: Sequence[str], test_lines: Sequence[str], params: Params = COLLINS) -> EvalbResult:
    """Score line i of the test file against line i of the gold file, as evalb.c does."""
    if len(gold_lines) != len(test_lines):
        raise PluginError(f"number of lines unmatch: {len(gold_lines)} gold, {len(test_lines)} test")
    result = EvalbResult([], params, Totals(), Totals())
    error_count = 0
    for number, (gold, test) in enumerate(zip(gold_lines, test_lines, strict=True), 1):
        row = score_sentence(gold, test, number, params)
        for message in row.errors:
            if error_count > params.max_error:
                raise PluginError(
                    f"line {number}: {message} (over MAX_ERROR={params.max_error} errors; evalb stops here)"
                )
            error_count += 1
        result.sentences.append(row)
        result.all.add(row)
        if row.length <= params.cutoff_len:
            result.cut.add(row)
    return result


def unscored(result: EvalbResult, split: str, data) -> str:
    """'' when every sentence counts in the totals; else one message for the first that does not (an
    error or skipped sentence, which evalb.c leaves out of F1 while the sentence count says all), for
    a scorer that refuses rather than report F1 over fewer sentences than it names."""
    for row in result.sentences:
        if row.status != 0:
            why = "; ".join(row.errors) or "the parse has no words"
            return (
                f"EVALB cannot score sentence {row.line} of {split} ({why}), so F1 would leave it out: line "
                f"{row.line} of {data}/{split}.words, .tags and .gold disagree; rerun attn-only-prepare-ptb"
            )
    return ""


def evaluate_trees(gold_trees, test_trees, params: Params = COLLINS) -> EvalbResult:
    """``evaluate_lines`` on ``ptb.Tree`` objects (``str`` gives one bracketed line)."""
    return evaluate_lines([str(t) for t in gold_trees], [str(t) for t in test_trees], params)


def read_lines(path) -> List[str]:
    """Lines of a file split on ``\\n`` only, like fgets (a final newline ends the last)."""
    text = Path(path).read_bytes().decode("utf-8", errors="surrogateescape")
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def _f(value: float) -> str:
    return "  -nan" if math.isnan(value) else f"{value:6.2f}"


def format_sentence(r: SentenceResult) -> str:
    """One row of evalb.c's table."""
    tags = 100.0 * r.correct_tags / r.words if r.words else 0.0
    return (
        f"{r.line:4d}  {r.length:3d}    {r.status}  {_f(r.recall)} {_f(r.precision)}   "
        f"{r.matched:3d}    {r.gold:3d}  {r.test:3d}    {r.crossing:3d}   "
        f"{r.words:4d}  {r.correct_tags:4d}   {_f(tags)}"
    )


def _summary(t: Totals, title: str) -> List[str]:
    rows = [
        ("Number of sentence", f"{t.sentences:6d}"),
        ("Number of Error sentence", f"{t.errors:6d}"),
        ("Number of Skip  sentence", f"{t.skipped:6d}"),
        ("Number of Valid sentence", f"{t.valid:6d}"),
        ("Bracketing Recall", _f(t.recall)),
        ("Bracketing Precision", _f(t.precision)),
        ("Bracketing FMeasure", _f(t.fmeasure)),
        ("Complete match", _f(t.per_valid(t.complete))),
        ("Average crossing", _f(t.per_valid(t.crossing, 1.0))),
        ("No crossing", _f(t.per_valid(t.no_crossing))),
        ("2 or less crossing", _f(t.per_valid(t.two_or_less))),
        ("Tagging accuracy", _f(t.tagging_accuracy)),
    ]
    return ["", title] + [f"{name:<26}= {value}" for name, value in rows]


def format_report(result: EvalbResult) -> str:
    """evalb.c's standard output, byte for byte (header, rows, totals, summary)."""
    lines = (
        [
            "  Sent.                        Matched  Bracket   Cross        Correct Tag",
            " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy",
            RULE,
        ]
        + [format_sentence(r) for r in result.sentences]
        + [RULE]
    )
    t = result.all
    total = ""
    if t.gold > 0 and t.test > 0:
        total = (
            f"                {_f(t.recall)} {_f(t.precision)} {t.matched:6d} {t.gold:5d} {t.test:5d}  {t.crossing:5d}"
        )
    lines.append(total + f"  {t.words:5d} {t.correct_tags:5d}   {_f(t.tagging_accuracy)}")
    lines.append("=== Summary ===")
    lines += _summary(t, "-- All --")
    lines += _summary(result.cut, f"-- len<={result.params.cutoff_len} --")
    return "\n".join(lines) + "\n"
