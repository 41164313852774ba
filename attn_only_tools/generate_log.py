"""fairseq-generate's output, read in one place: its S-, T-, H-, D- and P- lines per sentence id.

fairseq-generate prints, for sentence i (ids of the data set, in the order batches finish):

    S-i <TAB> source (pieces)                    T-i <TAB> reference (pieces removed with --remove-bpe)
    H-i <TAB> score <TAB> hypothesis (tokens)    D-i <TAB> score <TAB> detokenized hypothesis
    P-i <TAB> positional scores (one per target token, log base 2)

with --nbest N the H-, D- and P- lines of a sentence N times, best first. Every other line (fairseq's
log, the score line, our CTranslate2 translator's --fairseq-format output's absent T- lines) is
skipped. Used by attn-only-parse-eval, benchmarks/compare_search.py, benchmarks/_quality_runs.py
and benchmarks/reversal_search.sh; tests read the CLIs' output with it too.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple, Union

from .guards.errors import PluginError

TAGS = ("S-", "T-", "H-", "D-", "P-")


@dataclass
class Sentence:
    """One sentence's lines; hypotheses and detokenized hold (score, text), best first."""

    source: Optional[str] = None
    target: Optional[str] = None
    hypotheses: List[Tuple[Optional[float], str]] = field(default_factory=list)
    detokenized: List[Tuple[Optional[float], str]] = field(default_factory=list)
    positional: List[List[float]] = field(default_factory=list)

    @property
    def hypothesis(self) -> Optional[str]:
        """The best hypothesis's tokens as printed (H-), or None when there is no H- line."""
        return self.hypotheses[0][1] if self.hypotheses else None

    @property
    def score(self) -> Optional[float]:
        """The best hypothesis's score (H-: log base 2, divided by the length penalty)."""
        return self.hypotheses[0][0] if self.hypotheses else None


def _scored(fields: List[str], line: str, where: str) -> Tuple[Optional[float], str]:
    score, text = (fields[1:] + ["", ""])[:2]
    if not score:
        return None, text
    try:
        return float(score), text
    except ValueError:
        raise PluginError(
            f"{where}: {line[:60]!r} is not an {line[:2]}<id> <score> <text> line: give fairseq-generate's output"
        ) from None


def parse(lines: Iterable[str], where: str = "the log") -> Dict[int, Sentence]:
    """{sentence id: Sentence} from fairseq-generate's output lines (other lines skipped)."""
    out: Dict[int, Sentence] = {}
    for line in lines:
        line = line.rstrip("\n")
        if line[:2] not in TAGS:
            continue
        fields = line.split("\t")
        if not fields[0][2:].isdigit():
            continue
        sentence = out.setdefault(int(fields[0][2:]), Sentence())
        tag = line[0]
        if tag in "ST":
            setattr(sentence, "source" if tag == "S" else "target", (fields + [""])[1])
        elif tag in "HD":
            (sentence.hypotheses if tag == "H" else sentence.detokenized).append(_scored(fields, line, where))
        else:
            try:
                sentence.positional.append([float(p) for p in (fields + [""])[1].split()])
            except ValueError:
                raise PluginError(f"{where}: {line[:60]!r} is not a P-<id> <scores> line") from None
    return out


def read(path: Union[str, Path]) -> Dict[int, Sentence]:
    """parse() of the file at path; a missing or unreadable file is a one-line PluginError."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PluginError(
            f"cannot read {path}: {getattr(e, 'strerror', None) or e}: give the file fairseq-generate's output was "
            "written to"
        ) from None
    return parse(text.splitlines(), str(path))
