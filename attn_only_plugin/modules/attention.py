"""Scaled dot-product and multi-head attention, section 3.2 of Vaswani et al. (2017).

Tensor layout in this file: batch first. x is (B, T, d_model) for queries and (B, S, d_model)
for keys/values (the encoder memory in encoder-decoder attention); heads are split as
(B, h, T, d_k). Masks are boolean with True = "may attend".
"""
import math
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .cache import append_to_cache, own_weights
from .dropout import retain_at_inference
from .packing import Packing, packed, padded
from .relative import RelativePositions
from .window import banded_attention, position_mask, query_key_positions, use_banded


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor] = None, causal: bool = False,
    dropout_p: float = 0.0, need_weights: bool = False,
) -> Tuple[Tensor, Optional[Tensor]]:
    """Eq. (1), section 3.2.1: Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.

    q: (B, h, T, d_k), k: (B, h, S, d_k), v: (B, h, S, d_v); mask broadcastable to (B, h, T, S),
    boolean or additive (0 = may attend, -inf = not; decoding steps, cache.additive).
    The normal path is torch's fused kernel, which never materialises the weights; with
    need_weights=True the same maths is written out so that the (B, h, T, S) weights can be
    returned (attention plots, alignments). Both give the same output.
    """
    if causal:  # decoder self-attention: position t sees positions <= t (section 3.2.3)
        T, S = q.size(-2), k.size(-2)
        tril = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)  # (T, S)
        mask = tril if mask is None else mask & tril
    if not need_weights:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p), None
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, h, T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    weights = scores.softmax(dim=-1)  # (B, h, T, S)
    return F.dropout(weights, dropout_p) @ v, weights  # (B, h, T, d_v)


