"""The state of incremental decoding: what a decoder keeps from one step to the next (section
3.2.3's masked self-attention sees every earlier position, and encoder-decoder attention the same
memory every step), and how beam search reorders it. One object that the decoder and its
attention layers talk to.

Not in the paper, which says nothing about decoding speed; Eq. (1) is unchanged (every cached
step equals the full pass, tests/models/test_transformer.py). The object wraps the flat dict that
fairseq's incremental state keeps for the decoder, filled in place, so fairseq's generators and
anything that reads that dict see the same entries as before:
    "<layer>.self.k", "<layer>.self.v"    self-attention keys/values of the earlier steps
    "<layer>.cross.k", "<layer>.cross.v"  encoder-decoder keys/values, projected at the first step
    "beam.history"                         (B_s, g, C_e) bool, only in the beam-shared layout
The two speed paths of decoding (docs/speed.md) live here and in cache.py, beside the maths:
- beam-shared memory rows: B = g B_s hypotheses over B_s rows of encoder output, g consecutive
  hypotheses per row (shared_rows); their encoder-decoder keys/values are kept once per sentence;
- the beam-shared self-attention cache: a step's g entries of a beam side by side in its
  sentence's row, never moved; a reorder gathers the history table (cache.py) instead.

Tensor layout: as in cache.py, keys/values (rows, h, positions, d); masks broadcast over
(rows, h, queries, keys), additive (0 / -inf) within a decoding step.
"""

from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from .cache import (
    MAX_SHARED_BEAM,
    additive,
    append_to_cache,
    history_mask,
    keeps_every_row,
    moved_rows,
    new_history,
    own_weights,
    per_hypothesis,
    reorder_cache,
    reorder_history,
    window_history_mask,
)

