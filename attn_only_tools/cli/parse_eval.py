"""Score fairseq-generate output of a parsing model with EVALB (COLLINS.prm), as section 6.3 /
Table 4 of Vaswani et al. (2017) report F1, next to a right-branching baseline.

    attn-only-parse-eval GENERATE_LOG --data work/wsj/text --split test [--out pred.trees]

GENERATE_LOG is fairseq-generate's stdout: its S- lines (the source words, or sentencepiece pieces
read back as words, checked against SPLIT.words, so that the log of another split or task is
refused) and H- lines (predicted
bracket sequences), in any order. Every H- token that is not a bracket (L / )L is a word slot, XX
or a word alike (attn-only-prepare-ptb --target-words), and gets the gold word, so both linearizations
score the same for the same bracketing. --data holds SPLIT.words / .gold / .tags from attn-only-prepare-ptb.
Malformed outputs are repaired deterministically (attn_only_tools/parsing/linearize.py) and
counted. --out is written atomically; it may not be an input, and replaces an existing file only with --force.
"""

from pathlib import Path

from attn_only_tools import generate_log
from attn_only_tools.guards.errors import PluginError

from . import command_parser

UNK = "<unk>"  # how fairseq-generate prints a source word outside the dictionary


def read_log(log: Path):
    """({id: source words}, {id: best hypothesis tokens}) from fairseq-generate's S- and H- lines."""
    if not log.is_file():
        raise PluginError(f"{log} not found: give the file fairseq-generate's output was written to")
    sentences = generate_log.read(log)
    sources = {i: s.source.split() for i, s in sentences.items() if s.source is not None}
    hyps = {i: s.hypothesis.split() for i, s in sentences.items() if s.hypothesis is not None}
    return sources, hyps


def _shown(tokens, limit: int = 60) -> str:
    text = " ".join(tokens)
    return repr(text if len(text) <= limit else text[:limit] + "...")


def check_sources(log: Path, sources: dict, words, words_path: Path) -> None:
    """Refuse a log whose source sentences are not those of words_path, in number and words (a
    word outside the model's dictionary appears in the log as <unk>)."""
    fix = (
        f"score the log against the --data/--split it was generated from, or generate with --gen-subset "
        f"{words_path.stem} on the data-bin made from {words_path.parent}"
    )
    if not sources:
        raise PluginError(
            f"{log} has no S- lines (source sentences): give fairseq-generate's whole output, "
            "without --quiet, not only its H- lines"
        )
    if len(sources) != len(words):
        raise PluginError(
            f"{log} holds {len(sources)} source sentences but {words_path} has {len(words)}: "
            f"it is the output of another split or task; {fix}"
        )
    for i, expected in enumerate(words):
        got = sources.get(i)
        aligned = got is not None and len(got) == len(expected)
        if not aligned or any(g not in (w, UNK) for g, w in zip(got, expected, strict=True)):
            shown = "missing" if got is None else _shown(got)
            raise PluginError(
                f"{log} is not the output for {words_path}: its sentence {i} is {shown} but line "
                f"{i + 1} there is {_shown(expected)} (another split or task?); {fix}"
            )


def read_hypotheses(log: Path, hyps: dict, n: int):
    missing = [i for i in range(n) if i not in hyps]
    if missing:
        raise PluginError(
            f"{log} has no hypothesis for sentence {missing[0]} ({len(missing)} missing): "
            "was it generated on this split, without --skip-invalid-size-inputs-valid-test?"
        )
    return [hyps[i] for i in range(n)]


def evaluate(log: Path, data: Path, split: str, out: Path = None, force: bool = False) -> str:
    from attn_only_tools.guards.atomic import atomic_output, check_output
    from attn_only_tools.guards.hidden_chars import hidden_in_lines, strip_bom
    from attn_only_tools.parsing.data import right_branching_baseline, score_predictions
    from attn_only_tools.parsing.evalb import summary, unscored
    from attn_only_tools.parsing.pieces import is_pieces, join_pieces

    paths = {ext: data / f"{split}.{ext}" for ext in ("words", "tags", "gold")}
    if out is not None:  # the shared rule for outputs: never an input, replaced only with --force
        check_output(out, [log, *paths.values()], force)

    def lines(ext):
        if not paths[ext].is_file():
            raise PluginError(f"{paths[ext]} not found: run attn-only-prepare-ptb first")
        text = [strip_bom(line, i == 0) for i, line in enumerate(paths[ext].read_text(encoding="utf-8").splitlines())]
        problem = hidden_in_lines(text, paths[ext])  # EVALB would drop such a sentence from F1
        if problem:
            raise PluginError(f"{problem}")
        return text

    words = [line.split() for line in lines("words")]
    tags = [line.split() for line in lines("tags")]
    gold = lines("gold")
    sources, hyps = read_log(log)
    if is_pieces(token for source in sources.values() for token in source):  # a subword source (SUBWORDS=N)
        sources = {i: join_pieces(source, UNK) for i, source in sources.items()}
    check_sources(log, sources, words, paths["words"])
    result, repaired, trees = score_predictions(read_hypotheses(log, hyps, len(words)), words, gold, tags)
    baseline = right_branching_baseline(words, gold, tags)
    problem = unscored(result, split, data) or unscored(baseline, split, data)  # all in F1, or no F1
    if problem:
        raise PluginError(f"{problem}")
    if out is not None:
        with atomic_output(out, "w", encoding="utf-8") as f:
            f.write("\n".join(trees) + "\n")
    t, b = result.all, baseline.all
    return (
        f"{summary(split, len(words), t)}; {repaired} outputs repaired\nright-branching baseline: F1 {b.fmeasure:.2f}"
    )


def main(argv=None) -> None:
    p = command_parser(__doc__)
    p.add_argument("log", type=Path, help="fairseq-generate output")
    p.add_argument("--data", type=Path, required=True, help="attn-only-prepare-ptb output folder")
    p.add_argument("--split", default="test")
    p.add_argument("--out", type=Path, help="also write the predicted trees, one per line")
    p.add_argument("--force", action="store_true", help="write over an existing --out")
    a = p.parse_args(argv)
    print(evaluate(a.log, a.data, a.split, a.out, a.force))


if __name__ == "__main__":
    main()
