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

from .packing import Packing, packed, padded


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor] = None, causal: bool = False,
    dropout_p: float = 0.0, need_weights: bool = False,
) -> Tuple[Tensor, Optional[Tensor]]:
    """Eq. (1), section 3.2.1: Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.

    q: (B, h, T, d_k), k: (B, h, S, d_k), v: (B, h, S, d_v); mask broadcastable to (B, h, T, S).
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
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)  # (B, h, T, S)
    return F.dropout(weights, dropout_p) @ v, weights  # (B, h, T, d_v)


CACHE_CHUNK = 32  # positions of spare room a self-attention cache buffer gets when it grows


def spare_positions(cached: Tensor) -> int:
    """How many positions `cached` (B, h, S, d) can grow by in place: C - S when it is the
    [:, :, :S] view of a contiguous (B, h, C, d) buffer made by append_to_cache or reorder_cache,
    else 0. Growing in place assumes one decoding continues from a cache dict (as fairseq's
    generators do), not two continuations from the same one."""
    B, h, S, d = cached.shape
    C = cached.stride(1) // d if d else 0
    ours = (cached.stride(3) == 1 and cached.stride(2) == d and cached.stride(1) == C * d
            and cached.stride(0) == h * C * d and cached.storage_offset() == 0
            and cached.untyped_storage().nbytes() >= B * h * C * d * cached.element_size())
    return C - S if ours and C > S else 0


def _tracks_grad(*tensors: Optional[Tensor]) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def append_to_cache(cached: Optional[Tensor], new: Tensor) -> Tensor:
    """Self-attention keys or values of earlier steps (B, h, S, d) followed by the new ones
    (B, h, T, d): written into the spare room of the buffer behind `cached` when it has some (no
    copy of the S cached positions, unlike torch.cat), else into a new buffer with CACHE_CHUNK
    positions to spare. Returns the (B, h, S + T, d) view."""
    if _tracks_grad(cached, new):  # autograd: no writes into buffers that earlier steps saved
        return new if cached is None else torch.cat([cached, new], dim=2)  # (B, h, S + T, d)
    B, h, T, d = new.shape
    S = 0 if cached is None else cached.size(2)
    if cached is not None and spare_positions(cached) >= T:
        grown = cached.as_strided((B, h, S + T, d), cached.stride())  # (B, h, S + T, d) view of the buffer
    else:
        grown = new.new_empty(B, h, S + T + CACHE_CHUNK, d)[:, :, :S + T]  # (B, h, S + T, d) view of (B, h, C, d)
        if cached is not None:
            grown[:, :, :S] = cached
    grown[:, :, S:] = new
    return grown


def moved_rows(order: Tensor) -> Optional[Tensor]:
    """Rows i with order[i] != i, when fewer than half move (beam search keeps most hypotheses
    in place from one step to the next); None when a full reorder is cheaper."""
    moved = (order != torch.arange(order.numel(), device=order.device)).nonzero().squeeze(1)  # (M,)
    return moved if 2 * moved.numel() < order.numel() else None


def reorder_cache(cached: Tensor, order: Tensor, moved: Optional[Tensor] = None) -> Tensor:
    """cached[order] along the batch (beam search). With `moved` (moved_rows(order), same batch
    size) only those rows are copied, in place; otherwise all rows are copied once, straight into
    a new buffer with the same spare room, so that the next append_to_cache writes in place."""
    if _tracks_grad(cached):
        return cached.index_select(0, order)
    if moved is not None and order.numel() == cached.size(0):
        if moved.numel():
            cached[moved] = cached.index_select(0, order[moved])  # (M, h, S, d): read first, then written
        return cached
    B, h, S, d = cached.shape
    buffer = cached.new_empty(order.numel(), h, S + (spare_positions(cached) or CACHE_CHUNK), d)  # (B', h, C, d)
    return torch.index_select(cached, 0, order, out=buffer[:, :, :S])  # (B', h, S, d) view


class MultiHeadAttention(nn.Module):
    """Multi-head attention, section 3.2.2.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,  head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).
    d_k and d_v are free (Table 3 rows A and B vary them apart from d_model / h). The h per-head
    projections are one matrix each for Q, K and V; in self-attention they are fused into one
    (d_model -> h(2 d_k + d_v)) matmul, in encoder-decoder attention K and V are fused and computed
    once per sentence when decoding incrementally. Projections carry biases (the paper's equations
    have none; tensor2tensor and fairseq use them, and the weight converter needs them).
    """

    def __init__(self, d_model: int, h: int, d_k: int, d_v: int, dropout: float = 0.0,
                 self_attention: bool = True, cache_key: str = "attn"):
        super().__init__()
        self.h, self.d_k, self.d_v, self.dropout = h, d_k, d_v, dropout
        self.self_attention, self.cache_key = self_attention, cache_key
        if self_attention:
            self.qkv = nn.Linear(d_model, h * (2 * d_k + d_v))  # [W^Q | W^K | W^V]
        else:
            self.q = nn.Linear(d_model, h * d_k)  # W^Q
            self.kv = nn.Linear(d_model, h * (d_k + d_v))  # [W^K | W^V]
        self.out = nn.Linear(h * d_v, d_model)  # W^O
        for p in self.parameters():  # the paper is silent on init; Xavier as tensor2tensor
            nn.init.xavier_uniform_(p) if p.dim() > 1 else nn.init.zeros_(p)

    def _split_heads(self, x: Tensor, d: int) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.h, d).transpose(1, 2)  # (B, h, T, d)

    def _project_kv(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        k, v = self.kv(x).split([self.h * self.d_k, self.h * self.d_v], dim=-1)
        return self._split_heads(k, self.d_k), self._split_heads(v, self.d_v)  # (B, h, S, d_k/d_v)

    def forward(self, x: Tensor, memory: Optional[Tensor] = None, key_mask: Optional[Tensor] = None,
                causal: bool = False, cache: Optional[Dict[str, Optional[Tensor]]] = None,
                need_weights: bool = False, packing: Optional[Packing] = None) -> Tuple[Tensor, Optional[Tensor]]:
        """x: (B, T, d_model) queries; memory: (B_s, S, d_model) for encoder-decoder attention, else
        None (self-attention); key_mask: (B_s, S) True = real token; cache: incremental decoding
        state, filled in place (self-attention: keys/values grow by T; encoder-decoder: computed
        once); packing: x holds only the real rows (N, d_model) of the (B, T) queries (training,
        see packing.py), and so does the output. Returns (B, T, d_model) and, if need_weights,
        (B, h, T, S) weights.

        B_s = B except in beam search, where B = g B_s: each memory row serves g consecutive
        hypotheses (a sentence's beam, see models/encoder_decoder.py), whose queries then go
        through one attention call against that row's keys and values."""
        kk, vk = self.cache_key + ".k", self.cache_key + ".v"
        if self.self_attention:
            qkv = padded(self.qkv(x), packing)  # (B, T, h (2 d_k + d_v))
            q, k, v = qkv.split([self.h * self.d_k, self.h * self.d_k, self.h * self.d_v], -1)
            k, v = self._split_heads(k, self.d_k), self._split_heads(v, self.d_v)  # (B, h, T, d_k/d_v)
            if cache is not None:
                k, v = append_to_cache(cache.get(kk), k), append_to_cache(cache.get(vk), v)  # (B, h, S_past + T, d)
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
        mask = None if key_mask is None else key_mask[:, None, None, :]  # (B_s, 1, 1, S)
        p = self.dropout if self.training else 0.0
        y, w = scaled_dot_product_attention(q, k, v, mask, causal, p, need_weights)  # (B_s, h, g T, d_v)
        y = y.transpose(1, 2).reshape(B, T, self.h * self.d_v)  # (B, T, h d_v): Concat(head_i)
        if w is not None and g > 1:
            w = w.view(B // g, self.h, g, T, -1).transpose(1, 2).reshape(B, self.h, T, -1)  # (B, h, T, S)
        return self.out(packed(y, packing)), w
