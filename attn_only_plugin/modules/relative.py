"""Relative position representations: Shaw, Uszkoreit and Vaswani (2018), "Self-Attention with
Relative Position Representations", Eq. (3)-(4) and section 3.3, beside Eq. (1) of Vaswani et
al. (2017) (attention.py), which they extend.

Each self-attention layer learns 2K + 1 vectors a^K_b (size d_k) and a^V_b (size d_v), shared
across heads, for the clipped distance b = clip(j - i, -K, K) of key j from query i:
    e_ij = q_i (k_j + a^K_ij)^T / sqrt(d_k)                         (Eq. 4)
    z_i  = sum_j softmax_j(e_ij) (v_j + a^V_ij)                      (Eq. 3)
Efficient form (their section 3.3): q_i (a^K_ij)^T is one product q (a^K)^T of shape
(B, h, T, 2K + 1), gathered at each (i, j)'s bucket; the a^V term sums the weights of each
bucket, (B, h, T, 2K + 1), times a^V. No (T, S, d_k) tensor is formed.
Initialisation (theirs is not given): Xavier-uniform, as the projections W^Q, W^K, W^V.

Tensor layout: q (B, h, T, d_k), k (B, h, S, d_k), v (B, h, S, d_v); positions (T,) and (S,).
"""

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class RelativePositions(nn.Module):
    """a^K and a^V of Shaw et al. (2018), with the attention that uses them (Eq. 3-4)."""

    def __init__(self, K: int, d_k: int, d_v: int):
        super().__init__()
        self.K = K  # clipping distance k (their section 3.2)
        self.a_k = nn.Parameter(torch.empty(2 * K + 1, d_k))  # a^K_b, b = -K .. K
        self.a_v = nn.Parameter(torch.empty(2 * K + 1, d_v))  # a^V_b
        nn.init.xavier_uniform_(self.a_k)
        nn.init.xavier_uniform_(self.a_v)

    def buckets(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """clip(j - i, -K, K) + K for every query i and key j: (T, S) indices into a^K, a^V."""
        return (k_pos[None, :] - q_pos[:, None]).clamp(-self.K, self.K) + self.K  # (T, S)

    def forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        mask: Optional[Tensor] = None,
        dropout_p: float = 0.0,
        need_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """Eq. (3)-(4); mask broadcastable to (B, h, T, S), boolean (True = may attend) or
        additive. Returns (B, h, T, d_v) and, if need_weights, the (B, h, T, S) weights."""
        B, h, T, S = q.size(0), q.size(1), q.size(2), k.size(2)
        index = self.buckets(q_pos, k_pos).expand(B, h, T, S)  # (B, h, T, S)
        relative = (q @ self.a_k.t()).gather(-1, index)  # (B, h, T, S): q_i (a^K_ij)^T
        scores = (q @ k.transpose(-2, -1) + relative) / math.sqrt(q.size(-1))  # (B, h, T, S): Eq. (4)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
        weights = scores.softmax(dim=-1)  # (B, h, T, S)
        dropped = F.dropout(weights, dropout_p)
        per_bucket = dropped.new_zeros(B, h, T, 2 * self.K + 1).scatter_add_(-1, index, dropped)  # (B, h, T, 2K + 1)
        out = dropped @ v + per_bucket @ self.a_v  # (B, h, T, d_v): Eq. (3)
        return out, (weights if need_weights else None)
