"""The state of incremental decoding: what a decoder keeps from one step to the next (section
3.2.3's masked self-attention sees every earlier position, and encoder-decoder attention the same
memory every step), and how beam search reorders it. One object that the decoder and its
attention layers talk to.

Not in the paper, which says nothing about decoding speed; Eq. (1) is unchanged (every cached
step equals the full pass, tests/models/test_transformer.py). The object wraps the flat dict that
fairseq's incremental state keeps for the decoder, filled in place, so fairseq's generators and
anything that reads that dict see the same entries as before:
    "<layer>.self.k", "<layer>.self.v"    self-attention keys/values of the earlier steps, (B, h, t, d)
    "<layer>.cross.k", "<layer>.cross.v"  encoder-decoder keys/values, projected at the first step, (B_s, h, S, d)
One speed path of decoding lives here (docs/speed.md): beam-shared memory rows. B = g B_s
hypotheses run over B_s rows of encoder output, g consecutive hypotheses per row (shared_rows),
and their encoder-decoder keys/values are kept once per sentence. Self-attention keys/values are
one row per hypothesis, appended each step and reordered by cache.py; or, with static=True
(--static-decoding-cache, not in gradient mode), kept in buffers of a fixed size and read through
a mask (static_cache.py), for steps of repeating shapes.

Tensor layout: as in cache.py, keys/values (rows, h, positions, d), rows = B for self-attention
and B_s for the memory; the memory mask (B_s, S), additive (0 / -inf) within a decoding step.
"""

from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from . import beam_reorder, static_cache
from .cache import additive, append_to_cache, keeps_every_row, moved_rows, reorder_cache


def shared_rows(new_order: Tensor, g: int) -> Tuple[Tensor, int]:
    """Beam search shares a sentence's encoder output among its hypotheses.

    A batch of hypotheses whose memory holds one row per g consecutive hypotheses is reordered
    to the hypotheses `new_order`. Returns the memory rows to keep and the new g: when
    new_order // g is a run of g' equal rows per memory row (what fairseq's SequenceGenerator
    asks: expand each sentence to its beam, reorder within a beam, drop finished sentences), one
    row per run and g'; otherwise one row per hypothesis and 1. This departs from fairseq's
    transformer, which copies the encoder output for every hypothesis (and again every step)."""
    rows = torch.div(new_order, g, rounding_mode="floor")  # (B',) memory row of each hypothesis
    runs = torch.unique_consecutive(rows)
    g_new = rows.numel() // runs.numel()
    if g_new * runs.numel() == rows.numel() and torch.equal(runs.repeat_interleave(g_new), rows):
        return runs, g_new
    return rows, 1


def select_rows(tensors: List[Tensor], rows: Tensor) -> List[Tensor]:
    """Rows of each tensor; no copy when `rows` keeps every row in place."""
    if keeps_every_row(rows, tensors[0].size(0) if tensors else 0):
        return tensors
    return [t.index_select(0, rows) for t in tensors]


