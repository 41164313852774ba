"""Self-attention caches of a fixed size for incremental decoding (section 3.2.3's masked decoder
self-attention, one position per step): a speed path, not the paper's; Eq. (1) is unchanged.

`--static-decoding-cache` (off by default) keeps each layer's keys and values of earlier steps
in a zero-filled buffer of C positions, C the step count rounded up to STATIC_CHUNK, and writes
step t's key and value at position t of it in place. Attention reads the whole buffer through an
additive mask (0 up to position t, -inf after it), so every step of a chunk has the same tensor
shapes and the same buffers: what a CUDA graph of a decoding step needs (cache.py's caches grow
by one position every step instead). The masked positions get weight exp(-inf) = 0, so the
outputs are those of cache.py's caches to float rounding (the softmax sums C terms, not S, in
another order): tests/modules/test_static_cache.py, the same beam-search hypotheses, scores
within 1e-5. A beam reorder copies rows in place while the batch keeps its size.
The cost: attention over up to STATIC_CHUNK - 1 masked positions each step (torch's kernel reads
them; decode_attention.py's, with --decode-attention-kernel, does not).

A caller that graphs the steps (tasks/decoder_step.py) reserves the positions of the whole
search up front: a buffer is then a view of the first C positions of one storage, widened in
place at a chunk's start, so the storage never changes during a search, nor in the next search
of the same rows, which restarts in it.

Tensor layout: buffers (B, h, C, d); the mask (1, C), additive; the step a (1,) long tensor.
"""

from typing import Optional

import torch
from torch import Tensor

from .cache import reorder_cache

STATIC_CHUNK = 64  # positions a fixed-size buffer grows by: one buffer shape per chunk of steps


def capacity(positions: int) -> int:
    """The buffer length for `positions` cached positions: the next multiple of STATIC_CHUNK."""
    return -(-positions // STATIC_CHUNK) * STATIC_CHUNK


def visible(step: Tensor, C: int, dtype: torch.dtype) -> Tensor:
    """The additive mask (1, C) of a step's query over a buffer of C positions: 0 at positions
    <= step (itself and the earlier steps, section 3.2.3), -inf after."""
    later = torch.arange(C, device=step.device) > step  # (C,) True = a position not written yet
    return torch.zeros(1, C, dtype=dtype, device=step.device).masked_fill_(later[None], float("-inf"))  # (1, C)


def room(buffer: Tensor) -> int:
    """The positions the storage behind a (B, h, C, d) buffer holds in each row: C, or more when
    the buffer is a view of the first C positions of a larger one (a capacity reserved up front)."""
    return buffer.stride(1) // buffer.stride(2)


def write(
    buffer: Optional[Tensor], new: Tensor, step: Tensor, C: int, reserve: int = 0, restart: bool = False
) -> Tensor:
    """The step's keys or values new (B, h, 1, d) written in place at position `step` of the
    (B, h, C, d) buffer. A buffer shorter than C is widened: in place, as a view of its storage,
    when that holds C positions (`reserve` positions were made up front), else into a new
    zero-filled one (holding the old one's positions) of max(C, reserve) positions. `restart`: a
    new search's first step in an earlier search's buffer of the same rows, zeroed first (in place:
    a CUDA graph of that search's steps reads the same storage)."""
    if buffer is not None and room(buffer) >= C:
        full = buffer.as_strided((*buffer.shape[:2], room(buffer), buffer.size(3)), buffer.stride())  # (B, h, C', d)
        if restart:
            full.zero_()
    else:
        full = new.new_zeros(new.size(0), new.size(1), max(C, reserve), new.size(3))  # (B, h, C', d)
        if buffer is not None and not restart:
            full[:, :, : buffer.size(2)] = buffer
    return full[:, :, :C].index_copy_(2, step, new)  # (B, h, C, d), a view when C' > C


def reorder_in_place(buffer: Tensor, order: Tensor, moved: Optional[Tensor], written: Optional[int] = None) -> Tensor:
    """buffer[order] along the batch: in place (the same buffer, for a captured graph) while the
    batch keeps its size, only the rows that move when few do (cache.moved_rows); a new buffer
    when beam search drops finished sentences. `written`: the positions written so far, when the
    caller knows them (a search over a fixed batch); only those move, as the later ones are
    masked and each is written for every row before a query sees it."""
    if order.numel() != buffer.size(0):
        return buffer.index_select(0, order)  # (B', h, C, d)
    if moved is not None:
        return reorder_cache(buffer, order, moved)  # the moved rows, in place
    head = buffer[:, :, :written]  # (B, h, written, d), a view
    head.copy_(head.index_select(0, order))
    return buffer  # (B, h, C, d), same buffer
