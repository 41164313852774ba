"""Training on the real tokens only: the position-wise work without the padding.

Not in the paper, and no change to its maths. A padded batch (B, T) holds N <= B T real tokens;
everything position-wise (the Q/K/V and output projections of section 3.2.2, the FFN of section
3.3, residuals, LayerNorm and dropout of section 5.4) gives each position's output from that
position alone, so it can run on the N real rows instead of all B T. Only attention (Eq. (1))
mixes positions: it unpacks its projections into the padded (B, h, T, d_k) layout and packs its
output back. fairseq's transformer computes every pad position in every layer.

With --varlen-attention (varlen.py) attention too runs on the packed rows, so nothing is unpacked
inside a layer: a Packing then also gives each row's run of packed rows (its sequence), and the
decoder's its memory's (the source's) Packing.

Tensor layout: packed (N, D), padded (B, T, D).
"""

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

MIN_PAD_FRACTION = 0.05  # fewer pads than this: not packed, the gathers and scatters would eat the gain


class Packing:
    """The real positions of a (B, T) batch, and the moves between padded and packed rows."""

    def __init__(self, real: Tensor, varlen: bool = False):
        """real: (B, T) bool, True = real token; varlen: attention runs on the packed rows too
        (varlen.py), which needs each row's real tokens side by side (no pad between them)."""
        self.B, self.T = real.shape
        self.index = real.flatten().nonzero().squeeze(1)  # (N,) flat positions b T + t
        self.varlen = varlen
        self.sequences = sequences(real) if varlen else None  # made here, outside any compiled layer
        self.memory: Optional[Packing] = None  # a decoder's: its memory's (the source's) Packing, with varlen

    @staticmethod
    def of(real: Tensor, enabled: bool, varlen: bool = False) -> Optional["Packing"]:
        """A Packing when enabled (training) and the batch has enough padding to pay, else None;
        with varlen always (attention on the packed rows saves the unpacking even without pads),
        which the caller asks only where each row's real tokens stand side by side."""
        if not enabled or real.numel() == 0:
            return None
        if varlen:  # no count of the pads: one host read fewer
            return Packing(real, varlen)
        n_pad = real.numel() - int(real.sum())
        return Packing(real) if n_pad >= MIN_PAD_FRACTION * real.numel() else None

    def pack(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (N, D): the real rows."""
        return x.flatten(0, 1).index_select(0, self.index)  # (N, D)

    def unpack(self, x: Tensor) -> Tensor:
        """(N, D) -> (B, T, D), zeros at the pads (attention masks or never reads them)."""
        rows = x.new_zeros(self.B * self.T, x.size(-1))  # (B T, D)
        # index_put_ in place: one buffer, and autograd keeps only the index (index_copy would keep x)
        return rows.index_put_((self.index,), x).view(self.B, self.T, -1)  # (B, T, D)


def sequences(real: Tensor) -> Tuple[Tensor, int]:
    """Where each of the B rows' runs of packed rows begins, and the longest run: (B + 1,) int32
    offsets [0, n_1, n_1 + n_2, ..., N] (FlashAttention's cu_seqlens) and T, a bound on it. The
    packed order is row by row, so row b's real tokens are packed rows offsets[b] to
    offsets[b + 1] - 1, in their order (when they stand side by side: one_run_per_row)."""
    lengths = real.sum(dim=1, dtype=torch.int32)  # (B,)
    return F.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0)), real.size(1)  # (B + 1,), T


def real_after_pad(real: Tensor) -> Tensor:
    """(B, T - 1): True where a real token follows a pad in real (B, T)."""
    return real[:, 1:] & ~real[:, :-1]


def one_run_per_row(real: Tensor) -> bool:
    """Whether each row's real tokens (B, T) stand side by side: left- or right-padded, no pad
    between two real tokens (fairseq pads so), as attention on the packed rows needs."""
    starts = real[:, :1].int() + real_after_pad(real).sum(dim=1, keepdim=True)  # (B, 1) runs begun
    return bool((starts <= 1).all())


def packed(x: Tensor, packing: Optional[Packing]) -> Tensor:
    """x (B, T, D) as its real rows (N, D) when packing, else unchanged."""
    return x if packing is None else packing.pack(x)


def padded(x: Tensor, packing: Optional[Packing]) -> Tensor:
    """Real rows x (N, D) back to (B, T, D) when packing, else unchanged."""
    return x if packing is None else packing.unpack(x)


def source_packing(real: Tensor, enabled: bool, varlen: bool = False) -> Optional[Packing]:
    """The Packing of an encoder input's real tokens (B, S) when enabled (training) and worth it;
    with varlen only for rows whose real tokens stand side by side (else attention unpacks)."""
    if not enabled:
        return None
    return Packing.of(real, True, varlen and one_run_per_row(real))


def target_packing(tokens: Tensor, pad: int, enabled: bool, varlen: bool = False) -> Optional[Packing]:
    """The Packing of a decoder input (B, T) when enabled (training) and every row is
    right-padded, so that causal attention hides every pad from the real positions (and each
    row's real tokens stand side by side, as varlen needs); None for left-padded targets (a real
    query would see the pads before it), or when not worth it."""
    if not enabled:
        return None
    real = tokens.ne(pad)  # (B, T)
    right_padded = not real_after_pad(real).any()  # no real token after a pad
    return Packing.of(real, right_padded, varlen)
