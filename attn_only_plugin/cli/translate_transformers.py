"""Translate a file with a model exported by attn-only-export-transformers, as a Hugging Face
transformers user would: AutoTokenizer, AutoModelForSeq2SeqLM and generate() with the folder's own
generation_config.json (beam 4 and the length penalty that matches --lenpen 0.6), in batches of
sentences of similar lengths, one detokenized translation per line.

    attn-only-translate-transformers work/quickstart/hf --input test.en --output test.hyp
    attn-only-translate-transformers work/quickstart/hf --input test.en --output test.hyp --threads 2

generate() is given only fairseq's length cap, the longest source of the batch + 50 (a config file
cannot hold a cap relative to the input: docs/export.md). The output file is written atomically;
the speed is printed on stderr as "[translate] N sentences in S s (R sentences/s)", as
attn-only-translate-ctranslate2 prints it.
"""

import argparse
import sys
import time
from pathlib import Path

from attn_only_tools.guards.atomic import atomic_output, check_output, check_writable
from attn_only_tools.guards.errors import PluginError


def translate_lines(folder: Path, lines: list, batch_size: int = 32, progress: bool = True) -> list:
    """Each line of `lines` translated by the exported model in `folder` with generate()."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    order = sorted(range(len(lines)), key=lambda i: len(lines[i]))  # batches of similar lengths, as fairseq's
    hyps = [None] * len(lines)
    with torch.inference_mode():
        for b in range(0, len(order), batch_size):
            rows = order[b : b + batch_size]
            batch = tokenizer([lines[i] for i in rows], return_tensors="pt", padding=True)
            cap = batch["input_ids"].shape[1] + 51  # fairseq's: longest source with </s>, + 50, + the forced </s>
            generated = model.generate(**batch, max_new_tokens=cap)
            for i, text in zip(rows, tokenizer.batch_decode(generated, skip_special_tokens=True), strict=True):
                hyps[i] = text
            if progress:
                print(f"[transformers] {b + len(rows)}/{len(lines)} sentences", file=sys.stderr, flush=True)
    return hyps


def parse_args(argv=None) -> argparse.Namespace:
    doc = __doc__.split("\n\n")
    p = argparse.ArgumentParser(
        description=doc[0],
        epilog="examples:\n" + doc[1] + "\n\n" + "\n\n".join(doc[2:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", type=Path, help="the --out folder of attn-only-export-transformers")
    p.add_argument("--input", type=Path, required=True, help="text file, one sentence per line")
    p.add_argument("--output", type=Path, required=True, help="file to write, one translation per line")
    p.add_argument("--force", action="store_true", help="write over an existing --output")
    p.add_argument("--batch-size", type=int, default=32, help="sentences per batch")
    p.add_argument("--threads", type=int, default=0, help="torch's threads (0: torch's default)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    a = p.parse_args(argv)
    for flag in ("batch_size",):
        if getattr(a, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be >= 1")
    return a


def main(argv=None) -> None:
    a = parse_args(argv)
    if not (a.model / "config.json").is_file():
        raise PluginError(f"{a.model} holds no config.json: give the --out folder of attn-only-export-transformers")
    check_output(a.output, [a.model, a.input], a.force, "--output")
    check_writable(a.output, "--output")  # before the model loads and translates, not after
    lines = a.input.read_text(encoding="utf-8").splitlines()
    if a.threads:
        import torch

        torch.set_num_threads(a.threads)
    start = time.perf_counter()
    hyps = translate_lines(a.model, lines, a.batch_size, not a.quiet)
    seconds = time.perf_counter() - start
    with atomic_output(a.output, "w", encoding="utf-8") as f:
        f.writelines(h + "\n" for h in hyps)
    print(
        f"[translate] {len(lines)} sentences in {seconds:.1f} s ({len(lines) / max(seconds, 1e-9):.1f} sentences/s)",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
