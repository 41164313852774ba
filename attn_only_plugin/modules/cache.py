"""Incremental decoding caches for self-attention (section 3.2.3's masked decoder attention, one
position per step), and how beam search reorders them.

Not in the paper, which says nothing about decoding speed; the maths of Eq. (1) is unchanged.
One row per hypothesis, (B, h, S, d): each hypothesis's S cached positions, appended each step
into spare room of a buffer (no copy of the cached positions, where fairseq's transformer
concatenates a new tensor every step). A beam reorder copies the rows that change: in place when
fewer than half do, else all into a new buffer (fairseq's transformer gathers every cache every
step). A cache shared by a beam's hypotheses was tried and measured no faster (docs/model.md).

Tensor layout: caches (B, h, S, d), a view of a (B, h, C, d) buffer with C - S positions of
spare room.
"""

from typing import Optional

import torch
from torch import Tensor

CACHE_CHUNK = 32  # steps of spare room a self-attention cache buffer gets when it grows


def spare_positions(cached: Tensor) -> int:
    """How many positions `cached` (B, h, S, d) can grow by in place: C - o - S when it is the
    [:, :, o:o + S] view of a contiguous (B, h, C, d) buffer made by append_to_cache or
    reorder_cache (o > 0 once a windowed cache dropped its oldest positions), else 0. Growing in
    place assumes one decoding continues from a cache dict (as fairseq's generators do), not two
    continuations from the same one."""
    B, h, S, d = cached.shape
    C = cached.stride(1) // d if d else 0
    o = cached.storage_offset() // d if d else 0
    ours = (
        cached.stride(3) == 1
        and cached.stride(2) == d
        and cached.stride(1) == C * d
        and cached.stride(0) == h * C * d
        and cached.storage_offset() == o * d
        and cached.untyped_storage().nbytes() >= B * h * C * d * cached.element_size()
    )
    return C - o - S if ours and C > o + S else 0


def _tracks_grad(*tensors: Optional[Tensor]) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def append_to_cache(cached: Optional[Tensor], new: Tensor, keep: Optional[int] = None) -> Tensor:
    """Self-attention keys or values of earlier steps (B, h, S, d) followed by the new ones
    (B, h, T, d): written into the spare room of the buffer behind `cached` when it has some (no
    copy of the S cached positions, unlike torch.cat), else into a new buffer with room for
    CACHE_CHUNK more steps of T. Returns the (B, h, S + T, d) view, or with `keep` (restricted
    self-attention, window.py) its last `keep` positions: the buffer then never holds more than
    keep + CACHE_CHUNK T positions."""
    if _tracks_grad(cached, new):  # autograd: no writes into buffers that earlier steps saved
        grown = new if cached is None else torch.cat([cached, new], dim=2)  # (B, h, S + T, d)
        return grown if keep is None else grown[:, :, -keep:]
    B, h, T, d = new.shape
    in_place = cached is not None and spare_positions(cached) >= T
    if cached is not None and keep is not None and not in_place:
        cached = cached[:, :, max(0, cached.size(2) + T - keep) :]  # only these move to the new buffer
    S = 0 if cached is None else cached.size(2)
    if in_place:
        grown = cached.as_strided((B, h, S + T, d), cached.stride(), cached.storage_offset())  # view of the buffer
    else:
        grown = new.new_empty(B, h, S + T + CACHE_CHUNK * T, d)[:, :, : S + T]  # (B, h, S + T, d) view of (B, h, C, d)
        if cached is not None:
            grown[:, :, :S] = cached
    grown[:, :, S:] = new
    return grown if keep is None else grown[:, :, -keep:]  # (B, h, min(S + T, keep), d)


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


def keeps_every_row(rows: Tensor, n: int) -> bool:
    """Whether `rows` is 0 .. n-1: a reorder that keeps every row where it is."""
    return rows.numel() == n and torch.equal(rows, torch.arange(n, device=rows.device))


def additive(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """A boolean mask (True = may attend) as the additive mask torch's fused attention takes:
    0 where True, -inf elsewhere. The memory's padding mask is made so once per decoding step for
    all layers, where a boolean mask would be converted in every layer's call (docs/speed.md)."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))
