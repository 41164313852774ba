"""Joint sentencepiece segmentation of a parallel corpus (section 5.1 of Vaswani et al. (2017):
"byte-pair encoding with a shared source-target vocabulary of about 37000 tokens").

    attn-only-spm-prepare --data DIR --src en --tgt de --vocab-size 8000 --out OUT

DIR holds train/valid/test.{src,tgt} plain text. OUT receives spm.model / spm.vocab (one model
trained on the union of both training sides) and the six files encoded as space-separated
pieces, ready for `fairseq-preprocess --joined-dictionary`. With --source-only (subword sources
for the parser, whose `--target-words` trees need the words whole, docs/parsing.md) the model is
trained on train.{src} alone and only the source side is segmented, the target files are copied
as they are, and dict.{src}.txt lists every piece (for `fairseq-preprocess --srcdict`: a piece the
training text never shows would otherwise be <unk> in valid or test text and lose its word
start). OUT may not be, hold or lie inside
DIR, and an existing OUT is written over only with --force. Files are written atomically; text
that is not UTF-8 or holds invisible characters (a byte order mark, zero-width spaces) is refused
(one `error:` line naming the file and line) before anything is written.
"""

import os
import sys
import tempfile
from pathlib import Path

from attn_only_tools.guards import atomic, hidden_chars

from . import command_parser

SPLITS = ("train", "valid", "test")


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


def train_model(files, prefix: Path, vocab_size: int, model_type: str) -> None:
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=",".join(map(str, files)),
        model_prefix=str(prefix),
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=1.0,
        input_sentence_size=2_000_000,
        shuffle_input_sentence=True,
        bos_id=-1,
        eos_id=-1,
        pad_id=-1,
        unk_id=0,  # fairseq adds its own
        minloglevel=2,
    )


def rewrite_file(src: Path, dst: Path, line_of) -> int:
    """dst written atomically from src's lines (a byte order mark dropped), each through line_of;
    returns the number of lines."""
    with atomic.atomic_output(dst, "w", encoding="utf-8") as out:
        with open(src, encoding="utf-8-sig") as inp:
            n = 0
            for line in inp:
                out.write(line_of(line))
                n += 1
    return n


def first_bad_text(path: Path):
    """What is wrong with the first line of `path` that is not UTF-8 or holds a character editors do
    not show (a byte order mark, a zero-width space: it would become part of a piece), with what
    to do; None when every line is clean. Checked before training: rewrite_file would otherwise
    fail with a traceback after the (long) sentencepiece training."""
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as e:
                return (
                    f"{path} line {n} is not UTF-8 text (byte 0x{line[e.start]:02x} at byte {e.start}): convert "
                    "the corpus to UTF-8 first, e.g. iconv -f latin1 -t utf-8"
                )
            found = hidden_chars.find_hidden(hidden_chars.strip_bom(text, n == 1))
            if found:
                return (
                    f"{path} line {n} holds an invisible character, {found[1]} at column {found[0]}, which would "
                    f"become part of a piece: remove it first, e.g. {hidden_chars.REMOVE.replace('FILE', str(path))}"
                )
    return None


def prepare(
    data: Path, src: str, tgt: str, vocab_size: int, out: Path, model_type: str = "bpe", source_only: bool = False
) -> Path:
    """Train the joint model on data/train.{src,tgt} (or on train.{src} alone, source_only) and
    encode every split into out/ (source_only: the target files copied unchanged)."""
    import sentencepiece as spm

    files = {(s, lang): data / f"{s}.{lang}" for s in SPLITS for lang in (src, tgt)}
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        fail(f"missing corpus file {missing[0]}: --data must hold train/valid/test.{src} and .{tgt}")
    for path in files.values():
        bad = first_bad_text(path)
        if bad:
            fail(bad)
    for split in SPLITS:
        n_src, n_tgt = (sum(1 for _ in open(files[split, lang], "rb")) for lang in (src, tgt))
        if n_src != n_tgt:
            fail(
                f"{files[split, src]} has {n_src} lines but {files[split, tgt]} has {n_tgt}: a parallel corpus has "
                "one sentence per line on both sides, in the same order; align the files first"
            )
    out.mkdir(parents=True, exist_ok=True)
    sides = (src,) if source_only else (src, tgt)
    print(
        f"[spm] training a {'source' if source_only else 'joint'} {model_type} model, vocabulary {vocab_size}",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        train_model([files["train", lang] for lang in sides], Path(tmp) / "spm", vocab_size, model_type)
        for ext in ("model", "vocab"):
            os.replace(Path(tmp) / f"spm.{ext}", out / f"spm.{ext}")
    model = spm.SentencePieceProcessor(model_file=str(out / "spm.model"))
    if source_only:  # every piece in fairseq's dictionary: an unseen one would read as <unk>, losing its word start
        with atomic.atomic_output(out / f"dict.{src}.txt", "w", encoding="utf-8") as f:
            f.writelines(
                f"{model.id_to_piece(i)} 1\n" for i in range(model.get_piece_size()) if not model.is_unknown(i)
            )
    for (split, lang), path in files.items():
        if lang in sides:
            n = rewrite_file(
                path, out / f"{split}.{lang}", lambda line: " ".join(model.encode(line.strip(), out_type=str)) + "\n"
            )
        else:
            n = rewrite_file(path, out / f"{split}.{lang}", lambda line: line)
        print(f"[spm] {split}.{lang}: {n} lines{'' if lang in sides else ', copied'}", file=sys.stderr)
    return out / "spm.model"


def main(argv=None) -> None:
    p = command_parser(__doc__)
    p.add_argument("--data", type=Path, required=True, help="folder with train/valid/test.{src,tgt}")
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--vocab-size", type=int, default=8000, help="joint vocabulary (paper: ~37000 EN-DE)")
    p.add_argument("--model-type", choices=["bpe", "unigram"], default="bpe")
    p.add_argument("--out", type=Path, required=True, help="the folder to write (not inside --data)")
    p.add_argument("--force", action="store_true", help="write over an existing --out")
    p.add_argument(
        "--source-only",
        action="store_true",
        help="segment the source side alone (a model of train.SRC); copy the target",
    )
    a = p.parse_args(argv)
    if a.src == a.tgt:
        fail(f"--src and --tgt are both {a.src!r}: give the two languages of the corpus, e.g. --src en --tgt de")
    if a.vocab_size < 100:
        fail(f"--vocab-size {a.vocab_size} is too small: use at least a few thousand")
    atomic.check_output(a.out, [a.data], a.force)
    try:
        prepare(a.data, a.src, a.tgt, a.vocab_size, a.out, a.model_type, a.source_only)
    except RuntimeError as e:  # sentencepiece reports e.g. a vocabulary larger than the corpus allows
        fail(f"sentencepiece failed: {str(e).splitlines()[-1]} (try a smaller --vocab-size)")


if __name__ == "__main__":
    main()
