"""A classical baseline for section 6.3 / Table 4 of Vaswani et al. (2017): an unlexicalized treebank
PCFG (Klein & Manning 2003) read off the train split's gold trees parses SPLIT, and the same EVALB
(COLLINS.prm) as attn-only-parse-eval scores it.

    attn-only-pcfg-baseline --data work/wsj_parsing/text --split test --out work/wsj_parsing/test.pcfg

--data holds attn-only-prepare-ptb's SPLIT.words / .tags / .gold; the grammar is trained on
TRAIN.gold (--train, default train): parent annotation (--vertical 2), right-factored binarization
with horizontal Markovization (--markov 2), a rare-word lexicon (--rare 3), exact Viterbi CKY
(attn_only_tools/parsing/pcfg.py). SPLIT is parsed from its words (unseen words tagged through
their shape and suffix), or with --gold-tags from the gold POS tags. Either way the gold tags are
put back before scoring, as
attn-only-parse-eval does (EVALB finds punctuation by its tag); the tagging accuracy printed is the
parser's own. A sentence the grammar derives no tree for gets the right-branching tree, counted.
--out is written atomically; it may not be an input, and replaces an existing file only with --force.
"""

import sys
import time
from pathlib import Path

from attn_only_tools.guards import atomic, hidden_chars
from attn_only_tools.guards.errors import PluginError
from attn_only_tools.parsing import evalb, linearize, pcfg, ptb

from . import command_parser


def read_split(data: Path, split: str):
    """(words, tags, gold tree lines) of SPLIT from attn-only-prepare-ptb's files, checked line for line."""
    paths = {ext: data / f"{split}.{ext}" for ext in ("words", "tags", "gold")}
    text = {}
    for ext, path in paths.items():
        if not path.is_file():
            raise PluginError(f"{path} not found: run attn-only-prepare-ptb first (--data is its --out folder)")
        text[ext] = [
            hidden_chars.strip_bom(line, i == 0) for i, line in enumerate(path.read_text(encoding="utf-8").splitlines())
        ]
        problem = hidden_chars.hidden_in_lines(text[ext], path)  # EVALB would drop such a sentence from F1
        if problem:
            raise PluginError(f"{problem}")
    words, tags = [line.split() for line in text["words"]], [line.split() for line in text["tags"]]
    if not len(words) == len(tags) == len(text["gold"]):
        raise PluginError(
            f"{paths['words']}, .tags and .gold have {len(words)}, {len(tags)} and "
            f"{len(text['gold'])} lines: they are not one attn-only-prepare-ptb output; rerun it"
        )
    for i, (ws, ts) in enumerate(zip(words, tags, strict=False), 1):
        if len(ws) != len(ts) or not ws:
            raise PluginError(
                f"line {i} of {paths['words']} has {len(ws)} words but {paths['tags']} has "
                f"{len(ts)} tags: they are not one attn-only-prepare-ptb output; rerun it"
            )
    return words, tags, text["gold"]


def train_parser(gold: Path, v: int, h: int, rare: int):
    if not gold.is_file():
        raise PluginError(
            f"{gold} not found: run attn-only-prepare-ptb first, with a --split that makes this training split"
        )
    try:
        trees = [
            ptb.parse_tree(line, f"{gold}: line {i}")
            for i, line in enumerate(gold.read_text(encoding="utf-8").splitlines(), 1)
        ]
    except ValueError as e:
        raise PluginError(f"{e}") from None
    if not trees:
        raise PluginError(f"{gold} has no trees: give --train a split with trees")
    try:
        return pcfg.PCFGParser.train(trees, v, h, rare)
    except ValueError as e:  # a label the grammar's symbols cannot hold
        raise PluginError(f"{gold}: {e}") from None


