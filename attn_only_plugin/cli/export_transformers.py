"""Export a checkpoint of ours (post-norm, sinusoids: the paper's model; base, big or any sizes,
any N, averaged ones too) to a Hugging Face transformers MarianMTModel folder that computes the
same function, with its tokenizer, decoding settings and model card (docs/export.md).

    attn-only-export-transformers work/quickstart/checkpoints/checkpoint_avg.pt \
        --data work/quickstart/data-bin --spm-model work/quickstart/spm/spm.model --out work/quickstart/hf
    attn-only-export-transformers CHECKPOINT --data DATA_BIN --spm-model SPM --out DIR --force \
        --bleu "$(cat bleu.txt)"

DATA_BIN is the fairseq-preprocess folder the model was trained on (its dict.*.txt become
vocab.json, ids kept); SPM the sentencepiece model that prepared it. The folder is written under a
temporary name and renamed when complete; an existing --out is refused unless --force. --bleu puts
a line of sacreBLEU output into the model card. Then, with no code of ours:
    tok = AutoTokenizer.from_pretrained(DIR); model = AutoModelForSeq2SeqLM.from_pretrained(DIR)
    tok.batch_decode(model.generate(**tok(["Click OK."], return_tensors="pt", padding=True)), skip_special_tokens=True)
"""

import argparse
import logging
import sys
from pathlib import Path

from attn_only_plugin.export import require_transformers
from attn_only_tools.cli import command_parser

logging.getLogger("fairseq").setLevel(logging.WARNING)  # no INFO chatter among our messages


def export(checkpoint: Path, data: Path, spm_model: Path, out: Path, force: bool = False, bleu=None) -> Path:
    require_transformers()
    from attn_only_plugin.export.transformers import export as export_model

    return export_model(checkpoint, data, spm_model, out, force, bleu)


def parse_args(argv=None) -> argparse.Namespace:
    p = command_parser(__doc__, example_paragraphs=2)
    p.add_argument("checkpoint", type=Path, help="checkpoint_*.pt of fairseq-train or attn-only-average-checkpoints")
    p.add_argument("--data", type=Path, required=True, help="the data-bin folder it was trained on (dict.*.txt)")
    p.add_argument("--spm-model", type=Path, required=True, help="the sentencepiece model that prepared the data")
    p.add_argument("--out", type=Path, required=True, help="the transformers model folder to write")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--bleu", default=None, help="a sacreBLEU result line to cite in the model card")
    return p.parse_args(argv)


def main(argv=None) -> None:
    a = parse_args(argv)
    out = export(a.checkpoint, a.data, a.spm_model, a.out, a.force, a.bleu)
    print(f"[export] wrote {out} (transformers MarianMTModel, float32)", file=sys.stderr)


if __name__ == "__main__":
    main()
