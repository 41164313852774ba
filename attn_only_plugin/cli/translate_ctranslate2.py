"""Translate a file or stdin with a model exported by attn-only-export-ctranslate2, in batches, with a progress
bar on stderr, writing one detokenized translation per line (or fairseq-generate's S-/H-/D- lines).

    attn-only-translate-ctranslate2 work/quickstart/ct2 --spm-model work/quickstart/spm/spm.model \\
        --input test.en --output test.hyp
    echo "Click OK." | attn-only-translate-ctranslate2 work/quickstart/ct2 \\
        --spm-model work/quickstart/spm/spm.model
    attn-only-translate-ctranslate2 work/quickstart/ct2-int8 --spm-model spm.model --input test.en \\
        --fairseq-format

Decoding is fairseq-generate's (beam 4, lenpen 0.6, max length input + 50 by default; see
attn_only_plugin/api/hub_ctranslate2.py), so a float32 export gives its hypotheses. Input lines are
checked as fairseq-interactive's are (UTF-8, not empty, no invisible characters) and against the
model's source positions; the output file is written atomically. --fairseq-format writes
S-i (source pieces), H-i (score in base 2, pieces) and D-i (score, detokenized) lines in input
order, which the scoring scripts that read fairseq-generate's output accept.
"""

import argparse
import logging
import re
import sys
import time
from pathlib import Path

from attn_only_plugin.api.hub_ctranslate2 import load_ctranslate2, log2
from attn_only_plugin.guards.input_checks import read_input_lines
from attn_only_tools.guards.atomic import atomic_output, check_output, check_writable
from attn_only_tools.guards.errors import PluginError

logging.getLogger("fairseq").setLevel(logging.WARNING)  # no INFO chatter among our messages


def read_lines(path: str) -> list:
    """All input lines, checked (input_checks.read_input_lines); path '-' is stdin."""
    if path != "-" and not Path(path).is_file():
        raise PluginError(f"no input file {path}: give a text file with one sentence per line, or - for stdin")
    return [line for block in read_input_lines(path, 1 << 20) for line in block]


def translate_lines(mt, lines: list, batch_size: int, progress: bool = True, **decoding) -> list:
    """(text, tokens, score) per line, in input order, with a progress bar: the lines sorted by
    length (as fairseq-generate batches them), batch_size at a time."""
    from tqdm import tqdm

    try:
        _, tokens = mt.check(lines)  # every line before the first batch: an error comes before any output
    except PluginError as e:
        raise _at_line(e) from None
    order = sorted(range(len(lines)), key=lambda i: len(tokens[i]))
    out = [None] * len(lines)
    with tqdm(total=len(lines), unit="sent", file=sys.stderr, disable=not progress, desc="[translate]") as bar:
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            for i, result in zip(
                chunk, mt.translate_tokens([tokens[i] for i in chunk], batch_size=batch_size, **decoding), strict=True
            ):
                out[i] = result
            bar.update(len(chunk))
    return out


def _at_line(e: PluginError) -> PluginError:
    """A per-sentence error ("sentence I ...", I from 0) said by input line number (from 1)."""
    found = re.match(r"sentence (\d+) (.*)", str(e))
    return PluginError(f"input line {int(found.group(1)) + 1} {found.group(2)}") if found else e


def write(out, lines: list, results: list, fairseq_format: bool, mt) -> None:
    for i, (line, (text, tokens, score)) in enumerate(zip(lines, results, strict=True)):
        if fairseq_format:
            out.write(
                f"S-{i}\t{' '.join(mt.encode(line))}\nH-{i}\t{log2(score):.6f}\t{' '.join(tokens)}\n"
                f"D-{i}\t{log2(score):.6f}\t{text}\n"
            )
        else:
            out.write(text + "\n")


def parse_args(argv=None) -> argparse.Namespace:
    doc = __doc__.split("\n\n")
    p = argparse.ArgumentParser(
        description=doc[0],
        epilog="examples:\n" + doc[1] + "\n\n" + "\n\n".join(doc[2:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", type=Path, help="the --out folder of attn-only-export-ctranslate2")
    p.add_argument("--spm-model", type=Path, help="the sentencepiece model of the data (omit: input is segmented)")
    p.add_argument("--input", default="-", help="text file, one sentence per line (default: stdin)")
    p.add_argument("--output", type=Path, help="file to write (default: stdout)")
    p.add_argument("--force", action="store_true", help="write over an existing --output")
    p.add_argument("--beam", type=int, default=4, help="beam size (section 6.1: 4)")
    p.add_argument("--lenpen", type=float, default=0.6, help="length penalty alpha (section 6.1: 0.6)")
    p.add_argument("--max-len-a", type=float, default=1.0, help="maximum output length a * input + b (6.1: a=1)")
    p.add_argument("--max-len-b", type=int, default=50, help="(section 6.1: b=50)")
    p.add_argument("--batch-size", type=int, default=32, help="sentences per batch")
    p.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N)")
    p.add_argument(
        "--compute-type",
        default="default",
        help="CTranslate2's: default (as exported), float32, int8, int8_float32, float16, int8_float16, bfloat16",
    )
    p.add_argument("--inter-threads", type=int, default=1, help="batches translated in parallel")
    p.add_argument("--intra-threads", type=int, default=0, help="threads per batch (0: all cores)")
    p.add_argument("--fairseq-format", action="store_true", help="write fairseq-generate's S-/H-/D- lines")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    a = p.parse_args(argv)
    for flag in ("beam", "batch_size", "inter_threads"):
        if getattr(a, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be >= 1")
    return a


def main(argv=None) -> None:
    a = parse_args(argv)
    if a.output is not None:  # the shared rule for outputs: never an input, replaced only with --force
        inputs = [a.model, a.spm_model] + ([] if a.input == "-" else [a.input])
        check_output(a.output, inputs, a.force, "--output")
        check_writable(a.output, "--output")  # before the model loads and translates, not after
    mt = load_ctranslate2(
        a.model,
        spm_model=a.spm_model,
        device=a.device,
        compute_type=a.compute_type,
        inter_threads=a.inter_threads,
        intra_threads=a.intra_threads,
    )
    lines = read_lines(a.input)
    start = time.perf_counter()
    results = translate_lines(
        mt, lines, a.batch_size, not a.quiet, beam=a.beam, lenpen=a.lenpen, max_len_a=a.max_len_a, max_len_b=a.max_len_b
    )
    seconds = time.perf_counter() - start
    if a.output is None:
        write(sys.stdout, lines, results, a.fairseq_format, mt)
    else:
        with atomic_output(a.output, "w", encoding="utf-8") as f:
            write(f, lines, results, a.fairseq_format, mt)
    print(
        f"[translate] {len(lines)} sentences in {seconds:.1f} s ({len(lines) / max(seconds, 1e-9):.1f} sentences/s)",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
