"""WSJ constituency parsing as translation (section 6.3 of Vaswani et al. (2017)): write
fairseq-ready source words and linearized target trees (Vinyals et al. 2015) per split.

    attn-only-prepare-ptb --treebank /data/treebank_3/parsed/mrg/wsj --out work/wsj      # 02-21/22/23
    attn-only-prepare-ptb --treebank ../shared/data/ptb-sample --out work/wsj_sample \\
        --split train=1-159 valid=160-169 test=170-179 [--target-words]

For each split: SPLIT.words (source), SPLIT.tree (target), SPLIT.gold (normalized gold trees,
one per line, for EVALB) and SPLIT.tags (gold POS tags). Files are written atomically; an existing
--out folder is written into only with --force, and never one that is, holds or lies inside --treebank.
SPLIT.tree has XX in every word slot (Vinyals et al. 2015, the paper), or with --target-words the
word itself, `(S (NP The man )NP (VP sleeps )VP . )S` (not in the paper; docs/parsing.md).
"""

import sys
from pathlib import Path

from attn_only_tools.guards.errors import PluginError

from . import command_parser


def _write(path: Path, lines) -> None:
    from attn_only_tools.guards.atomic import atomic_output

    with atomic_output(path, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)


def prepare(treebank: Path, out: Path, ranges, target_words: bool = False) -> dict:
    from attn_only_tools.parsing.data import linearized_split, treebank_files

    counts = {}
    data = {}
    for split, (first, last) in ranges.items():
        files = treebank_files(treebank, first, last)
        if not files:
            raise PluginError(f"no wsj_NNNN.mrg files numbered {first}-{last} under {treebank} (for the {split} split)")
        try:
            data[split] = list(linearized_split(files, target_words))
        except ValueError as e:  # unbalanced brackets etc.: one line naming the file
            raise PluginError(f"{e}") from None
    out.mkdir(parents=True, exist_ok=True)
    for split, rows in data.items():
        _write(out / f"{split}.words", (" ".join(w) for w, _, _, _ in rows))
        _write(out / f"{split}.tree", (" ".join(t) for _, t, _, _ in rows))
        _write(out / f"{split}.gold", (g for _, _, g, _ in rows))
        _write(out / f"{split}.tags", (" ".join(t) for _, _, _, t in rows))
        counts[split] = len(rows)
    return counts


def main(argv=None) -> None:
    from attn_only_tools.parsing.data import STANDARD, parse_ranges

    p = command_parser(__doc__)
    p.add_argument("--treebank", type=Path, required=True, help="folder with wsj_NNNN.mrg files (any depth)")
    p.add_argument("--out", type=Path, required=True, help="the folder to write (not inside --treebank)")
    p.add_argument("--force", action="store_true", help="write over the files of an existing --out")
    p.add_argument(
        "--split", nargs="+", help="train=A-B valid=C-D test=E-F by WSJ file number (default: sections 02-21 / 22 / 23)"
    )
    p.add_argument(
        "--target-words",
        action="store_true",
        help="write each word in its target slot instead of XX (the copy linearization; not in the paper)",
    )
    a = p.parse_args(argv)
    if not a.treebank.is_dir():
        raise PluginError(f"--treebank {a.treebank} is not a folder: point it at your WSJ .mrg files")
    from attn_only_tools.guards.atomic import check_output

    check_output(a.out, [a.treebank], a.force)  # the shared rule for outputs
    try:
        ranges = parse_ranges(a.split) if a.split else STANDARD
    except ValueError as e:
        raise PluginError(f"{e}") from None
    counts = prepare(a.treebank, a.out, ranges, a.target_words)
    print("[ptb] sentences: " + ", ".join(f"{k} {v}" for k, v in counts.items()) + f" -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
