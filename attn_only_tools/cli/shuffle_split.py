"""Pool a parallel corpus's train/valid/test pairs, shuffle them and split them again by count.

    attn-only-shuffle-split --data work/libreoffice_en_de --src en --tgt de \
        --test 1000 --valid 1000 --seed 1 --out work/quality_raw

The split docs/quality.md measures on: every pair of DATA's three splits, shuffled with --seed
(Python's random.Random), the first --test pairs the test split, the next --valid the validation
split, the rest training. (attn-only-prepare-libreoffice splits by help page instead, so no page straddles
two splits.) OUT gets
train/valid/test.{src,tgt}, ready for attn-only-spm-prepare; each file is written whole or not at all.
"""

import argparse
import os
import random
import sys
from pathlib import Path

from attn_only_tools.guards.errors import PluginError, install_excepthook

SPLITS = ("train", "valid", "test")


def read_pairs(data: Path, src: str, tgt: str) -> list:
    pairs = []
    for split in SPLITS:
        sides = []
        for lang in (src, tgt):
            path = data / f"{split}.{lang}"
            if not path.is_file():
                raise PluginError(f"missing {path}: --data must hold train/valid/test.{src} and .{tgt}")
            try:
                sides.append(path.read_text(encoding="utf-8").splitlines())
            except UnicodeDecodeError as e:
                raise PluginError(
                    f"{path} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at byte {e.start}): "
                    "convert it first, e.g. iconv -f latin1 -t utf-8"
                ) from None
        if len(sides[0]) != len(sides[1]):
            raise PluginError(
                f"{data / split}.{src} has {len(sides[0])} lines but .{tgt} has {len(sides[1])}: "
                "the two sides must be aligned line by line"
            )
        pairs += zip(*sides, strict=True)
    return pairs


def shuffle_split(pairs: list, n_test: int, n_valid: int, seed: int) -> dict:
    """{"test": first n_test shuffled pairs, "valid": the next n_valid, "train": the rest}."""
    if n_test < 1 or n_valid < 1 or n_test + n_valid >= len(pairs):
        raise PluginError(
            f"--test {n_test} and --valid {n_valid} must be >= 1 and leave training pairs "
            f"out of the {len(pairs)} there are"
        )
    pairs = list(pairs)
    random.Random(seed).shuffle(pairs)
    return {"test": pairs[:n_test], "valid": pairs[n_test : n_test + n_valid], "train": pairs[n_test + n_valid :]}


def write(splits: dict, out: Path, src: str, tgt: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for split, pairs in splits.items():
        for side, lang in enumerate((src, tgt)):
            path = out / f"{split}.{lang}"
            tmp = out / f".{split}.{lang}.tmp"
            tmp.write_text("".join(p[side] + "\n" for p in pairs), encoding="utf-8")
            os.replace(tmp, path)


def main(argv=None) -> None:
    install_excepthook()  # an error that ends the command is one `error:` line
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="example:\n" + __doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data", type=Path, required=True, help="folder with train/valid/test.{src,tgt}")
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--test", type=int, default=1000, help="test pairs")
    p.add_argument("--valid", type=int, default=1000, help="validation pairs")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    try:
        if a.out.exists() and a.data.exists() and os.path.samefile(a.out, a.data):
            raise PluginError(
                f"--out {a.out} is the --data folder: it would replace the corpus it reads; give another folder"
            )
        splits = shuffle_split(read_pairs(a.data, a.src, a.tgt), a.test, a.valid, a.seed)
        write(splits, a.out, a.src, a.tgt)
    except PluginError as e:
        sys.exit(f"error: {e}")
    print(f"[split] {a.out}: " + ", ".join(f"{k} {len(v)}" for k, v in splits.items()), file=sys.stderr)


if __name__ == "__main__":
    main()
