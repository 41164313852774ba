"""Scaled dot-product and multi-head attention, section 3.2 of Vaswani et al. (2017).

Tensor layout in this file: batch first. x is (B, T, d_model) for queries and (B, S, d_model)
for keys/values (the encoder memory in encoder-decoder attention); heads are split as
(B, h, T, d_k). Masks are boolean with True = "may attend", or additive (0 / -inf) in a
decoding step (cache.additive).
"""

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import varlen
from .decoding_state import DecodingState
from .dropout import retain_at_inference
from .kernels import fused_attention
from .packing import Packing, packed, padded
from .relative import RelativePositions
from .window import banded_attention, position_mask, query_key_positions, use_banded


def split_heads(x: Tensor, h: int, rows: Optional[int] = None) -> Tensor:
    """(B, T, h d) -> (B, h, T, d): the h heads of section 3.2.2 side by side. With rows = B_s < B
    (beam search's encoder-decoder attention: g = B / B_s consecutive hypotheses share a memory
    row, decoding_state.py) the g hypotheses' queries go side by side too: (B_s, h, g T, d), a
    view either way."""
    B, T, _ = x.shape
    rows = B if rows is None else rows
    return x.view(rows, B // rows * T, h, -1).transpose(1, 2)  # (B_s, h, g T, d); g = 1: (B, h, T, d)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Optional[Tensor] = None,
    causal: bool = False,
    dropout_p: float = 0.0,
    need_weights: bool = False,
) -> Tuple[Tensor, Optional[Tensor]]:
    """Eq. (1), section 3.2.1: Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.

    q: (B, h, T, d_k), k: (B, h, S, d_k), v: (B, h, S, d_v); mask broadcastable to (B, h, T, S),
    boolean or additive (0 = may attend, -inf = not; decoding steps, cache.additive).
    The normal path is torch's fused kernel (on a GPU, which one: kernels.py), which never
    materialises the weights; with need_weights=True the same maths is written out so that the
    (B, h, T, S) weights can be returned (attention plots, alignments). Both give the same output.
    """
    if causal:  # decoder self-attention: position t sees positions <= t (section 3.2.3)
        T, S = q.size(-2), k.size(-2)
        tril = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)  # (T, S)
        mask = tril if mask is None else mask & tril
    if not need_weights:
        return fused_attention(q, k, v, mask, dropout_p), None  # torch's fused kernel (kernels.py)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, h, T, S): Q K^T / sqrt(d_k)
    if mask is not None:  # + mask: -inf where a key may not be seen
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    weights = scores.softmax(dim=-1)  # (B, h, T, S)
    return F.dropout(weights, dropout_p) @ v, weights  # (B, h, T, d_v): dropout (section 5.4), weighted sum of V


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

    def __init__(
        self,
        d_model: int,
        h: int,
        d_k: int,
        d_v: int,
        dropout: float = 0.0,
        self_attention: bool = True,
        cache_key: str = "attn",
        window: Optional[int] = None,
        relative: Optional[int] = None,
    ):
        super().__init__()
        self.h, self.d_k, self.d_v, self.dropout = h, d_k, d_v, dropout
        self.apply_during_inference = False  # --retain-dropout (dropout.py)
        self.self_attention, self.cache_key, self.window = self_attention, cache_key, window
        self.widths = [h * d_k, h * d_k, h * d_v]  # of x W^Q, x W^K, x W^V in the fused projection; [1:] of kv's
        self.relative = RelativePositions(relative, d_k, d_v) if relative else None
        if self_attention:
            self.qkv = nn.Linear(d_model, h * (2 * d_k + d_v))  # [W^Q | W^K | W^V]
        else:
            self.q = nn.Linear(d_model, h * d_k)  # W^Q
            self.kv = nn.Linear(d_model, h * (d_k + d_v))  # [W^K | W^V]
        self.out = nn.Linear(h * d_v, d_model)  # W^O
        blocks = (
            [(self.qkv, [h * d_k, h * d_k, h * d_v])]
            if self_attention
            else [(self.q, [h * d_k]), (self.kv, [h * d_k, h * d_v])]
        )
        for lin, sizes in blocks:  # each of W^Q, W^K, W^V on its own; biases as nn.Linear has them
            for block in lin.weight.data.split(sizes, dim=0):  # (h d_k or h d_v, d_model)
                nn.init.xavier_uniform_(block, gain=2**-0.5)
        nn.init.xavier_uniform_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def make_generation_fast_(self, name: str, retain_dropout: bool = False, retain_dropout_modules=None, **unused):
        retain_at_inference(self, name, retain_dropout, retain_dropout_modules)

    def project_memory(self, memory: Tensor) -> Tuple[Tensor, Tensor]:
        """Encoder-decoder attention's K W^K and V W^V from the memory (B_s, S, d_model):
        (B_s, h, S, d_k) and (B_s, h, S, d_v)."""
        k, v = self.memory_projections(memory)  # (B_s, S, h d_k), (B_s, S, h d_v)
        return split_heads(k, self.h), split_heads(v, self.h)

    def memory_projections(self, memory: Tensor) -> Tuple[Tensor, Tensor]:
        """K W^K and V W^V of memory rows (..., d_model), heads side by side: (..., h d_k), (..., h d_v)."""
        return self.kv(memory).split(self.widths[1:], dim=-1)

    def forward(
        self,
        x: Tensor,
        memory: Optional[Tensor] = None,
        key_mask: Optional[Tensor] = None,
        causal: bool = False,
        state: Optional[DecodingState] = None,
        need_weights: bool = False,
        packing: Optional[Packing] = None,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """Eq. (2). x: (B, T, d_model) queries; memory: (B_s, S, d_model) for encoder-decoder
        attention, None for self-attention; key_mask: (B_s, S) True = real token (or additive,
        0 / -inf). Returns (B, T, d_model) and, if need_weights, the (B, h, T, S) weights.

        Hooks beside the maths, each one named call: packing (training, packing.py): x and the
        output are the real rows (N, d_model) of the (B, T) queries; state (incremental decoding,
        decoding_state.py): x holds the new positions only, and the keys and values of earlier
        steps (self-attention) or of the memory (projected once) come from it. B_s = B except in
        beam search's encoder-decoder attention, where B = g B_s: g consecutive hypotheses share
        a memory row, and their queries go through one attention call against it (split_heads' rows).
        With --varlen-attention, packed training attends on the packed rows (varlen.py)."""
        if self.attends_packed(x, memory, packing, need_weights):
            return self.packed_forward(x, memory, packing, causal), None  # the same Eq. (2), speed path
        q, k, v = self.project(x, memory, state, packing)  # (B, T, h d_k), (B_s, h, S, d_k), (B_s, h, S, d_v)
        mask = None if key_mask is None else key_mask[:, None, None, :]  # (B_s, 1, 1, S) True = may attend
        B = q.size(0)
        q = split_heads(q, self.h, rows=k.size(0))  # (B, h, T, d_k); a beam's g hypotheses: (B_s, h, g T, d_k)
        y, weights = self.attention(q, k, v, mask, causal, need_weights)  # Eq. (1) per head: (B_s, h, g T, d_v)
        y = y.transpose(1, 2).reshape(B, -1, self.h * self.d_v)  # (B, T, h d_v): Concat(head_1, ..., head_h)
        return self.out(packed(y, packing)), self.hypothesis_weights(weights, B)  # Concat(...) W^O

    def project(
        self, x: Tensor, memory: Optional[Tensor], state: Optional[DecodingState], packing: Optional[Packing]
    ) -> Tuple[Tensor, Tensor, Tensor]:
        """Q W^Q, K W^K, V W^V: queries (B, T, h d_k) from x; keys (B, h, S, d_k) and values
        (B, h, S, d_v) from x in self-attention (with the earlier steps' from the decoding state),
        or (B_s, h, S, d) from the memory in encoder-decoder attention (section 3.2.3)."""
        if not self.self_attention:
            q = padded(self.q(x), packing)  # x W^Q: (B, T, h d_k)
            if state is None:
                return (q, *self.project_memory(memory))
            return (q, *state.memory(self.cache_key, lambda: self.project_memory(memory)))  # projected once
        q, k, v = padded(self.qkv(x), packing).split(self.widths, dim=-1)  # x W^Q, x W^K, x W^V: (B, T, h d)
        k, v = split_heads(k, self.h), split_heads(v, self.h)  # (B, h, T, d_k), (B, h, T, d_v)
        if state is not None:  # and the keys and values of the earlier steps
            k, v = state.self_attention(self.cache_key, k, v, self.window)  # (B, h, S, d_k), (B, h, S, d_v)
        return q, k, v

    def attention(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], causal: bool, need_weights: bool
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """Eq. (1) on every head, dropout on the weights (section 5.4); in self-attention with a
        window (window.py) or relative positions (relative.py), their form of it."""
        p = self.weight_dropout()
        if self.window is None and self.relative is None:
            return scaled_dot_product_attention(q, k, v, mask, causal, p, need_weights)
        return self._positional_attention(q, k, v, mask, causal, p, need_weights)

    def weight_dropout(self) -> float:
        """Dropout on the attention weights now: in training, or kept at inference (--retain-dropout)."""
        return self.dropout if self.training or self.apply_during_inference else 0.0

    def attends_packed(self, x: Tensor, memory: Optional[Tensor], packing: Optional[Packing], need_weights: bool):
        """Whether this call takes the packed path (varlen.py's rules): its queries' and keys' Packings
        ask for it, full attention without weights, no dropout on them, a kernel for x's device."""
        keys = None if packing is None else self.key_packing(packing)
        plain = self.window is None and self.relative is None and not need_weights
        return varlen.applies(x, packing, keys, self.d_k, self.d_v, self.weight_dropout(), plain)

    def key_packing(self, packing: Packing) -> Optional[Packing]:
        """The keys' Packing: the queries' own in self-attention, the memory's in encoder-decoder attention."""
        return packing if self.self_attention else packing.memory

    def packed_forward(self, x: Tensor, memory: Optional[Tensor], packing: Packing, causal: bool) -> Tensor:
        """Eq. (2) on packed rows (varlen.py): x (N, d_model) -> (N, d_model); in encoder-decoder
        attention the memory (B, S, d_model) packed by its Packing first (N_s, d_model)."""
        keys = self.key_packing(packing)
        if self.self_attention:
            q, k, v = self.qkv(x).split(self.widths, dim=-1)  # x W^Q, x W^K, x W^V: (N, h d)
        else:
            q = self.q(x)  # x W^Q: (N, h d_k)
            k, v = self.memory_projections(keys.pack(memory))  # (N_s, h d_k), (N_s, h d_v)
        q, k, v = (t.unflatten(-1, (self.h, -1)) for t in (q, k, v))  # (N, h, d_k), (N_s, h, d_k), (N_s, h, d_v)
        y = varlen.packed_attention(q, k, v, packing, keys, causal)  # Eq. (1) per sentence and head: (N, h, d_v)
        return self.out(y.flatten(1))  # (N, h d_v) Concat(head_1, ..., head_h) W^O: (N, d_model)

    def hypothesis_weights(self, w: Optional[Tensor], B: int) -> Optional[Tensor]:
        """Encoder-decoder weights (B_s, h, g T, S) of g hypotheses side by side as (B, h, T, S)."""
        if w is None or w.size(0) == B:
            return w
        B_s, h, _, S = w.shape
        return w.view(B_s, h, B // B_s, -1, S).transpose(1, 2).reshape(B, h, -1, S)  # (B, h, T, S)

    def _positional_attention(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], causal: bool, p: float, need_weights: bool
    ):
        """Self-attention that depends on where queries and keys sit: a window (window.py) and/or
        relative positions (relative.py). Without a cache (T = S: causal or encoder) the window
        becomes a mask, or on long inputs the banded computation; a decoding step's cache holds only
        the window already (append_to_cache's keep), and its queries are its last T positions."""
        T, S = q.size(2), k.size(2)
        if self.relative is None and T == S and not need_weights and use_banded(S, self.window):
            key_mask = None if mask is None else mask[:, 0, 0, :]  # (B, S)
            return banded_attention(q, k, v, self.window, causal, key_mask, p), None  # (B, h, T, d_v)
        q_pos, k_pos = query_key_positions(T, S, q.device)  # (T,), (S,)
        mask = position_mask(mask, q_pos, k_pos, self.window, causal)  # (T, S) or (B, 1, T, S)
        if self.relative is not None:
            return self.relative(q, k, v, q_pos, k_pos, mask, p, need_weights)  # (B, h, T, d_v)
        return scaled_dot_product_attention(q, k, v, mask, False, p, need_weights)
