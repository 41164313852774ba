"""Our weights as Hugging Face MarianMTModel's: the same function, with the d_model dimensions of the
residual stream permuted.

Section 3.5 interleaves the sinusoids, PE(pos, 2i) = sin(pos / 10000^(2i/d_model)) and
PE(pos, 2i+1) = cos(same), and so do we (modules/embedding.py). Marian computes the same sines and
cosines but puts the sines in the first ceil(d_model/2) dimensions and the cosines after them, and
saves no position table (it rebuilds its own when loading). Reordering the d_model dimensions of
the whole residual stream with one permutation pi (Marian's dimension j is our dimension pi[j]:
0, 2, 4, ..., then 1, 3, 5, ...) leaves the model's function unchanged, provided it is applied
everywhere the stream is read or written:
- embeddings (shared, source, target) and the pre-softmax matrix: columns permuted;
- the residual side of every projection: the input columns of W^Q, W^K, W^V and W_1 (their outputs
  are per-head or d_ff dimensions, untouched), the output rows of W^O and W_2 and their biases;
- every LayerNorm's gain and bias (LayerNorm's mean and variance over d_model do not depend on the
  order of the dimensions).

Free d_k, d_v (Table 3 rows A, B): Marian's heads are d_model/h wide, both for queries/keys and
values. Narrower heads fit with zero rows (a zero query/key dimension adds 0 to q.k; a zero value
dimension gives 0 outputs that W^O's zero columns ignore), and Eq. (1)'s 1/sqrt(d_k), where Marian
divides by sqrt(d_model/h), is folded into W^Q and its bias. Wider heads do not fit: refused.

Tensor layout: weights as torch keeps them, (out_features, in_features); per-head rows of a
projection are head-major, (h, d, d_model) flattened, as Marian splits them.
"""

import math
from typing import Dict

import torch
from torch import Tensor

from attn_only_tools.guards.errors import PluginError

from ..models.transformer import TransformerConfig
from .common import pad_heads


def marian_order(d_model: int) -> Tensor:
    """pi: Marian's dimension j holds our dimension pi[j] (sines, then cosines, section 3.5's order kept
    within each)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


class MarianWeights:
    """Our state dict (post-norm, sinusoids) read into MarianMTModel's parameter names."""

    def __init__(self, sd: Dict[str, Tensor], cfg: TransformerConfig):
        self.sd, self.cfg, self.h = sd, cfg, cfg.heads
        self.D = cfg.d_model // cfg.heads  # Marian's head width
        self.d_k, self.d_v = cfg.d_k or self.D, cfg.d_v or self.D
        self.pi = marian_order(cfg.d_model)
        self.out: Dict[str, Tensor] = {}

    def get(self, name: str) -> Tensor:
        if name not in self.sd:
            raise PluginError(
                f"the checkpoint has no parameter {name}, which its own model config implies: it is "
                "partial or was edited; export the checkpoint fairseq-train wrote"
            )
        return self.sd[name].detach().float().clone()

    def norm(self, ours: str, theirs: str):
        self.out[theirs + ".weight"] = self.get(ours + ".weight")[self.pi]  # gain (d_model,)
        self.out[theirs + ".bias"] = self.get(ours + ".bias")[self.pi]

    def reads(self, w: Tensor, b: Tensor, theirs: str, d: int = 0, scale: float = 1.0):
        """A linear map that reads the stream (W^Q, W^K, W^V, W_1): input columns permuted; d > 0:
        per-head blocks of d rows zero-padded to Marian's head width."""
        w, b = w[:, self.pi] * scale, b * scale  # (out, d_model)
        if d:
            w, b = pad_heads(w, self.h, d, self.D, 0), pad_heads(b, self.h, d, self.D, 0)
        self.out[theirs + ".weight"], self.out[theirs + ".bias"] = w, b

    def writes(self, ours: str, theirs: str, d_v: int = 0):
        """A linear map that writes the stream (W^O, W_2): output rows and bias permuted; d_v > 0:
        W^O's per-head input columns zero-padded to Marian's head width."""
        w = self.get(ours + ".weight")[self.pi]  # (d_model, in)
        self.out[theirs + ".weight"] = pad_heads(w, self.h, d_v, self.D, 1) if d_v else w
        self.out[theirs + ".bias"] = self.get(ours + ".bias")[self.pi]

    def attention(self, ours: str, theirs: str, fused_qkv: bool):
        """Section 3.2.2: our fused [W^Q | W^K | W^V] (or W^Q and [W^K | W^V]) as q/k/v_proj, W^O as out_proj."""
        h, d_k, d_v = self.h, self.d_k, self.d_v
        if fused_qkv:
            ws = self.get(ours + ".qkv.weight").split([h * d_k, h * d_k, h * d_v])
            bs = self.get(ours + ".qkv.bias").split([h * d_k, h * d_k, h * d_v])
        else:
            ws = (self.get(ours + ".q.weight"), *self.get(ours + ".kv.weight").split([h * d_k, h * d_v]))
            bs = (self.get(ours + ".q.bias"), *self.get(ours + ".kv.bias").split([h * d_k, h * d_v]))
        q_scale = math.sqrt(self.D / d_k)  # Marian divides q.k by sqrt(D), Eq. (1) by sqrt(d_k)
        parts = zip(("q_proj", "k_proj", "v_proj"), ws, bs, (d_k, d_k, d_v), (q_scale, 1.0, 1.0), strict=True)
        for name, w, b, d, scale in parts:
            self.reads(w, b, f"{theirs}.{name}", d, scale)
        self.writes(ours + ".out", theirs + ".out_proj", d_v)

    def ffn(self, ours: str, theirs: str):
        """Eq. (2): W_1, b_1 as fc1, W_2, b_2 as fc2."""
        self.reads(self.get(ours + ".ffn.w1.weight"), self.get(ours + ".ffn.w1.bias"), theirs + ".fc1")
        self.writes(ours + ".ffn.w2", theirs + ".fc2")


