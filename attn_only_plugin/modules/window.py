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
import torch.nn.functional as F
from torch import Tensor

from .kernels import fused_attention

# Shortest self-attention (n positions) run by banded_attention: below it a masked full attention,
# one fused call, is faster (measured with benchmarks/table1.py --one: docs/attention_variants.md).
# Its blocks see 3R keys, so it also needs n well above r = 2R + 1 (use_banded: n >= 4r).
BANDED_MIN_LENGTH = 512


def use_banded(n: int, window: int) -> bool:
    """Whether a self-attention over n positions with window R runs banded_attention."""
    return n >= BANDED_MIN_LENGTH and n >= 4 * (2 * window + 1)


def query_key_positions(T: int, S: int, device) -> Tuple[Tensor, Tensor]:
    """Positions of T queries and S keys in one attention call. Self-attention without a cache has
    T = S; with one, the queries are the last T of the S cached positions. Returns q_pos (T,),
    k_pos (S,)."""
    k_pos = torch.arange(S, device=device)  # (S,)
    return k_pos[S - T :], k_pos  # (T,), (S,)


def position_mask(mask: Optional[Tensor], q_pos: Tensor, k_pos: Tensor, window: Optional[int], causal: bool) -> Tensor:
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


def banded_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    window: int,
    causal: bool = False,
    key_mask: Optional[Tensor] = None,
    dropout_p: float = 0.0,
) -> Tensor:
    """Eq. (1) restricted to the window, computing only the band: the O(r n d) of Table 1's fourth
    row, where masking a full attention (position_mask) still costs O(n^2 d). Self-attention
    without a cache (T = S). The queries go in blocks of R; block n's keys are the 3R positions
    [n R - R, n R + 2R), which hold every key its queries may see; the rest of each block's
    scores is masked as position_mask masks it (same keys, same softmax), and each block is one
    call of torch's fused attention. key_mask: (B, S) True = real token. Returns (B, h, T, d_v)."""
    B, h, T, d = q.shape
    b, L = window, 3 * window  # queries and keys per block
    n = -(-T // b)  # blocks
    tail = n * b - T  # queries added to fill the last block
    q_blocks = F.pad(q, (0, 0, 0, tail)).reshape(B, h * n, b, d)  # (B, h n, b, d_k)
    k_blocks, v_blocks = (
        F.pad(z, (0, 0, window, tail + window)).unfold(2, L, b).transpose(-2, -1).reshape(B, h * n, L, z.size(-1))
        for z in (k, v)
    )  # (B, h n, L, d_k / d_v)
    t, s = torch.arange(b, device=q.device), torch.arange(L, device=q.device)
    offset = t[:, None] - s[None, :] + window  # (b, L): query position minus key position, any block
    allowed = (offset.abs() <= window) & ((offset >= 0) if causal else True)  # (b, L)
    key_pos = torch.arange(n, device=q.device)[:, None] * b - window + s  # (n, L)
    real = ((key_pos >= 0) & (key_pos < T))[None]  # (1, n, L)
    if key_mask is not None:
        real = real & F.pad(key_mask, (window, tail + window)).unfold(1, L, b)  # (B, n, L)
    allowed = (real[:, None, :, None, :] | (offset == 0)) & allowed  # (B|1, 1, n, b, L); a query sees itself
    allowed = allowed.expand(real.size(0), h, n, b, L).reshape(real.size(0), h * n, b, L)  # (B|1, h n, b, L)
    out = fused_attention(q_blocks, k_blocks, v_blocks, allowed, dropout_p)  # (B, h n, b, d_v)
    return out.reshape(B, h, n * b, -1)[:, :, :T]  # (B, h, T, d_v)