class MultiHeadAttention(nn.Module):
    """Multi-head attention, section 3.2.2.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,  head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).
    d_k and d_v are free (Table 3 rows A and B vary them apart from d_model / h). The h per-head
    projections are one matrix each for Q, K and V; in self-attention they are fused into one
    (d_model -> h(2 d_k + d_v)) matmul, in encoder-decoder attention K and V are fused and computed
    once per sentence when decoding incrementally. Projections carry biases (the paper's equations
    have none; fairseq's transformer has them, and the weight converter needs them).

    Initialisation (the paper does not give one; fairseq's transformer, with which ours learns
    alike, docs/quality.md): each of W^Q, W^K, W^V, a (d_model, h d_k) block even where fused,
    Xavier-uniform with gain 1/sqrt(2); their biases nn.Linear's default, uniform in
    +-1/sqrt(d_model); W^O Xavier-uniform, its bias 0.

    Self-attention only, beyond the paper: `window` R restricts it to a neighbourhood (Table 1's
    fourth row, window.py) and `relative` K adds Shaw et al. (2018)'s relative position
    representations (relative.py).
    """

    def __init__(self, d_model: int, h: int, d_k: int, d_v: int, dropout: float = 0.0,
                 self_attention: bool = True, cache_key: str = "attn", window: Optional[int] = None,
                 relative: Optional[int] = None):
        super().__init__()
        self.h, self.d_k, self.d_v, self.dropout = h, d_k, d_v, dropout
        self.apply_during_inference = False  # --retain-dropout (dropout.py)
        self.self_attention, self.cache_key, self.window = self_attention, cache_key, window
        self.relative = RelativePositions(relative, d_k, d_v) if relative else None
        if self_attention:
            self.qkv = nn.Linear(d_model, h * (2 * d_k + d_v))  # [W^Q | W^K | W^V]
        else:
            self.q = nn.Linear(d_model, h * d_k)  # W^Q
            self.kv = nn.Linear(d_model, h * (d_k + d_v))  # [W^K | W^V]
        self.out = nn.Linear(h * d_v, d_model)  # W^O
        blocks = ([(self.qkv, [h * d_k, h * d_k, h * d_v])] if self_attention
                  else [(self.q, [h * d_k]), (self.kv, [h * d_k, h * d_v])])
        for lin, sizes in blocks:  # each of W^Q, W^K, W^V on its own; biases as nn.Linear has them
            for block in lin.weight.data.split(sizes, dim=0):  # (h d_k or h d_v, d_model)
                nn.init.xavier_uniform_(block, gain=2 ** -0.5)
        nn.init.xavier_uniform_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def make_generation_fast_(self, name: str, retain_dropout: bool = False, retain_dropout_modules=None, **unused):
        retain_at_inference(self, name, retain_dropout, retain_dropout_modules)

    def _split_heads(self, x: Tensor, d: int) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.h, d).transpose(1, 2)  # (B, h, T, d)

    def _project_kv(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        k, v = self.kv(x).split([self.h * self.d_k, self.h * self.d_v], dim=-1)
        return self._split_heads(k, self.d_k), self._split_heads(v, self.d_v)  # (B, h, S, d_k/d_v)

    def forward(self, x: Tensor, memory: Optional[Tensor] = None, key_mask: Optional[Tensor] = None,
                causal: bool = False, cache: Optional[Dict[str, Optional[Tensor]]] = None,
                need_weights: bool = False, packing: Optional[Packing] = None,
                history: Optional[Tensor] = None) -> Tuple[Tensor, Optional[Tensor]]:
        """x: (B, T, d_model) queries; memory: (B_s, S, d_model) for encoder-decoder attention, else
        None (self-attention); key_mask: (B_s, S) True = real token (or additive, 0 / -inf);
        cache: incremental decoding state, filled in place (self-attention: keys/values grow by T;
        encoder-decoder: computed once); packing: x holds only the real rows (N, d_model) of the
        (B, T) queries (training, see packing.py), and so does the output. Returns (B, T, d_model)
        and, if need_weights, (B, h, T, S) weights.

        B_s = B except in beam search, where B = g B_s: each memory row serves g consecutive
        hypotheses (a sentence's beam, see models/encoder_decoder.py), whose queries then go
        through one attention call against that row's keys and values. history (B_s, 1, g, E):
        the self-attention cache is shared by each beam too (cache.py); T = 1 and True marks the
        entries on each hypothesis's path."""
        kk, vk = self.cache_key + ".k", self.cache_key + ".v"
        mask = None if key_mask is None else key_mask[:, None, None, :]  # (B_s, 1, 1, S)
        if self.self_attention:
            qkv = padded(self.qkv(x), packing)  # (B, T, h (2 d_k + d_v))
            q, k, v = qkv.split([self.h * self.d_k, self.h * self.d_k, self.h * self.d_v], -1)
            if history is None:
                k, v = self._split_heads(k, self.d_k), self._split_heads(v, self.d_v)  # (B, h, T, d_k/d_v)
            else:  # T = 1: this step's entries of each beam side by side (cache.py), views of qkv
                g = history.size(2)
                k, v = (z.reshape(-1, g, self.h, z.size(-1) // self.h).transpose(1, 2) for z in (k, v))  # (B_s, h, g, d)
                mask = history
            if cache is not None:  # a window keeps its last R + 1 steps: (B, h, S_past + T, d) at most
                keep = None if self.window is None else (self.window + 1) * k.size(2)
                k, v = append_to_cache(cache.get(kk), k, keep), append_to_cache(cache.get(vk), v, keep)
                cache[kk], cache[vk] = k, v
        else:
            q = padded(self.q(x), packing)  # (B, T, h d_k)
            if cache is not None and cache.get(kk) is not None:
                k, v = cache[kk], cache[vk]  # projected once per sentence
            else:
                k, v = self._project_kv(memory)
                if cache is not None:
                    cache[kk], cache[vk] = k, v
        B, T, _ = q.shape
        g = B // k.size(0)  # queries' rows per key row: 1, or the beam sharing a sentence's memory
        q = q.view(B // g, g * T, self.h, self.d_k).transpose(1, 2)  # (B_s, h, g T, d_k)
        p = self.dropout if self.training or self.apply_during_inference else 0.0
        if self.window is None and self.relative is None:
            y, w = scaled_dot_product_attention(q, k, v, mask, causal, p, need_weights)  # (B_s, h, g T, d_v)
        else:
            y, w = self._positional_attention(q, k, v, mask, causal, p, need_weights, history, cache is not None)
        y = y.transpose(1, 2).reshape(B, T, self.h * self.d_v)  # (B, T, h d_v): Concat(head_i)
        if w is not None and g > 1:
            w = w.view(B // g, self.h, g, T, -1).transpose(1, 2).reshape(B, self.h, T, -1)  # (B, h, T, S)
            w = w if history is None else own_weights(w, history)  # (B, h, 1, t + 1)
        return self.out(packed(y, packing)), w

    def _positional_attention(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], causal: bool,
                              p: float, need_weights: bool, history: Optional[Tensor], cached: bool):
        """Self-attention that depends on where queries and keys sit: a window (window.py) and/or
        relative positions (relative.py). Without a cache (causal or encoder) the window becomes
        a mask, or on long inputs the banded computation; a decoding step's cache holds only the
        window already (append_to_cache's keep)."""
        if self.relative is None and not cached and not need_weights and use_banded(k.size(2), self.window):
            key_mask = None if mask is None else mask[:, 0, 0, :]  # (B, S)
            return banded_attention(q, k, v, self.window, causal, key_mask, p), None  # (B, h, T, d_v)
        q_pos, k_pos = query_key_positions(q.size(2), k.size(2), 1 if history is None else history.size(2), q.device)
        if history is None:  # else mask is the beam's additive history mask, within the window already
            mask = position_mask(mask, q_pos, k_pos, self.window, causal)  # (T, S) or (B, 1, T, S)
        if self.relative is not None:
            return self.relative(q, k, v, q_pos, k_pos, mask, p, need_weights)  # (B_s, h, g T, d_v)
        return scaled_dot_product_attention(q, k, v, mask, False, p, need_weights)
