"""Self-attention restricted to a neighbourhood: Table 1's fourth row and section 4 of Vaswani
et al. (2017), "restricting self-attention to consider only a neighborhood of size r in the input
sequence centered around the respective output position", left there to future work.

With window R (--attention-window), a query at position i sees the keys j with |i - j| <= R in
the encoder (2R + 1 positions, r = 2R + 1 in Table 1's terms) and R <= i - j <= 0 in the decoder:
itself and the R positions before it (R + 1 positions). Encoder-decoder attention stays full.
Incremental decoding keeps only those R + 1 positions per hypothesis (cache.append_to_cache's
`keep`), so the cache is bounded by R, not by the output length.

Positions here are indices into the attention's key axis. Sources are left-padded and targets
right-padded (fairseq's defaults), so a sentence's real tokens are contiguous and index distances
are token distances.

Tensor layout: q (B, h, T, d_k), k (B, h, S, d_k), v (B, h, S, d_v); positions (T,) and (S,).
"""
from typing import Optional, Tuple

import torch
from torch import Tensor


def query_key_positions(T: int, S: int, entries_per_step: int, device) -> Tuple[Tensor, Tensor]:
    """Positions of T queries and S keys in one attention call. Self-attention without a cache has
    T = S; with one, the queries are the last T of the S cached positions. In a cache shared by a
    beam of g (cache.py) each step holds g entries (entries_per_step = g) and the g stacked
    queries (T = g) all sit at the last step. Returns q_pos (T,), k_pos (S,)."""
    k_pos = torch.arange(S, device=device) // entries_per_step  # (S,)
    if entries_per_step > 1:
        return k_pos[-1:].expand(T), k_pos  # (g,), (S,)
    return k_pos[S - T:], k_pos  # (T,), (S,)


def position_mask(mask: Optional[Tensor], q_pos: Tensor, k_pos: Tensor, window: Optional[int],
                  causal: bool) -> Tensor:
    """The boolean mask (True = may attend) of keys within `window` of each query (all when
    None), before it when causal (section 3.2.3), and allowed by `mask` (the padding mask,
    (B, 1, 1, S) boolean). Each query may always see its own position: a pad query whose window
    holds only pads then still has one key, so no softmax row is empty (0 / 0); real queries never
    see a pad this way. Returns (T, S) or (B, 1, T, S)."""
    offset = q_pos[:, None] - k_pos[None, :]  # (T, S): i - j
    allowed = torch.ones_like(offset, dtype=torch.bool) if window is None else offset.abs() <= window
    if causal:
        allowed = allowed & (offset >= 0)
    if mask is None:
        return allowed  # (T, S)
    return (mask | (offset == 0)) & allowed  # (B, 1, T, S)
