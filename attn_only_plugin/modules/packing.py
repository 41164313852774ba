"""Training on the real tokens only: the position-wise work without the padding.

Not in the paper, and no change to its maths. A padded batch (B, T) holds N <= B T real tokens;
everything position-wise (the Q/K/V and output projections of section 3.2.2, the FFN of section
3.3, residuals, LayerNorm and dropout of section 5.4) gives each position's output from that
position alone, so it can run on the N real rows instead of all B T. Only attention (Eq. (1))
mixes positions: it unpacks its projections into the padded (B, h, T, d_k) layout and packs its
output back. fairseq's transformer computes every pad position in every layer.

Tensor layout: packed (N, D), padded (B, T, D).
"""

from typing import Optional

from torch import Tensor

MIN_PAD_FRACTION = 0.05  # fewer pads than this: not packed, the gathers and scatters would eat the gain


class Packing:
    """The real positions of a (B, T) batch, and the moves between padded and packed rows."""

    def __init__(self, real: Tensor):
        """real: (B, T) bool, True = real token."""
        self.B, self.T = real.shape
        self.index = real.flatten().nonzero().squeeze(1)  # (N,) flat positions b T + t

    @staticmethod
    def of(real: Tensor, enabled: bool) -> Optional["Packing"]:
        """A Packing when enabled (training) and the batch has enough padding to pay, else None."""
        if not enabled or real.numel() == 0:
            return None
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


def packed(x: Tensor, packing: Optional[Packing]) -> Tensor:
    """x (B, T, D) as its real rows (N, D) when packing, else unchanged."""
    return x if packing is None else packing.pack(x)


def padded(x: Tensor, packing: Optional[Packing]) -> Tensor:
    """Real rows x (N, D) back to (B, T, D) when packing, else unchanged."""
    return x if packing is None else packing.unpack(x)


def target_packing(tokens: Tensor, pad: int, enabled: bool) -> Optional[Packing]:
    """The Packing of a decoder input (B, T) when enabled (training) and every row is
    right-padded, so that causal attention hides every pad from the real positions; None for
    left-padded targets (a real query would see the pads before it), or when not worth it."""
    if not enabled:
        return None
    real = tokens.ne(pad)  # (B, T)
    right_padded = not (real[:, 1:] & ~real[:, :-1]).any()  # no real token after a pad
    return Packing.of(real, right_padded)
