"""Export a checkpoint of ours (any variant: post/pre-norm, sinusoidal/learned positions, every
--embedding-sharing, any N, free d_k/d_v, each architecture; averaged ones too) to a CTranslate2 model
folder that computes the same function (attn_only_plugin/export/ctranslate2.py, docs/export.md).

    attn-only-export-ctranslate2 work/quickstart/checkpoints/checkpoint_avg.pt \\
        --data work/quickstart/data-bin --out work/quickstart/ct2
    attn-only-export-ctranslate2 CHECKPOINT --data DATA_BIN --out DIR --quantization int8 --force

DATA_BIN is the fairseq-preprocess folder the model was trained on (its dict.*.txt become the
vocabularies). The folder is written under a temporary name and renamed when complete; an
existing --out is refused unless --force. --quantization stores the weights as CTranslate2's int8
(or float16, ...): smaller and faster, no longer exact (docs/export.md). Translate with
attn-only-translate-ctranslate2 or attn_only_plugin.load_ctranslate2.
"""

import argparse
import logging
import sys
from pathlib import Path

from attn_only_plugin.export import QUANTIZATIONS, require_ctranslate2
from attn_only_tools.cli import command_parser

logging.getLogger("fairseq").setLevel(logging.WARNING)  # no INFO chatter among our messages


def export(checkpoint: Path, data: Path, out: Path, quantization=None, force: bool = False) -> Path:
    require_ctranslate2()
    from attn_only_plugin.export.ctranslate2 import export as export_model

    return export_model(checkpoint, data, out, quantization, force)


def parse_args(argv=None) -> argparse.Namespace:
    p = command_parser(__doc__, example_paragraphs=2)
    p.add_argument("checkpoint", type=Path, help="checkpoint_*.pt of fairseq-train or attn-only-average-checkpoints")
    p.add_argument("--data", type=Path, required=True, help="the data-bin folder it was trained on (dict.*.txt)")
    p.add_argument("--out", type=Path, required=True, help="the CTranslate2 model folder to write")
    p.add_argument(
        "--quantization",
        choices=[q for q in QUANTIZATIONS if q != "float32"],
        default=None,
        help="weight type (default: float32, exact)",
    )
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    return p.parse_args(argv)


def main(argv=None) -> None:
    a = parse_args(argv)
    out = export(a.checkpoint, a.data, a.out, a.quantization, a.force)
    print(f"[export] wrote {out} (CTranslate2, {a.quantization or 'float32'})", file=sys.stderr)


if __name__ == "__main__":
    main()
