"""Convert whole checkpoints between fairseq's built-in `transformer` and ours, for models both
sides express (learned positions, ReLU, equal encoder and decoder sizes, d_k = d_v = d_model / h):
`--to fairseq` gives a checkpoint fairseq loads without the plugin, `--to ours` one it loads with
`--user-dir attn_only_plugin`.

    attn-only-convert-checkpoint --to ours    fairseq_checkpoint.pt ours.pt
    attn-only-convert-checkpoint --to fairseq ours.pt fairseq_checkpoint.pt

Both compute section 3 of Vaswani et al. (2017); attn_only_plugin/export/fairseq.py maps the weights.
The model config is rewritten for the other side (the task config is kept), so the result
loads in fairseq-generate (`--user-dir attn_only_plugin` for ours) and in tools that read
fairseq transformer checkpoints. The optimizer state is dropped (its layout follows the
parameters). Only settings both sides express convert: learned positions (fairseq's
sinusoids and section 3.5's interleaved ones are different functions), ReLU, post- or
pre-norm, no layernorm_embedding, equal encoder/decoder sizes, d_k = d_v = d_model / h.
An output that is the input file (however its path is written) is refused, and so is an output
named as fairseq-train's own checkpoints (checkpoint_last.pt, checkpoint_best.pt, ...), which a
save dir would take for the run's or overwrite.
"""

import sys
from argparse import Namespace
from pathlib import Path

import torch

from attn_only_plugin.export.fairseq import fairseq_to_ours, ours_to_fairseq
from attn_only_plugin.guards.safe_load import load_checkpoint
from attn_only_plugin.guards.save_dir import check_not_a_training_name
from attn_only_tools.cli import command_parser
from attn_only_tools.guards.atomic import atomic_output, check_output
from attn_only_tools.guards.errors import PluginError


def _get(cfg, name, default=None):
    return cfg.get(name, default) if isinstance(cfg, dict) else getattr(cfg, name, default)


def fairseq_model_cfg_to_ours(m) -> dict:
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    arch = _get(m, "arch") or _get(m, "_name")
    model = ARCH_MODEL_NAME_REGISTRY.get(arch, arch)
    if model != "transformer":
        raise PluginError(
            f"this checkpoint's model is {model!r}, not fairseq's transformer: --to ours converts "
            "fairseq transformer checkpoints (--to fairseq converts an attn_only_transformer one)"
        )
    for flag, bad in [
        ("layernorm_embedding", True),
        ("no_scale_embedding", True),
        ("cross_self_attention", True),
        ("no_token_positional_embeddings", True),
        ("adaptive_softmax_cutoff", "set"),
    ]:
        value = _get(m, flag)
        if (bad == "set" and value) or value is True:
            raise PluginError(f"the fairseq model uses --{flag.replace('_', '-')}, which our model does not have")
    if str(_get(m, "activation_fn", "relu")) != "relu":
        raise PluginError(f"the fairseq model uses activation {_get(m, 'activation_fn')}; the paper's FFN is ReLU")
    if not (_get(m, "encoder_learned_pos") and _get(m, "decoder_learned_pos")):
        raise PluginError(
            "the fairseq model uses sinusoidal positions ([sin | cos], not section 3.5's): only "
            "models trained with --encoder-learned-pos --decoder-learned-pos convert exactly"
        )
    d = _get(m, "encoder_embed_dim")
    if (
        _get(m, "decoder_embed_dim") != d
        or _get(m, "decoder_ffn_embed_dim") != _get(m, "encoder_ffn_embed_dim")
        or _get(m, "decoder_attention_heads") != _get(m, "encoder_attention_heads")
        or _get(m, "encoder_normalize_before") != _get(m, "decoder_normalize_before")
    ):
        raise PluginError("encoder and decoder sizes (or normalisation) differ; our model has one d_model, d_ff, h")
    sharing = (
        "all"
        if _get(m, "share_all_embeddings")
        else "decoder"
        if _get(m, "share_decoder_input_output_embed")
        else "none"
    )
    return dict(
        _name="attn_only_transformer",
        encoder_layers=_get(m, "encoder_layers"),
        decoder_layers=_get(m, "decoder_layers"),
        d_model=d,
        d_ff=_get(m, "encoder_ffn_embed_dim"),
        heads=_get(m, "encoder_attention_heads"),
        dropout=_get(m, "dropout"),
        attention_dropout=_get(m, "attention_dropout", 0.0),
        relu_dropout=_get(m, "activation_dropout", 0.0) or _get(m, "relu_dropout", 0.0) or 0.0,
        learned_pos=True,
        pre_norm=bool(_get(m, "encoder_normalize_before")),
        embedding_sharing=sharing,
        max_source_positions=_get(m, "max_source_positions"),
        max_target_positions=_get(m, "max_target_positions"),
    )


