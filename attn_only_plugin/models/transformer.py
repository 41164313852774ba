"""The Transformer of Vaswani et al. (2017), section 3, registered with fairseq as
`attn_only_transformer`; its architectures (Table 3, section 6.3) are in architectures.py.

Tensor layout: batch first, (B, T, d_model); see encoder_decoder.py.
"""

import contextlib
import logging
from dataclasses import dataclass, field, fields
from typing import Optional

import torch
from fairseq.dataclass import ChoiceEnum
from fairseq.models import FairseqEncoderDecoderModel, register_model
from omegaconf import OmegaConf, open_dict
from torch import nn

from attn_only_tools.guards.errors import PluginError

from .encoder_decoder import Decoder, Encoder
from .fairseq_names import FairseqNames, map_values

SHARING = ChoiceEnum(["all", "decoder", "none"])
logger = logging.getLogger(__name__)
# parameters with one row per dictionary entry: a size mismatch there means other dictionaries
_VOCAB_TABLES = ("encoder.embed.tokens.weight", "decoder.embed.tokens.weight", "decoder.output_weight")
# what to do about a checkpoint whose tensors do not fit the model built for it, for each way in
_NOT_FITTING = (
    "fairseq-train: use its own --arch and size flags, or a new --save-dir; fairseq-generate, -interactive, "
    "-validate and the API: give a checkpoint of this model, or drop --model-overrides that change its shapes"
)


@dataclass
class TransformerConfig(FairseqNames):
    """Defaults are the base model, Table 3 "base" row and section 5. fairseq's transformer's
    flag names (--encoder-embed-dim, ...) are accepted too, mapped in fairseq_names.py."""

    encoder_layers: int = field(default=6, metadata={"help": "N, encoder layers (Table 3 base)"})
    decoder_layers: int = field(default=6, metadata={"help": "N, decoder layers (Table 3 base)"})
    d_model: int = field(default=512, metadata={"help": "d_model (Table 3 base)"})
    d_ff: int = field(default=2048, metadata={"help": "d_ff, FFN inner size (Table 3 base)"})
    heads: int = field(default=8, metadata={"help": "h, attention heads (Table 3 base)"})
    d_k: Optional[int] = field(
        default=None,
        metadata={"help": "d_k, per-head query/key size; default d_model/h (section 3.2.2; Table 3 rows A, B)"},
    )
    d_v: Optional[int] = field(
        default=None, metadata={"help": "d_v, per-head value size; default d_model/h (section 3.2.2; Table 3 row A)"}
    )
    dropout: float = field(
        default=0.1, metadata={"help": "P_drop, residual and embedding dropout (section 5.4, Table 3 base)"}
    )
    attention_dropout: float = field(
        default=0.0,
        metadata={"help": "dropout on attention weights (not in the paper for translation; 0.2 for parsing)"},
    )
    relu_dropout: float = field(
        default=0.0, metadata={"help": "dropout on the FFN's ReLU activations (not in the paper)"}
    )
    learned_pos: bool = field(
        default=False, metadata={"help": "learned positional embeddings instead of sinusoids (Table 3 row E)"}
    )
    pre_norm: bool = field(
        default=False, metadata={"help": "LayerNorm before each sub-layer (not the paper's post-norm, section 3.1)"}
    )
    embedding_sharing: SHARING = field(
        default="all",
        metadata={
            "help": "section 3.4: 'all' shares source, target and pre-softmax weights (needs "
            "fairseq-preprocess --joined-dictionary); 'decoder' target + pre-softmax; 'none'"
        },
    )
    max_source_positions: int = field(default=1024, metadata={"help": "longest source (positions)"})
    max_target_positions: int = field(default=1024, metadata={"help": "longest target (positions)"})
    encoder_layerdrop: float = field(
        default=0.0,
        metadata={
            "help": "LayerDrop (Fan et al. 2019; not in the paper): each encoder layer skipped with this "
            "probability in every training step, never at inference"
        },
    )
    decoder_layerdrop: float = field(
        default=0.0, metadata={"help": "LayerDrop (Fan et al. 2019; not in the paper) for the decoder layers"}
    )
    encoder_layers_to_keep: Optional[str] = field(
        default=None,
        metadata={
            "help": "encoder layers to keep when loading, e.g. '0,2' (counted from 0): prunes a LayerDrop-trained "
            "model (Fan et al. 2019), e.g. with --model-overrides"
        },
    )
    decoder_layers_to_keep: Optional[str] = field(
        default=None, metadata={"help": "decoder layers to keep when loading, e.g. '1' (see --encoder-layers-to-keep)"}
    )
    checkpoint_activations: bool = field(
        default=False,
        metadata={
            "help": "recompute each layer in the backward pass instead of keeping its activations: less memory, "
            "about a third more compute; same loss and gradients"
        },
    )
    offload_activations: bool = field(
        default=False,
        metadata={
            "help": "--checkpoint-activations (implied) with the tensors kept for the backward pass in CPU memory"
        },
    )
    compile_layers: bool = field(
        default=False,
        metadata={
            "help": "speed only, not the paper's: run each layer through torch.compile in training steps (fused "
            "element-wise kernels); same function to float rounding (modules/compiled.py, docs/speed.md)"
        },
    )
    varlen_attention: bool = field(
        default=False,
        metadata={
            "help": "speed only, not the paper's: in training on CUDA in fp16/bf16, attention runs on the packed "
            "real tokens with FlashAttention's variable-length kernel (no unpacking, no pads); needs "
            "attention dropout 0; elsewhere the padded path; same function to float rounding "
            "(modules/varlen.py, docs/speed.md)"
        },
    )
    static_decoding_cache: bool = field(
        default=False,
        metadata={
            "help": "speed only, not the paper's: beam search keeps self-attention keys/values in buffers of a "
            "fixed size, masked past the current step, so every step of a chunk has the same shapes (for CUDA "
            "graphs); the same hypotheses (modules/static_cache.py, docs/speed.md)"
        },
    )
    alignment_layer: int = field(
        default=-1,
        metadata={
            "help": "decoder layer whose encoder-decoder attention (mean over heads) gives "
            "--print-alignment alignments; -1 = last"
        },
    )
    attention_window: Optional[int] = field(
        default=None,
        metadata={
            "help": "R: self-attention restricted to positions within R of the query (encoder, both sides) "
            "or the query and its R predecessors (decoder); default full (Table 1's restricted row, "
            "section 4; docs/attention_variants.md)"
        },
    )
    relative_positions: Optional[int] = field(
        default=None,
        metadata={
            "help": "K: Shaw et al. (2018) relative position representations clipped at distance K in every "
            "self-attention layer; default off (docs/attention_variants.md)"
        },
    )
    no_absolute_positions: bool = field(
        default=False,
        metadata={
            "help": "no positional encoding added to the embeddings (section 3.5's sinusoids or --learned-pos "
            "dropped); for use with --relative-positions"
        },
    )


