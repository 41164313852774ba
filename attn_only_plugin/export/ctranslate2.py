"""Exact export of our Transformer (section 3 of Vaswani et al. 2017) to CTranslate2's TransformerSpec.

CTranslate2's spec expresses the model as it is, so the export computes the same function:
- embeddings x sqrt(d_model) (section 3.4, `scale_embeddings`), one matrix stored once when shared
  (the spec aliases equal variables); the pre-softmax matrix is the decoder's `projection`;
- the position table (section 3.5's interleaved sinusoids, or the learned table of Table 3 row E)
  goes in as `PositionEncoderSpec.encodings`, added at position 0 for the first token on both sides,
  as ours. Left unset, CTranslate2 would generate another function ([sin | cos]): always set;
- post-norm (the paper's LayerNorm(x + Sublayer(x))) or pre-norm with its final LayerNorm, eps 1e-5
  (torch's, which modules/layers.py keeps); ReLU FFN (Eq. 2);
- self-attention as one fused [W^Q | W^K | W^V] linear (our `qkv`), encoder-decoder attention as
  W^Q then fused [W^K | W^V] (our `q`, `kv`), then W^O;
- free d_k, d_v (Table 3 rows A, B): the spec has one head size, D = max(d_k, d_v). The narrower
  per-head projections get zero rows (a zero query/key dimension adds 0 to q.k, a zero value
  dimension gives a 0 output that W^O's zero columns ignore) and the query scale stays 1/sqrt(d_k)
  (`queries_scale`), so the function is unchanged;
- Shaw et al. (2018)'s relative positions (`--relative-positions K`, our modules/relative.py) as the
  spec's `relative_position_keys` / `_values` (2K + 1 rows, shared by the heads, padded to D like
  the heads); CTranslate2 then adds no position table, so a model must have been trained with
  `--no-absolute-positions` to export with them. Restricted self-attention (`--attention-window`)
  has no equivalent in CTranslate2's encoder-decoder spec and is refused;
- fairseq's decoding conventions: the source ends with </s> (`add_source_eos`), the decoder starts
  from </s> (`decoder_start_token`), vocabularies are the dict.*.txt dictionaries in fairseq's
  order (specials first, madeupword padding entries included).

Tensor layout: weights as torch keeps them, (out_features, in_features); per-head rows of a
projection are head-major, (h, d, d_model) flattened.
"""

import json
import math
from pathlib import Path
from typing import Dict, Optional

import numpy as np
import torch
from ctranslate2.converters import Converter
from ctranslate2.specs import transformer_spec
from torch import Tensor

from attn_only_tools.guards.errors import PluginError

from ..models.transformer import TransformerConfig
from ..modules.embedding import sinusoid_table
from . import INFO_FILE, QUANTIZATIONS
from .common import (  # noqa: F401  (still importable from here)
    MODEL_NAME,
    check_dictionaries,
    model_config,
    new_out,
    read_checkpoint,
    read_dictionaries,
    write_folder,
)
from .common import pad_heads as _pad_heads

LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, kept by modules/layers.py


