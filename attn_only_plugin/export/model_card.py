"""The model card (README.md) of a transformers export: the paper, the model's sizes, how to run it,
the training settings the checkpoint records, BLEU when the user gives it; the licence is left to
the model's owner (front matter `license:` commented out).

fairseq stores the configuration of a run, not its command line: the card reconstructs the
fairseq-train flags from it (the model's settings that differ from its --arch preset, the task's,
and the recorded criterion, optimizer, schedule, batch and seed settings) and says so.
"""

from typing import Optional

from .common import Checkpoint

PAPER = (
    "Ashish Vaswani, Noam Shazeer, Niki Parmar, Jakob Uszkoreit, Llion Jones, Aidan N. Gomez, Lukasz "
    "Kaiser, Illia Polosukhin. Attention Is All You Need. NeurIPS 2017. https://arxiv.org/abs/1706.03762"
)
# (section of fairseq's cfg, its keys worth a flag); model: every field of ours that is set
SECTIONS = (
    ("criterion", ("label_smoothing",)),
    ("optimizer", ("adam_betas", "adam_eps", "weight_decay")),
    ("lr_scheduler", ("warmup_updates", "lr_multiplier", "warmup_init_lr")),
    ("optimization", ("max_update", "max_epoch", "lr", "update_freq", "clip_norm")),
    ("dataset", ("max_tokens", "batch_size")),
    ("common", ("seed", "fp16", "bf16")),
)
SKIP_MODEL = {
    "_name",
    "arch",
    "encoder_layers_to_keep",
    "decoder_layers_to_keep",
    "checkpoint_activations",
    "offload_activations",
    "alignment_layer",
    "max_source_positions",
    "max_target_positions",
}


def _get(section, key):
    return section.get(key) if isinstance(section, dict) else getattr(section, key, None)


def _flag(key: str, value) -> str:
    """`--key value` as fairseq-train spells it (lists space-separated, True as a bare flag)."""
    name = "--" + key.replace("_", "-")
    if value is True:
        return name
    if isinstance(value, (list, tuple)):
        value = " ".join(str(v) for v in value)
    text = str(value)
    return f"{name} {text!r}" if " " in text or "(" in text else f"{name} {text}"


def _preset(arch: str):
    """The TransformerConfig that --arch ARCH gives when no other model flag is passed."""
    from argparse import Namespace

    from fairseq.models import ARCH_CONFIG_REGISTRY

    from ..models.transformer import full_config

    args = Namespace()
    ARCH_CONFIG_REGISTRY[arch](args)
    return full_config(args)


def training_command(cfg) -> str:
    """fairseq-train flags reconstructed from a checkpoint's cfg (dict, or an argparse Namespace for old ones)."""
    model, task = _get(cfg, "model") or {}, _get(cfg, "task") or {}
    arch = _get(model, "_name") or _get(model, "arch")
    defaults = _preset(arch)
    flags = [
        "fairseq-train",
        str(_get(task, "data") or "DATA_BIN"),
        "--user-dir attn_only_plugin",
        f"--arch {arch}",
        f"--task {_get(task, '_name')}",
    ]
    for key in ("source_lang", "target_lang"):
        if _get(task, key):
            flags.append(_flag(key, _get(task, key)))
    for key, value in model.items() if isinstance(model, dict) else vars(model).items():
        if key not in SKIP_MODEL and hasattr(defaults, key) and value is not None and value != getattr(defaults, key):
            flags.append(_flag(key, value))
    for section, keys in SECTIONS:
        part = _get(cfg, section) or {}
        if section in ("criterion", "optimizer", "lr_scheduler") and _get(part, "_name"):
            flags.append(f"--{section.replace('_', '-')} {_get(part, '_name')}")
        flags += [_flag(k, _get(part, k)) for k in keys if _get(part, k) not in (None, False)]
    return " \\\n    ".join(flags)


def _sizes(read: Checkpoint) -> str:
    c = read.cfg
    head = c.d_model // c.heads
    return (
        f"N = {c.encoder_layers} encoder and {c.decoder_layers} decoder layers, d_model = {c.d_model}, "
        f"d_ff = {c.d_ff}, h = {c.heads}, d_k = {c.d_k or head}, d_v = {c.d_v or head}; post-norm, "
        f"section 3.5's sinusoids; embeddings shared: {c.embedding_sharing} (section 3.4); "
        f"vocabulary {len(read.src_dict)} source, {len(read.tgt_dict)} target entries; "
        f"at most {c.max_source_positions} source and {c.max_target_positions} target tokens"
    )


def model_card(read: Checkpoint, checkpoint_name: str, bleu: Optional[str] = None) -> str:
    """README.md of the exported folder."""
    state, cfg = read.state, read.state.get("cfg") or {"model": read.state.get("args")}
    history = state.get("optimizer_history") or [{}]
    updates = history[-1].get("num_updates", "?")
    evaluation = (
        f"As given at export time (`--bleu`):\n\n    {bleu.strip()}"
        if bleu
        else "No score was given at export time (attn-only-export-transformers --bleu)."
    )
    return f"""---
library_name: transformers
pipeline_tag: translation
tags: [translation, marian, attn_only_plugin]
# license: the licence of this model and of its training data: fill it in before sharing the model
---

# Transformer (Vaswani et al., 2017), trained with attn_only_plugin

The model of the paper, trained with fairseq and the attn_only_plugin and exported to transformers'
`MarianMTModel` (`{checkpoint_name}`, {updates} updates), which computes the same function (the
residual stream's dimensions permuted to Marian's order of the sinusoids).

Paper: {PAPER}

Model: {_sizes(read)}.

## Use

```python
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained("THIS_FOLDER")
model = AutoModelForSeq2SeqLM.from_pretrained("THIS_FOLDER")
batch = tokenizer(["A sentence to translate."], return_tensors="pt", padding=True)
print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))
```

`generate()` decodes as the paper (section 6.1) and fairseq-generate do: beam 4, length penalty
0.6 with </s> counted, the decoder started from </s>; it stops at the position table where
fairseq-generate also stops at input length + 50 tokens.

## Training

fairseq records the run's configuration, not its command line; this is it as fairseq-train flags
(the model's settings that differ from its `--arch` preset, then the criterion, optimizer,
schedule, batch and seed as recorded):

```
{training_command(cfg)}
```

## Evaluation

{evaluation}

## Licence

Not set by the export: the model's owner chooses it (front matter `license:`).
"""