def full_config(cfg) -> TransformerConfig:
    """A complete TransformerConfig from a Namespace, DictConfig or partial YAML config."""
    values = {f.name: getattr(cfg, f.name) for f in fields(TransformerConfig) if getattr(cfg, f.name, None) is not None}
    values["embedding_sharing"] = str(values.get("embedding_sharing", "all"))
    map_values(values, TransformerConfig)
    return TransformerConfig(**values)


def validate(cfg: TransformerConfig) -> None:
    for name in ("encoder_layers", "decoder_layers", "d_model", "d_ff", "heads"):
        if getattr(cfg, name) < 1:
            raise PluginError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(cfg, name)}")
    if cfg.d_model % cfg.heads and (cfg.d_k is None or cfg.d_v is None):
        raise PluginError(
            f"d_model={cfg.d_model} is not divisible by h={cfg.heads}: choose --heads that "
            "divides --d-model, or set --d-k and --d-v explicitly (section 3.2.2)"
        )
    for name in ("d_k", "d_v"):  # None: d_model / h; 0 is not that (it would be stored as 0 in the checkpoint)
        if getattr(cfg, name) is not None and getattr(cfg, name) < 1:
            raise PluginError(
                f"--{name.replace('_', '-')} must be >= 1, got {getattr(cfg, name)}: leave it out for "
                f"d_model / h = {cfg.d_model // cfg.heads} (a checkpoint that stores 0 was trained with "
                f"d_model / h: load it with --model-overrides \"{{'{name}': None}}\")"
            )
    for name in ("dropout", "attention_dropout", "relu_dropout", "encoder_layerdrop", "decoder_layerdrop"):
        if not 0.0 <= getattr(cfg, name) < 1.0:
            raise PluginError(f"--{name.replace('_', '-')} must be in [0, 1), got {getattr(cfg, name)}")
    for name in ("attention_window", "relative_positions"):  # None: off
        if getattr(cfg, name) is not None and getattr(cfg, name) < 1:
            raise PluginError(
                f"--{name.replace('_', '-')} must be >= 1, got {getattr(cfg, name)}: leave it out for "
                + ("full self-attention" if name == "attention_window" else "no relative positions")
            )
    if cfg.static_decoding_cache and (cfg.attention_window is not None or cfg.relative_positions is not None):
        raise PluginError(
            "--static-decoding-cache works with full self-attention only: leave it out, or leave out "
            "--attention-window and --relative-positions"
        )
    longest = max(cfg.max_source_positions, cfg.max_target_positions)
    if cfg.relative_positions is not None and cfg.relative_positions >= longest:
        # 2K + 1 embeddings of size d_k: K = 10^9 asked for gigabytes, for distances no input has
        raise PluginError(
            f"--relative-positions {cfg.relative_positions} clips no distance: inputs are at most "
            f"{longest} tokens, so give K < {longest} (Shaw et al. use K = 16 or less)"
        )
    if not -1 <= cfg.alignment_layer < cfg.decoder_layers:
        raise PluginError(
            f"--alignment-layer must be a decoder layer, 0 to {cfg.decoder_layers - 1}, or -1 for the "
            f"last, got {cfg.alignment_layer}"
        )