class DecodingState:
    """A decoder's incremental decoding state: per layer the keys/values of earlier steps and of
    the memory, this step's memory mask, and the beam reorder."""

    def __init__(self, entries: Dict[str, Optional[Tensor]], static: bool = False):
        """entries: the decoder's dict in fairseq's incremental state, filled in place; static:
        self-attention caches of a fixed size (static_cache.py), when no gradients are computed."""
        self.entries = entries
        self.static = static and not torch.is_grad_enabled()
        self.memory_mask: Optional[Tensor] = None  # (B_s, S) additive, this step
        self.self_mask: Optional[Tensor] = None  # (1, C) additive over a fixed-size cache, this step
        self.step: Optional[Tensor] = None  # (1,) this step's position, with a fixed-size cache
        self.first = False  # this step is a search's first
        self.reserve = 0  # positions each fixed-size cache holds from the start

    def begin_step(
        self,
        memory_pad: Tensor,
        dtype: torch.dtype,
        step: int = 0,
        position: Optional[Tensor] = None,
        reserve: int = 0,
    ) -> None:
        """A decoding step over memory_pad (B_s, S) True = pad: the memory mask, made additive
        (0 / -inf) once for all layers (cache.additive); with fixed-size caches, the mask of the
        self-attention positions written so far, step the (0-based) position of this step, and
        `position` the same as a (1,) tensor on the device when the caller has one (a CUDA graph's
        input), else made there by a fill: no copy from the host, which on CUDA waits for the device;
        `reserve` the positions to make room for at once (static_cache.write)."""
        self.memory_mask = additive(~memory_pad, dtype)  # (B_s, S)
        self.first, self.reserve = step == 0, reserve
        if self.static:
            if position is None:
                position = torch.full((1,), step, dtype=torch.long, device=memory_pad.device)
            self.step = position  # (1,)
            self.self_mask = static_cache.visible(self.step, static_cache.capacity(step + 1), dtype)  # (1, C)

    def self_attention(self, layer: str, k: Tensor, v: Tensor, window: Optional[int]) -> Tuple[Tensor, Tensor]:
        """This step's self-attention keys k (B, h, T, d_k) and values v (B, h, T, d_v) appended to
        the layer's cache (cache.append_to_cache; a window R keeps its last R + 1 steps). Returns
        all keys and values, (B, h, S, d_k) and (B, h, S, d_v)."""
        keep = None if window is None else (window + 1) * k.size(2)
        for name, new in ((layer + ".k", k), (layer + ".v", v)):
            if self.static:  # in place at this step's position: (B, h, C, d)
                C, old = self.self_mask.size(1), self.entries.get(name)
                self.entries[name] = static_cache.write(old, new, self.step, C, self.reserve, self.first)
            else:
                self.entries[name] = append_to_cache(self.entries.get(name), new, keep)
        return self.entries[layer + ".k"], self.entries[layer + ".v"]

    def memory(self, layer: str, project: Callable[[], Tuple[Tensor, Tensor]]) -> Tuple[Tensor, Tensor]:
        """Encoder-decoder keys and values (B_s, h, S, d): project() at a search's first step, then
        kept; written into an earlier search's of the same shape when the state holds them (a CUDA
        graph of that search's steps reads them where they are)."""
        names = (layer + ".k", layer + ".v")
        if self.first or self.entries.get(names[0]) is None:
            for name, new in zip(names, project(), strict=True):
                old = self.entries.get(name)
                same = old is not None and (old.shape, old.dtype) == (new.shape, new.dtype)
                self.entries[name] = old.copy_(new) if same else new
        return self.entries[names[0]], self.entries[names[1]]

    def _layers(self, kind: str) -> List[str]:
        return [k for k, v in self.entries.items() if f".{kind}." in k and v is not None]

    def reorder(self, new_order: Tensor) -> None:
        """Beam search goes on with hypotheses new_order (B',). Encoder-decoder keys/values follow
        the encoder output's rule (shared_rows), so reordering within the beams copies none of
        them; the self-attention caches are reordered row by row in place when few hypotheses
        move, else once into a new buffer (cache.reorder_cache)."""
        selves, crosses = self._layers("self"), self._layers("cross")
        if selves and crosses:  # g = B / B_s hypotheses per memory row: the encoder output's rule
            rows, _ = shared_rows(new_order, self.entries[selves[0]].size(0) // self.entries[crosses[0]].size(0))
            self.entries.update(zip(crosses, select_rows([self.entries[k] for k in crosses], rows), strict=True))
        moved = moved_rows(new_order) if selves and new_order.numel() == self.entries[selves[0]].size(0) else None
        self._reorder_selves(selves, new_order, moved)

    def reorder_within_beams(
        self,
        new_order: Tensor,
        written: Optional[int] = None,
        group: Optional[int] = None,
        last: Optional[Tensor] = None,
    ) -> None:
        """A reorder that keeps the batch's size and every hypothesis in its sentence's beam (a
        search over a fixed batch): the memory keys/values stay as they are, and each
        self-attention cache takes new_order (B,) with one copy of all its rows, in place for the
        fixed-size ones (of their first `written` positions, when given: those written so far);
        no test of which rows move (reorder's), so nothing is copied to the host. With `group`
        (the beam, k rows a sentence) and `last` (the last position written, (1,) on the device),
        the fixed-size caches by beam_reorder.py's kernel: one read and one write of each moved
        value, none of the others (the caller has checked that the kernel runs on this device)."""
        self._reorder_selves(self._layers("self"), new_order, None, written, group, last)

    def _reorder_selves(
        self,
        selves: List[str],
        new_order: Tensor,
        moved: Optional[Tensor],
        written: Optional[int] = None,
        group: Optional[int] = None,
        last: Optional[Tensor] = None,
    ) -> None:
        """The self-attention caches `selves` take new_order: the fixed-size ones in place
        (beam_reorder.py's kernel with `group` and `last`, where the buffer fits it; else
        static_cache.reorder_in_place, their first `written` positions when given), the growing
        ones by cache.reorder_cache; with `moved` (cache.moved_rows) only those rows."""
        for key in selves:
            buffer = self.entries[key]
            if self.static and group is not None and beam_reorder.fits(buffer, new_order, group):
                beam_reorder.reorder_within_groups(buffer, new_order, group, last)
            elif self.static:
                self.entries[key] = static_cache.reorder_in_place(buffer, new_order, moved, written)
            else:
                self.entries[key] = reorder_cache(buffer, new_order, moved)  # (B', h, S, d)
