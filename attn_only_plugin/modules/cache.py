"""Incremental decoding caches for self-attention (section 3.2.3's masked decoder attention, one
position per step), and how beam search reorders them.

Not in the paper, which says nothing about decoding speed; the maths of Eq. (1) is unchanged.
Two layouts, chosen and kept by the decoding state (decoding_state.py):
- one row per hypothesis, (B, h, S, d): each hypothesis's S cached positions. A beam reorder
  copies the rows that change (in place when fewer than half do, else all into a new buffer).
  Used for greedy search, sampling, and any order that does not keep a sentence's beam together.
- one row per sentence shared by its beam of g hypotheses, (B_s, h, E, d): at step t slot j of
  the beam writes entry e = t g + j, and entries never move. A history table (B_s, g, E), bool,
  marks for each hypothesis the entries on its own path (one per step). Its attention runs over
  all E entries of its sentence with the others masked out (exp(-inf) = 0), so the softmax and
  the weighted sum are those over its own S = t + 1 positions. A beam reorder is then one gather
  of the small history table for the whole decoder instead of moving (B, h, S, d) keys and values
  in every layer; the attention reads the same bytes (B_s g (t + 1) entries), g queries at a time.
fairseq's transformer concatenates a new tensor every step and gathers every cache every step.

Tensor layout: caches (rows, h, positions, d), a view of a (rows, h, C, d) buffer with C - S
positions of spare room; history (B_s, g, C_e) bool over entries.
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

CACHE_CHUNK = 32  # steps of spare room a self-attention cache buffer gets when it grows
# Widest beam whose self-attention cache is shared: g queries against g times the entries cost g
# times the products, which outgrows the copies saved. Measured (CPU, beam search through
# fairseq's SequenceGenerator, shared / one row per hypothesis): d_model 128, 4 layers: beam 4
# 1.0x, 8 and 12 1.13x faster, 21 0.92x; d_model 512: beam 4 1.10x, 12 1.02x, 21 1.00x.
MAX_SHARED_BEAM = 12


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
    CACHE_CHUNK more steps of T (a beam's g entries per step in the shared layout). Returns the
    (B, h, S + T, d) view, or with `keep` (restricted self-attention, window.py) its last `keep`
    positions: the buffer then never holds more than keep + CACHE_CHUNK T positions."""
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


def new_history(sentences: int, g: int, device) -> Tensor:
    """An empty history table for `sentences` beams of g hypotheses: (B_s, g, C_e) bool."""
    return torch.zeros(sentences, g, CACHE_CHUNK * g, dtype=torch.bool, device=device)


def history_mask(history: Tensor, step: int) -> Tuple[Tensor, Tensor]:
    """Marks each hypothesis's own entry of `step` (slot j writes entry step g + j) and returns the
    table, grown when full, with the attention mask of this step: (B_s, 1, g, (step + 1) g), True =
    on the hypothesis's path (broadcast over the h heads)."""
    B_s, g, C = history.shape
    E = (step + 1) * g
    if C < E:
        grown = history.new_zeros(B_s, g, C + CACHE_CHUNK * g)  # (B_s, g, C')
        grown[:, :, :C] = history
        history = grown
    slots = torch.arange(g, device=history.device)
    history[:, slots, step * g + slots] = True
    return history, history[:, None, :, :E]  # (B_s, 1, g, E)


def window_history_mask(history: Optional[Tensor], sentences: int, g: int, keep: int, device) -> Tuple[Tensor, Tensor]:
    """history_mask for restricted self-attention (window.py), whose shared cache holds only the
    last `keep` entries: this step's g entries (slot j's own is j) are appended to the table
    (None at the first step) and the oldest dropped exactly as append_to_cache drops them from
    the keys and values, so table and cache stay entry for entry aligned. Returns the table
    (B_s, g, E) and the mask (B_s, 1, g, E), E <= keep."""
    own = torch.eye(g, dtype=torch.bool, device=device).expand(sentences, g, g)  # (B_s, g, g): this step's entries
    table = append_to_cache(None if history is None else history[..., None], own[..., None], keep)  # (B_s, g, E, 1)
    table = table.squeeze(-1)  # (B_s, g, E)
    return table, table[:, None]  # (B_s, 1, g, E)


def additive(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """A boolean mask (True = may attend) as the additive mask torch's fused attention takes:
    0 where True, -inf elsewhere. Made once per decoding step for all layers, where a boolean mask
    would be converted in every layer's call (alone, the kernel was also slower on it: 1.35
    against 0.78 ms for 16 sentences, beam 4, 8 heads, 76 steps; in the decoder, where keys and
    values come from memory, beam search got 1.01x faster)."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


def reorder_history(history: Tensor, rows: Optional[Tensor], parents: Tensor) -> Tensor:
    """Beam search keeps sentences `rows` (None: all, in place) and gives hypothesis j of kept
    sentence n the path of hypothesis parents[n, j] of the same sentence: (B_s', g, C_e)."""
    history = history if rows is None else history[rows]
    return history.gather(1, parents[:, :, None].expand(-1, -1, history.size(2)))  # (B_s', g, C_e)


def per_hypothesis(cached: Tensor, history: Tensor) -> Tensor:
    """A shared (B_s, h, S g, d) cache as one row per hypothesis, (B_s g, h, S, d): hypothesis
    (n, j) gets the entry on its path at each of the S steps. For orders that break a beam apart."""
    B_s, h, E, d = cached.shape
    g = history.size(1)
    S = E // g
    slot = history[:, :, :E].reshape(B_s, g, S, g).to(torch.uint8).argmax(-1)  # (B_s, g, S): slot on the path
    entries = torch.arange(S, device=cached.device) * g + slot  # (B_s, g, S)
    index = entries.view(B_s, 1, g * S, 1).expand(B_s, h, g * S, d)  # (B_s, h, g S, d)
    own = cached.gather(2, index)  # (B_s, h, g S, d)
    return own.view(B_s, h, g, S, d).transpose(1, 2).reshape(B_s * g, h, S, d)  # (B, h, S, d)


def own_weights(weights: Tensor, mask: Tensor) -> Tensor:
    """Attention weights over a sentence's entries (B, h, 1, E) as each hypothesis's weights over
    its own S positions (B, h, 1, S); mask (B_s, 1, g, E) is history_mask's, or its additive form."""
    B, h, _, E = weights.shape
    mask = mask if mask.dtype == torch.bool else mask.eq(0)
    on_path = mask.transpose(1, 2).reshape(B, 1, 1, E).expand(B, h, 1, E)  # (B, h, 1, E)
    return weights.masked_select(on_path).view(B, h, 1, -1)  # (B, h, 1, S)