HISTORY = "beam.history"


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
    the memory, the history table of a beam-shared cache, this step's masks, and the reorder."""

    def __init__(self, entries: Dict[str, Optional[Tensor]], window: Optional[int] = None):
        """entries: the decoder's dict in fairseq's incremental state, filled in place; window:
        restricted self-attention's R (window.py), whose history table keeps R + 1 steps."""
        self.entries, self.window = entries, window
        self.memory_mask: Optional[Tensor] = None  # (B_s, S) additive, this step
        self.history: Optional[Tensor] = None  # (B_s, 1, g, E) additive, this step, in the beam-shared layout

    def begin_step(self, step: int, B: int, memory: Tensor, memory_pad: Tensor, dtype: torch.dtype) -> None:
        """Step `step` (0 first) of B hypotheses over the B_s rows of memory (B_s, S, d_model),
        memory_pad (B_s, S) True = pad: this step's masks, made additive (0 / -inf) once for all
        layers (cache.additive)."""
        self.memory_mask = additive(~memory_pad, dtype)  # (B_s, S)
        history = self.history_mask(B, memory.size(0), step, memory.device)
        self.history = None if history is None else additive(history, dtype)  # (B_s, 1, g, E)

    @property
    def entries_per_step(self) -> int:
        """Self-attention cache entries per step of a row: g in the beam-shared layout, else 1."""
        return 1 if self.history is None else self.history.size(2)

    def history_mask(self, B: int, rows: int, step: int, device) -> Optional[Tensor]:
        """The boolean self-attention mask of this step (B_s, 1, g, E) when the beam shares the
        self-attention cache (cache.py), else None: shared from the first step on whenever the
        memory is (B = g B_s hypotheses on B_s rows, 1 < g <= MAX_SHARED_BEAM), until an order
        breaks a beam apart. Under a window R the table keeps the last R + 1 steps' entries, as the
        caches do (cache.window_history_mask)."""
        table, g = self.entries.get(HISTORY), B // rows
        starts = step == 0 and 1 < g <= MAX_SHARED_BEAM
        if not starts and table is None:
            return None
        if self.window is None:
            table, mask = history_mask(new_history(rows, g, device) if starts else table, step)
        else:
            table, mask = window_history_mask(None if starts else table, rows, g, (self.window + 1) * g, device)
        self.entries[HISTORY] = table
        return mask

    def self_attention(
        self, layer: str, k: Tensor, v: Tensor, mask: Optional[Tensor], window: Optional[int]
    ) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
        """This step's self-attention keys k (B, h, T, d_k) and values v (B, h, T, d_v) appended to
        the layer's cache (cache.append_to_cache; a window keeps its last R + 1 steps). Returns all
        keys and values and the mask to attend with: (B, h, S, d) and `mask`, or in the beam-shared
        layout (T = 1) the sentences' rows (B_s, h, E, d), where this step's g entries of a beam
        went side by side, and the history mask."""
        if self.history is not None:
            g = self.history.size(2)
            k, v = (z.reshape(-1, g, z.size(1), z.size(3)).transpose(1, 2) for z in (k, v))  # (B_s, h, g, d)
            mask = self.history
        keep = None if window is None else (window + 1) * k.size(2)
        for name, new in ((layer + ".k", k), (layer + ".v", v)):
            self.entries[name] = append_to_cache(self.entries.get(name), new, keep)
        return self.entries[layer + ".k"], self.entries[layer + ".v"], mask

    def memory(self, layer: str, project: Callable[[], Tuple[Tensor, Tensor]]) -> Tuple[Tensor, Tensor]:
        """Encoder-decoder keys and values (B_s, h, S, d): project() at the first step, then kept."""
        if self.entries.get(layer + ".k") is None:
            self.entries[layer + ".k"], self.entries[layer + ".v"] = project()
        return self.entries[layer + ".k"], self.entries[layer + ".v"]

    def own_weights(self, weights: Tensor) -> Tensor:
        """Self-attention weights (B, h, 1, E) over a sentence's shared entries as each
        hypothesis's weights over its own positions (B, h, 1, S) (cache.own_weights); unchanged
        outside the beam-shared layout."""
        return weights if self.history is None else own_weights(weights, self.history)

    def _layers(self, kind: str) -> List[str]:
        return [k for k, v in self.entries.items() if f".{kind}." in k and v is not None]

    def reorder(self, new_order: Tensor) -> None:
        """Beam search goes on with hypotheses new_order (B',). Encoder-decoder keys/values follow
        the encoder output's rule (shared_rows), so reordering within the beams copies nothing. A
        beam-shared self-attention cache stays where it is: only the history table is gathered,
        and rows are copied only when sentences finish; an order that breaks a beam apart turns
        it into one row per hypothesis. Those are copied row by row in place when few hypotheses
        move, else once into a new buffer (cache.reorder_cache)."""
        selves, crosses = self._layers("self"), self._layers("cross")
        history = self.entries.pop(HISTORY, None)  # (B_s, g, C_e) in the beam-shared layout
        g = (
            history.size(1)
            if history is not None
            else self.entries[selves[0]].size(0) // self.entries[crosses[0]].size(0)
            if crosses and selves
            else 0
        )
        if g:  # hypotheses per memory row: the encoder output's rule
            rows, g_new = shared_rows(new_order, g)
            self.entries.update(zip(crosses, select_rows([self.entries[k] for k in crosses], rows), strict=False))
            if history is not None and g_new == g:  # every beam kept together: no keys or values move
                return self._reorder_beams(selves, history, rows, (new_order % g).view(-1, g))
        for key in selves if history is not None else ():  # a beam broken apart: one row per hypothesis
            self.entries[key] = per_hypothesis(self.entries[key], history)  # (B, h, S, d)
        moved = moved_rows(new_order) if selves and new_order.numel() == self.entries[selves[0]].size(0) else None
        for key in selves:
            self.entries[key] = reorder_cache(self.entries[key], new_order, moved)

    def _reorder_beams(self, selves: List[str], history: Tensor, rows: Tensor, parents: Tensor) -> None:
        """Beams kept together: hypothesis j of kept sentence n continues hypothesis parents[n, j]
        of the same sentence (B_s', g). The history table is gathered; the sentences' cache rows
        are copied only when some finished (rows is not every row)."""
        kept = None if keeps_every_row(rows, history.size(0)) else rows  # None: no sentence finished
        self.entries[HISTORY] = reorder_history(history, kept, parents)
        for key in selves if kept is not None else ():
            self.entries[key] = reorder_cache(self.entries[key], kept)  # (B_s', h, E, d)