def ours_model_cfg_to_fairseq(m) -> Namespace:
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY
    from fairseq.models.transformer.transformer_legacy import base_architecture

    name = _get(m, "_name") or _get(m, "arch")  # fairseq-train stores the --arch (transformer_base, ...)
    model = ARCH_MODEL_NAME_REGISTRY.get(name, name)
    if model != "attn_only_transformer":
        raise PluginError(
            f"this checkpoint's model is {model!r}, not attn_only_transformer: --to fairseq "
            "converts our checkpoints (--to ours converts a fairseq transformer one)"
        )
    for flag in ("attention_window", "relative_positions"):  # docs/attention_variants.md
        if _get(m, flag) is not None:
            raise PluginError(
                f"this model uses --{flag.replace('_', '-')} {_get(m, flag)}, which fairseq's "
                "transformer cannot express (full self-attention, absolute positions only): it does not "
                "convert"
            )
    if _get(m, "no_absolute_positions"):  # its checkpoint has no position table to carry over
        raise PluginError(
            "this model uses --no-absolute-positions, and the converter carries learned position tables "
            "only (fairseq's --no-token-positional-embeddings is refused both ways): it does not convert"
        )
    if not _get(m, "learned_pos"):
        raise PluginError(
            "this model uses section 3.5's sinusoids, which fairseq's transformer cannot express: "
            "only models trained with --learned-pos convert"
        )
    d, h = _get(m, "d_model"), _get(m, "heads")
    if (_get(m, "d_k") or d // h) != d // h or (_get(m, "d_v") or d // h) != d // h or d % h:
        raise PluginError("fairseq's transformer needs d_k = d_v = d_model / h (Table 3 rows A/B do not convert)")
    sharing = str(_get(m, "embedding_sharing"))
    args = Namespace(
        arch="transformer",
        _name="transformer",
        encoder_embed_dim=d,
        decoder_embed_dim=d,
        encoder_ffn_embed_dim=_get(m, "d_ff"),
        decoder_ffn_embed_dim=_get(m, "d_ff"),
        encoder_attention_heads=h,
        decoder_attention_heads=h,
        encoder_layers=_get(m, "encoder_layers"),
        decoder_layers=_get(m, "decoder_layers"),
        encoder_learned_pos=True,
        decoder_learned_pos=True,
        dropout=_get(m, "dropout"),
        attention_dropout=_get(m, "attention_dropout"),
        activation_dropout=_get(m, "relu_dropout"),
        encoder_normalize_before=_get(m, "pre_norm"),
        decoder_normalize_before=_get(m, "pre_norm"),
        share_all_embeddings=sharing == "all",
        share_decoder_input_output_embed=sharing != "none",
        max_source_positions=_get(m, "max_source_positions"),
        max_target_positions=_get(m, "max_target_positions"),
    )
    base_architecture(args)
    return args


# fairseq's Dictionary always puts <s>=0, <pad>=1, </s>=2, <unk>=3 first; the dictionaries of a
# converted model are the same files, so the padding index is this one on both sides.
FAIRSEQ_PAD_INDEX = 1


def convert(state: dict, to: str) -> dict:
    model_cfg = _get(state.get("cfg") or {}, "model") or state.get("args")
    if model_cfg is None:
        raise PluginError("not a fairseq checkpoint (no cfg.model or args)")
    if to == "ours":
        new_cfg = fairseq_model_cfg_to_ours(model_cfg)
        weights = fairseq_to_ours(state["model"], FAIRSEQ_PAD_INDEX)
    else:
        new_cfg = ours_model_cfg_to_fairseq(model_cfg)
        d, h = _get(model_cfg, "d_model"), _get(model_cfg, "heads")
        weights = ours_to_fairseq(state["model"], FAIRSEQ_PAD_INDEX, d // h, d // h, h)
    cfg = dict(state["cfg"]) if isinstance(state.get("cfg"), dict) else {"model": None}
    cfg["model"] = new_cfg
    return dict(state, cfg=cfg, args=None, model=weights, last_optimizer_state=None)


def main(argv=None) -> None:
    p = command_parser(__doc__)
    p.add_argument("--to", choices=["ours", "fairseq"], required=True)
    p.add_argument("input", type=Path)
    p.add_argument("output", type=Path)
    p.add_argument("--force", action="store_true", help="replace an existing output")
    a = p.parse_args(argv)
    check_output(a.output, [a.input], a.force, "OUTPUT")
    check_not_a_training_name(a.output, "OUTPUT")
    if not a.output.resolve().parent.is_dir():
        raise PluginError(f"the folder of {a.output} does not exist: create it first, or choose another output path")
    try:
        state = load_checkpoint(a.input)
    except FileNotFoundError:
        raise PluginError(f"{a.input} not found: give the checkpoint file to convert") from None
    try:
        new = convert(state, a.to)
    except KeyError as e:  # a tensor the model config implies is not in the weights
        raise PluginError(
            f"{a.input} has no parameter {e.args[0]}, which its own model config implies: the "
            "checkpoint is partial or was edited; convert the checkpoint fairseq-train wrote"
        ) from None
    with atomic_output(a.output) as f:
        torch.save(new, f)
    print(
        f"[convert] wrote {a.output} ({'attn_only_transformer' if a.to == 'ours' else 'fairseq transformer'})",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
