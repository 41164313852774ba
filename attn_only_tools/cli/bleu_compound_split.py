"""The paper's BLEU: section 6.1 and Table 2 of Vaswani et al. (2017) report tokenized BLEU on
WMT 2014 English-German with hyphenated compounds split, as tensor2tensor's get_ende_bleu.sh
(and fairseq's compound_split_bleu.sh) do: "a-b" becomes "a ##AT##-##AT## b" in hypotheses and
references, then corpus BLEU on the tokens as they are.

    attn-only-bleu-compound-split HYPOTHESES REFERENCES [--tokenize 13a]

Both files must be tokenized the same way (the paper: Moses' tokenizer.perl): already tokenized
(the default, --tokenize none), or tokenized here by sacreBLEU's 13a tokenizer (mteval's rules,
nearly Moses' for German; no Perl tool needed). The score is sacreBLEU's with tokenize='none',
force=True on the tokens as they are. Departure: the score comes from
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


def tokenize_13a(lines):
    """sacreBLEU's 13a tokenization of each line (what its default BLEU applies inside)."""
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    tokenizer = Tokenizer13a()
    return [tokenizer(line) for line in lines]


def compound_split_bleu(hyps, refs):
    """Corpus BLEU of tokenized hypotheses against one tokenized reference each, compounds split."""
    import sacrebleu

    check_aligned(hyps, refs)
    return sacrebleu.corpus_bleu(
        [split_compounds(h) for h in hyps], [[split_compounds(r) for r in refs]], tokenize="none", force=True
    )


def main(argv=None) -> int:
    p = command_parser(__doc__)
    p.add_argument("hypotheses", type=Path, help="hypotheses, one sentence per line")
    p.add_argument("references", type=Path, help="references, the same number of lines")
    p.add_argument(
        "--tokenize",
        choices=["none", "13a"],
        default="none",
        help="none: the files are tokenized already (default); 13a: tokenize both with sacreBLEU's 13a first",
    )
    a = p.parse_args(argv)
    hyps, refs = read_lines(a.hypotheses), read_lines(a.references)
    if a.tokenize == "13a":
        hyps, refs = tokenize_13a(hyps), tokenize_13a(refs)
    print(compound_split_bleu(hyps, refs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