def marian_state_dict(sd: Dict[str, Tensor], cfg: TransformerConfig) -> Dict[str, Tensor]:
    """MarianMTModel's state dict (float32) for our post-norm, sinusoidal model; shared tables once,
    under the name Marian ties the others to."""
    w = MarianWeights(sd, cfg)
    for i in range(cfg.encoder_layers):
        ours, theirs = f"encoder.layers.{i}", f"model.encoder.layers.{i}"
        w.attention(ours + ".self_attn", theirs + ".self_attn", fused_qkv=True)
        w.norm(ours + ".sub_attn.norm", theirs + ".self_attn_layer_norm")
        w.ffn(ours, theirs)
        w.norm(ours + ".sub_ffn.norm", theirs + ".final_layer_norm")
    for i in range(cfg.decoder_layers):
        ours, theirs = f"decoder.layers.{i}", f"model.decoder.layers.{i}"
        w.attention(ours + ".self_attn", theirs + ".self_attn", fused_qkv=True)
        w.norm(ours + ".sub_self.norm", theirs + ".self_attn_layer_norm")
        w.attention(ours + ".cross_attn", theirs + ".encoder_attn", fused_qkv=False)
        w.norm(ours + ".sub_cross.norm", theirs + ".encoder_attn_layer_norm")
        w.ffn(ours, theirs)
        w.norm(ours + ".sub_ffn.norm", theirs + ".final_layer_norm")
    table = lambda name: w.get(name)[:, w.pi]  # noqa: E731  (|V|, d_model), columns permuted
    if cfg.embedding_sharing == "all":  # section 3.4: one matrix for source, target and pre-softmax
        w.out["model.shared.weight"] = table("encoder.embed.tokens.weight")
    else:
        w.out["model.encoder.embed_tokens.weight"] = table("encoder.embed.tokens.weight")
        w.out["model.decoder.embed_tokens.weight"] = table("decoder.embed.tokens.weight")
    if cfg.embedding_sharing == "none":
        w.out["lm_head.weight"] = table("decoder.output_weight")
    w.out["final_logits_bias"] = torch.zeros(1, w.get("decoder.embed.tokens.weight").size(0))  # section 3.4: no bias
    return w.out