def parse_all(parser, words, tags, gold_tags: bool, log):
    """(predicted trees with the parser's tags, number of right-branching fallbacks)."""
    trees, fallbacks, start = [], 0, time.time()
    every = max(1, len(words) // 10)
    for i, (ws, ts) in enumerate(zip(words, tags, strict=False), 1):
        tree, fallback = parser.parse(ws, ts if gold_tags else None)
        trees.append(tree)
        fallbacks += fallback
        if i % every == 0 or i == len(words):
            spent = time.time() - start
            print(
                f"[pcfg] parsed {i}/{len(words)} sentences ({spent:.0f} s, {spent / i:.3f} s a sentence)",
                file=log,
                flush=True,
            )
    return trees, fallbacks


def baseline(
    data: Path,
    split: str = "test",
    train: str = "train",
    markov: int = 2,
    vertical: int = 2,
    gold_tags: bool = False,
    out: Path = None,
    log=sys.stderr,
    rare: int = 3,
    force: bool = False,
) -> str:
    """Train, parse SPLIT, score; returns the report line (and writes --out's trees)."""
    if markov < 0:
        raise PluginError(f"--markov {markov}: give the number of siblings to remember, 0 or more")
    if rare < 0:
        raise PluginError(f"--rare {rare}: give a word count, 0 or more")
    inputs = [data / f"{s}.{ext}" for ext in ("words", "tags", "gold") for s in (split, train)]
    if out is not None:  # the shared rule for outputs: never an input, replaced only with --force
        atomic.check_output(out, inputs, force)
    words, tags, gold = read_split(data, split)
    start = time.time()
    parser = train_parser(data / f"{train}.gold", vertical, markov, rare)
    g = parser.grammar
    print(
        f"[pcfg] grammar from {data / train}.gold (v={vertical}, h={markov}): {len(g.symbols)} symbols, "
        f"{len(g.binary.parent)} binary and {len(g.unary.parent)} unary rules, {len(g.tags)} tags "
        f"({time.time() - start:.0f} s)",
        file=log,
        flush=True,
    )
    trees, fallbacks = parse_all(parser, words, tags, gold_tags, log)
    right = sum(p == t for tree, ts in zip(trees, tags, strict=False) for p, t in zip(tree.tags(), ts, strict=False))
    lines = [str(linearize.replace_tags(tree, ts)) for tree, ts in zip(trees, tags, strict=False)]
    if out is not None:
        with atomic.atomic_output(out, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    result = evalb.evaluate_lines(gold, lines)
    problem = evalb.unscored(result, split, data)  # every sentence is in F1, or none is reported
    if problem:
        raise PluginError(f"{problem}")
    t = result.all
    source = "gold POS tags" if gold_tags else "words"
    return (
        f"{evalb.summary(split, len(words), t)}; treebank PCFG (v={vertical}, h={markov}, rare {rare}, "
        f"trained on {train}) from {source}: tagging accuracy "
        f"{100 * right / sum(map(len, tags)):.2f}%, {fallbacks} right-branching fallbacks"
    )


def main(argv=None) -> None:
    p = command_parser(__doc__)
    p.add_argument("--data", type=Path, required=True, help="attn-only-prepare-ptb output folder")
    p.add_argument("--split", default="test", help="the split to parse and score (default test)")
    p.add_argument("--train", default="train", help="the split whose gold trees train the grammar")
    p.add_argument("--markov", type=int, default=2, help="horizontal Markov order h (default 2, chosen on valid)")
    p.add_argument(
        "--vertical",
        type=int,
        default=2,
        choices=(1, 2),
        help="vertical order v: 2 annotates each phrase with its parent's label (default)",
    )
    p.add_argument(
        "--rare",
        type=int,
        default=3,
        help="words seen at most this often in training get their tags "
        "smoothed with their shape + suffix class's (default 3, chosen on valid)",
    )
    p.add_argument("--gold-tags", action="store_true", help="parse from the gold POS tags instead of the words")
    p.add_argument("--out", type=Path, help="also write the predicted trees (gold tags put back), one per line")
    p.add_argument("--force", action="store_true", help="write over an existing --out")
    a = p.parse_args(argv)
    print(baseline(a.data, a.split, a.train, a.markov, a.vertical, a.gold_tags, a.out, rare=a.rare, force=a.force))


if __name__ == "__main__":
    main()
