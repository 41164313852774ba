"""Detokenized sacreBLEU with its signature. Departure from Vaswani et al. (2017): section 6.1
and Table 2 report tokenized BLEU (see attn-only-bleu-compound-split for that score); sacreBLEU on
detokenized text (Post 2018, default 13a tokenization) is the score comparable across papers.

    attn-only-sacrebleu-detok HYPOTHESES REFERENCES [--tokenize 13a]

One detokenized sentence per line in each file, the same number of lines.
"""

import sys
from pathlib import Path

from attn_only_tools.guards.errors import PluginError

from . import command_parser


def read_lines(path: Path):
    """The file's lines, split on '\\n' only (str.splitlines would also split on U+2028, U+0085...)."""
    try:
        with open(path, encoding="utf-8-sig", newline="\n") as f:  # -sig: a leading byte order mark is no text
            return [line.rstrip("\n").rstrip("\r") for line in f]
    except FileNotFoundError:
        raise PluginError(f"{path} not found") from None
    except UnicodeDecodeError as e:
        raise PluginError(
            f"{path} is not UTF-8 text ({e.reason} at byte {e.start}): convert it to UTF-8 first, "
            "e.g. iconv -f latin1 -t utf-8"
        ) from None
    except OSError as e:  # a folder, no permission, ...: one line, not a traceback
        raise PluginError(f"cannot read {path}: {e.strerror or e}: give a readable text file") from None


def check_aligned(hyps, refs):
    if len(hyps) != len(refs):
        raise PluginError(f"{len(hyps)} hypotheses but {len(refs)} references: the files must align")
    if not hyps:
        raise PluginError("no sentences to score (empty files)")


def detok_bleu(hyps, refs, tokenize: str = "13a"):
    """(corpus BLEU, signature) of detokenized hypotheses against one reference each."""
    from sacrebleu.metrics import BLEU

    check_aligned(hyps, refs)
    metric = BLEU(tokenize=tokenize)
    return metric.corpus_score(hyps, [refs]), metric.get_signature()


def main(argv=None) -> int:
    p = command_parser(__doc__)
    p.add_argument("hypotheses", type=Path)
    p.add_argument("references", type=Path)
    from sacrebleu.metrics import BLEU

    p.add_argument("--tokenize", default="13a", choices=list(BLEU.TOKENIZERS), help="sacreBLEU tokenizer (default 13a)")
    a = p.parse_args(argv)
    score, signature = detok_bleu(read_lines(a.hypotheses), read_lines(a.references), a.tokenize)
    print(score.format(signature=str(signature)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
