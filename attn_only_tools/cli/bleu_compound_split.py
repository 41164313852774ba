"""The paper's BLEU: section 6.1 and Table 2 of Vaswani et al. (2017) report tokenized BLEU on
WMT 2014 English-German with hyphenated compounds split, as tensor2tensor's get_ende_bleu.sh
(and fairseq's compound_split_bleu.sh) do: "a-b" becomes "a ##AT##-##AT## b" in hypotheses and
references, then corpus BLEU on the tokens as they are.

    attn-only-bleu-compound-split HYPOTHESES REFERENCES

Both files must already be tokenized the same way (the paper: Moses tokenizer); nothing is
tokenized here (sacreBLEU with tokenize='none', force=True). Departure: the score comes from
sacreBLEU (exponential smoothing of zero n-gram counts, as sacreBLEU's default) instead of
multi-bleu.perl; on a corpus with no zero counts the two agree.
"""

import re
import sys
from pathlib import Path

from attn_only_tools.cli.sacrebleu_detok import check_aligned, read_lines

from . import command_parser

_COMPOUND = re.compile(r"(\S)-(\S)")


def split_compounds(line: str) -> str:
    """One left-to-right pass of perl's s{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g, as the reference
    scripts run it: 'Auto-Industrie' -> 'Auto ##AT##-##AT## Industrie'; matches do not overlap,
    so 'a-b-c' -> 'a ##AT##-##AT## b-c' exactly as there."""
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", line)


def compound_split_bleu(hyps, refs):
    """Corpus BLEU of tokenized hypotheses against one tokenized reference each, compounds split."""
    import sacrebleu

    check_aligned(hyps, refs)
    return sacrebleu.corpus_bleu(
        [split_compounds(h) for h in hyps], [[split_compounds(r) for r in refs]], tokenize="none", force=True
    )


def main(argv=None) -> int:
    p = command_parser(__doc__)
    p.add_argument("hypotheses", type=Path, help="tokenized hypotheses, one sentence per line")
    p.add_argument("references", type=Path, help="tokenized references, the same number of lines")
    a = p.parse_args(argv)
    print(compound_split_bleu(read_lines(a.hypotheses), read_lines(a.references)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
