"""The best hypothesis of every sentence of a fairseq-generate log, one a line in the data set's
order: what section 6.1's BLEU is computed on (Vaswani et al. 2017), for sacreBLEU or a reader.

    attn-only-hypotheses generate.log --output hyp.de [--detokenized] [--force]

fairseq-generate prints sentences in the order its batches finish; this puts them back in
sentence-id order (fairseq's own docs do it with grep '^H-' | sort -t- -k2 -n | cut -f3). It writes
the H- lines' text (the hypothesis after --remove-bpe), or with --detokenized the D- lines' (after
--tokenizer's detokenization too; the same text when no --tokenizer was given). A log whose
sentence ids are not 0..N-1, or a sentence without a hypothesis, is refused: it is a log of an
interrupted or filtered run (with --skip-invalid-size-inputs-valid-test, say), whose hypotheses
would no longer line up with the references. The output is written whole or not at all.
"""

import sys
from pathlib import Path

from attn_only_tools import generate_log
from attn_only_tools.guards.atomic import atomic_output, check_output, check_writable
from attn_only_tools.guards.errors import PluginError

from . import command_parser


def hypotheses(sentences, detokenized: bool = False, where: str = "the log"):
    """The best hypothesis of sentences 0..N-1 ({id: generate_log.Sentence}), in id order."""
    if not sentences:
        raise PluginError(f"{where} holds no H- lines: give the file fairseq-generate's output was written to")
    missing = sorted(set(range(len(sentences))) - set(sentences))
    if missing:
        raise PluginError(
            f"{where}: sentence ids are not 0..{len(sentences) - 1} ({len(missing)} missing, the first {missing[0]}): "
            "the run was interrupted or skipped sentences; decode the whole split again"
        )
    out = []
    for i in range(len(sentences)):
        found = sentences[i].detokenized if detokenized else sentences[i].hypotheses
        if not found:
            tag = "D-" if detokenized else "H-"
            raise PluginError(f"{where}: sentence {i} has no {tag} line: decode the whole split again")
        out.append(found[0][1])
    return out


def main(argv=None) -> int:
    p = command_parser(__doc__)
    p.add_argument("log", type=Path, help="fairseq-generate's output (stdout)")
    p.add_argument("--output", type=Path, required=True, help="the hypotheses, one a line")
    p.add_argument("--detokenized", action="store_true", help="the D- lines' text instead of the H- lines'")
    p.add_argument("--force", action="store_true", help="replace an existing --output")
    a = p.parse_args(argv)
    check_output(a.output, [a.log], a.force, "--output")
    check_writable(a.output, "--output")
    lines = hypotheses(generate_log.read(a.log), a.detokenized, str(a.log))
    with atomic_output(a.output, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(line + "\n" for line in lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