class _Weights:
    """Our state dict read into spec variables (numpy float32), with the head geometry."""

    def __init__(self, sd: Dict[str, Tensor], cfg: TransformerConfig):
        self.sd, self.h = sd, cfg.heads
        self.d_k = cfg.d_k or cfg.d_model // cfg.heads
        self.d_v = cfg.d_v or cfg.d_model // cfg.heads
        self.D = max(self.d_k, self.d_v)  # CTranslate2's head_dim

    def get(self, name: str) -> Tensor:
        if name not in self.sd:
            raise PluginError(
                f"the checkpoint has no parameter {name}, which its own model config implies: it is "
                "partial or was edited; export the checkpoint fairseq-train wrote"
            )
        return self.sd[name].detach().float()

    def numpy(self, t: Tensor) -> np.ndarray:
        """A copy: the spec's optimize() rewrites its arrays in place (int8 quantization), which
        must never reach the weights of a model still in use."""
        return np.array(t.numpy(), dtype=np.float32, order="C", copy=True)

    def linear(self, spec, prefix: str):
        spec.weight, spec.bias = self.numpy(self.get(prefix + ".weight")), self.numpy(self.get(prefix + ".bias"))

    def norm(self, spec, prefix: str):
        spec.gamma, spec.beta = self.numpy(self.get(prefix + ".weight")), self.numpy(self.get(prefix + ".bias"))

    def projections(self, spec, prefix: str, sizes):
        """A fused linear whose blocks (Q, K, V as `sizes` names them, each h d rows) are padded to D."""
        for p in ("weight", "bias"):
            blocks = self.get(f"{prefix}.{p}").split([self.h * d for d in sizes], dim=0)
            padded = [_pad_heads(b, self.h, d, self.D) for b, d in zip(blocks, sizes, strict=True)]
            setattr(spec, p, self.numpy(torch.cat(padded, dim=0)))  # (h D per block, d_model)

    def attention(self, spec, prefix: str, self_attention: bool):
        """Section 3.2.2 into MultiHeadAttentionSpec: linear = [QKV, out] or [Q, KV, out]."""
        if self_attention:
            self.projections(spec.linear[0], prefix + ".qkv", [self.d_k, self.d_k, self.d_v])
        else:
            self.projections(spec.linear[0], prefix + ".q", [self.d_k])
            self.projections(spec.linear[1], prefix + ".kv", [self.d_k, self.d_v])
        out = spec.linear[-1]
        out.weight = self.numpy(_pad_heads(self.get(prefix + ".out.weight"), self.h, self.d_v, self.D, dim=1))
        out.bias = self.numpy(self.get(prefix + ".out.bias"))
        if self.D != self.d_k:  # Eq. (1)'s 1 / sqrt(d_k), not 1 / sqrt(D)
            spec.queries_scale = np.float32(1.0 / math.sqrt(self.d_k))
        if hasattr(spec, "relative_position_keys"):  # Shaw et al. (2018) Eq. (3)-(4): (2K + 1, D) each
            a_k, a_v = self.get(prefix + ".relative.a_k"), self.get(prefix + ".relative.a_v")  # (2K + 1, d_k/d_v)
            spec.relative_position_keys = self.numpy(_pad_heads(a_k, 1, self.d_k, self.D, dim=1))
            spec.relative_position_values = self.numpy(_pad_heads(a_v, 1, self.d_v, self.D, dim=1))


def _positions(w: _Weights, cfg: TransformerConfig, side: str, n: int) -> np.ndarray:
    if cfg.learned_pos:
        return w.numpy(w.get(f"{side}.embed.positions.weight"))  # (P, d_model), position 0 first
    return w.numpy(sinusoid_table(n, cfg.d_model))  # (P, d_model), section 3.5 interleaved


def check_expressible(cfg: TransformerConfig) -> None:
    """Refuse, in one line, the options CTranslate2's TransformerSpec cannot compute exactly."""
    if cfg.attention_window is not None:
        raise PluginError(
            f"--attention-window {cfg.attention_window} (restricted self-attention) has no equivalent in "
            "CTranslate2's encoder-decoder model: translate this model with fairseq-generate"
        )
    if cfg.relative_positions is not None and not cfg.no_absolute_positions:
        raise PluginError(
            f"--relative-positions {cfg.relative_positions} with the sinusoids: CTranslate2 uses "
            "relative positions only without a position table; export a model trained with "
            "--no-absolute-positions, or translate this one with fairseq-generate"
        )
    if cfg.no_absolute_positions and cfg.relative_positions is None:
        raise PluginError(
            "--no-absolute-positions without --relative-positions: CTranslate2 always adds positions "
            "unless relative ones replace them; translate this model with fairseq-generate"
        )