def layers_to_keep(cfg: TransformerConfig, side: str) -> Optional[list]:
    """The sorted layer indices of --{side}-layers-to-keep, checked against --{side}-layers; None if not given."""
    given, n = getattr(cfg, f"{side}_layers_to_keep"), getattr(cfg, f"{side}_layers")
    if given is None or str(given).strip() == "":
        return None
    flag = f"--{side}-layers-to-keep {given}"
    try:
        keep = sorted(int(i) for i in str(given).split(","))
    except ValueError:
        raise PluginError(f"{flag}: give layer numbers separated by commas, e.g. '0,2'") from None
    if len(set(keep)) != len(keep) or not all(0 <= i < n for i in keep):
        raise PluginError(f"{flag}: the model has {n} {side} layers, numbered 0 to {n - 1}; give each at most once")
    return keep


def build_embedding(dictionary, d_model: int) -> nn.Embedding:
    """Token table; N(0, d_model^-0.5) so that sqrt(d_model) * E has unit scale (section 3.4)."""
    emb = nn.Embedding(len(dictionary), d_model, padding_idx=dictionary.pad())
    nn.init.normal_(emb.weight, mean=0.0, std=d_model**-0.5)
    nn.init.zeros_(emb.weight[dictionary.pad()])
    return emb


def pruned(state_dict, model_cfg):
    """state_dict with only the layers encoder/decoder_layers_to_keep of model_cfg name, renumbered."""
    if model_cfg is None or not (
        getattr(model_cfg, "encoder_layers_to_keep", None) or getattr(model_cfg, "decoder_layers_to_keep", None)
    ):
        return state_dict
    from fairseq.checkpoint_utils import prune_state_dict

    for side in ("encoder", "decoder"):
        keep = getattr(model_cfg, f"{side}_layers_to_keep", None)
        stored = {int(k.split(".")[2]) for k in state_dict if k.startswith(f"{side}.layers.")}
        if keep:
            missing = sorted(set(int(i) for i in str(keep).split(",")) - stored)
            if missing:
                raise PluginError(
                    f"--{side}-layers-to-keep {keep}: the checkpoint has {len(stored)} {side} layers "
                    f"(0 to {len(stored) - 1}), not layer {missing[0]}"
                )
            logger.info(f"pruning the {side} to its layers {keep} of {len(stored)} ({side}_layers_to_keep)")
        else:  # prune_state_dict drops every layer of a side without a list: keep them all
            with open_dict(model_cfg) if OmegaConf.is_config(model_cfg) else contextlib.nullcontext():
                setattr(model_cfg, f"{side}_layers_to_keep", ",".join(str(i) for i in sorted(stored)))
    return prune_state_dict(state_dict, model_cfg)