def build_spec(cfg: TransformerConfig, sd: Dict[str, Tensor], src_dict, tgt_dict):
    """The TransformerSpec of our model (config, state dict, fairseq dictionaries)."""
    check_expressible(cfg)
    w = _Weights(sd, cfg)
    check_dictionaries(sd, src_dict, tgt_dict)
    head_dim = None if w.D * cfg.heads == cfg.d_model else w.D
    relative = cfg.relative_positions is not None  # then the spec has no position table
    encoder = transformer_spec.TransformerEncoderSpec(
        cfg.encoder_layers, cfg.heads, pre_norm=cfg.pre_norm, head_dim=head_dim, relative_position=relative
    )
    decoder = transformer_spec.TransformerDecoderSpec(
        cfg.decoder_layers, cfg.heads, pre_norm=cfg.pre_norm, head_dim=head_dim, relative_position=relative
    )
    for spec, side, n in (
        (encoder, "encoder", cfg.max_source_positions),
        (decoder, "decoder", cfg.max_target_positions),
    ):
        emb = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
        emb.weight = w.numpy(w.get(f"{side}.embed.tokens.weight"))
        spec.scale_embeddings = True  # x sqrt(d_model), section 3.4
        if not relative:
            spec.position_encodings.encodings = _positions(w, cfg, side, n)
        if cfg.pre_norm:
            w.norm(spec.layer_norm, f"{side}.final_norm")
    for i, layer in enumerate(encoder.layer):
        pre = f"encoder.layers.{i}"
        w.attention(layer.self_attention, pre + ".self_attn", self_attention=True)
        w.norm(layer.self_attention.layer_norm, pre + ".sub_attn.norm")
        _ffn(w, layer.ffn, pre)
    for i, layer in enumerate(decoder.layer):
        pre = f"decoder.layers.{i}"
        w.attention(layer.self_attention, pre + ".self_attn", self_attention=True)
        w.norm(layer.self_attention.layer_norm, pre + ".sub_self.norm")
        w.attention(layer.attention, pre + ".cross_attn", self_attention=False)
        w.norm(layer.attention.layer_norm, pre + ".sub_cross.norm")
        _ffn(w, layer.ffn, pre)
    decoder.projection.weight = w.numpy(w.get("decoder.output_weight"))  # (|V|, d_model), no bias (section 3.4)
    spec = transformer_spec.TransformerSpec(encoder, decoder)
    spec.register_source_vocabulary(list(src_dict.symbols))
    spec.register_target_vocabulary(list(tgt_dict.symbols))
    spec.config.decoder_start_token = tgt_dict.eos_word  # fairseq's decoder input starts with </s>
    spec.config.add_source_eos = True  # fairseq's source ends with </s>
    spec.config.layer_norm_epsilon = LAYER_NORM_EPS
    return spec


def _ffn(w: _Weights, spec, prefix: str):
    w.linear(spec.linear_0, prefix + ".ffn.w1")  # W_1, b_1 (Eq. 2)
    w.linear(spec.linear_1, prefix + ".ffn.w2")  # W_2, b_2
    w.norm(spec.layer_norm, prefix + ".sub_ffn.norm")


class AttnOnlyConverter(Converter):
    """ctranslate2 Converter for a checkpoint of ours and its data directory (dict.*.txt)."""

    def __init__(self, checkpoint, data):
        self.checkpoint, self.data = Path(checkpoint), Path(data)

    def _load(self):
        read = read_checkpoint(self.checkpoint, self.data)  # export/common.py: each problem refused in one line
        self.cfg = read.cfg
        return build_spec(read.cfg, read.weights, read.src_dict, read.tgt_dict)


def model_info(cfg: TransformerConfig, quantization: Optional[str] = None) -> dict:
    """INFO_FILE's content: the longest source and target the position tables hold."""
    return {
        "model": MODEL_NAME,
        "max_source_positions": cfg.max_source_positions,
        "max_target_positions": cfg.max_target_positions,
        "quantization": quantization or "float32",
    }


def save_spec(spec, out, quantization: Optional[str] = None, force: bool = False, info: Optional[dict] = None) -> Path:
    """Write a spec (and `info` as INFO_FILE) to folder `out` atomically: into a temporary folder
    beside it, renamed when complete; an existing `out` is refused unless force (then replaced only
    once the new one is written)."""
    new_out(out, force)
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise PluginError(f"quantization {quantization!r} is not one of CTranslate2's: {', '.join(QUANTIZATIONS)}")
    spec.validate()
    spec.optimize(quantization=quantization)

    def fill(tmp: Path):
        spec.save(str(tmp))
        if info is not None:
            (tmp / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")

    return write_folder(out, force, fill)


def export(checkpoint, data, out, quantization: Optional[str] = None, force: bool = False) -> Path:
    """Export checkpoint (with the dictionaries in data) to a CTranslate2 model folder `out`."""
    out = new_out(out, force, [checkpoint, data])  # before the (slow) load
    converter = AttnOnlyConverter(checkpoint, data)
    spec = converter._load()
    return save_spec(spec, out, quantization, force, model_info(converter.cfg, quantization))