@register_model("attn_only_transformer", dataclass=TransformerConfig)
class AttnOnlyTransformer(FairseqEncoderDecoderModel):
    """Section 3: encoder-decoder Transformer. Our own layers on fairseq's base interfaces."""

    gives_real_only = True  # forward(..., real_only=True): training logits of real target tokens only

    def __init__(self, cfg: TransformerConfig, encoder: Encoder, decoder: Decoder):
        super().__init__(encoder, decoder)
        self.cfg = cfg

    @classmethod
    def build_model(cls, cfg, task):
        given = cfg
        cfg = full_config(cfg)
        for side in ("encoder", "decoder"):  # pruning a LayerDrop-trained model: the kept layers only
            keep = layers_to_keep(cfg, side)
            if keep is not None:
                setattr(cfg, f"{side}_layers", len(keep))
                with open_dict(given) if OmegaConf.is_config(given) else contextlib.nullcontext():
                    setattr(given, f"{side}_layers", len(keep))  # as fairseq does: a saved model says its size
        validate(cfg)
        if cfg.varlen_attention and cfg.attention_dropout > 0.0:  # modules/varlen.py: its kernel has no dropout
            logger.warning(
                f"--varlen-attention: attention dropout {cfg.attention_dropout} keeps attention on the padded path "
                "(the variable-length kernel drops out nothing); the rest of the packing is kept"
            )
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        if cfg.embedding_sharing == "all":
            if src_dict != tgt_dict:
                raise PluginError(
                    "--embedding-sharing all (section 3.4) needs one joined dictionary: "
                    "run fairseq-preprocess with --joined-dictionary, or pass "
                    "--embedding-sharing decoder"
                )
            enc_emb = dec_emb = build_embedding(src_dict, cfg.d_model)
        else:
            enc_emb, dec_emb = build_embedding(src_dict, cfg.d_model), build_embedding(tgt_dict, cfg.d_model)
        output_weight = dec_emb.weight if cfg.embedding_sharing != "none" else None
        encoder = Encoder(cfg, src_dict, enc_emb)
        decoder = Decoder(cfg, tgt_dict, dec_emb, output_weight)
        return cls(cfg, encoder, decoder)

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        """Refuse, in one line, a checkpoint whose tensors do not fit this model. With
        encoder/decoder_layers_to_keep in model_cfg, the checkpoint's layers are pruned to those
        first (fairseq's prune_state_dict, which then clears them in model_cfg), and logged."""
        state_dict = pruned(state_dict, model_cfg)
        own = self.state_dict()
        for name, value in state_dict.items():
            if name in own and own[name].shape != value.shape:
                if name in _VOCAB_TABLES and own[name].shape[1:] == value.shape[1:]:
                    side = "target" if name.startswith("decoder") else "source"
                    raise PluginError(
                        f"the {side} dictionary does not match the checkpoint: it has {own[name].shape[0]} entries "
                        f"but the checkpoint's {name} has {value.shape[0]}; use the data directory (dict.*.txt) "
                        "the checkpoint was trained with"
                    )
                raise PluginError(
                    f"checkpoint does not fit this model: {name} is {tuple(value.shape)} in the "
                    f"checkpoint but {tuple(own[name].shape)} here; {_NOT_FITTING}"
                )
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise PluginError(
                "checkpoint does not fit this model: "
                + (f"missing {missing[0]} (+{len(missing) - 1} more) " if missing else "")
                + (f"unexpected {unexpected[0]} (+{len(unexpected) - 1} more) " if unexpected else "")
                + f"- was it written by another architecture? {_NOT_FITTING}"
            )
        return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)

    def prepare_for_inference_(self, cfg):
        """fairseq-generate/-interactive call this: with --print-alignment the decoder returns the
        encoder-decoder attention of alignment_layer (mean over heads) at every step."""
        super().prepare_for_inference_(cfg)
        generation = getattr(cfg, "generation", None)
        self.decoder.need_attn = bool(generation is not None and getattr(generation, "print_alignment", None))

    def num_parameters(self) -> int:
        """Distinct trainable parameters (a shared matrix counted once)."""
        return sum(p.numel() for p in {id(p): p for p in self.parameters()}.values())

    @torch.no_grad()
    def attention_weights(self, src_tokens, prev_output_tokens):
        """Per-head attention weights of every layer: a dict of (layer, B, h, T, S)-shaped
        tensors for "encoder" self-attention, "decoder" self-attention and "cross" attention."""
        self.eval()
        enc = self.encoder(src_tokens, need_weights=True)
        _, extra = self.decoder(prev_output_tokens, encoder_out=enc, need_all_weights=True)
        return {
            "encoder": torch.stack(enc["attn"]),
            "decoder": torch.stack(extra["self_attn"]),
            "cross": torch.stack(extra["cross_attn"]),
        }
