"""Dropout, section 5.4 of Vaswani et al. (2017): "We apply dropout to the output of each
sub-layer ... In addition, we apply dropout to the sums of the embeddings and the positional
encodings", with rate P_drop (0.1 base, 0.3 big on EN-DE; Table 3).

The same regulariser as torch's F.dropout (each element kept with probability 1 - P_drop and
scaled by 1 / (1 - P_drop), else zeroed), drawn faster on a CPU. torch's CPU dropout draws one
Bernoulli variable per element from its Mersenne Twister, serially: ~6 ns an element here, about
a hundred times the cost of the multiply that applies it, and at the `cpu` benchmark shape 4-5%
of a training step. This draws 64-bit words from the same generator (so `--seed` still fixes
it) and uses each as two 32-bit uniform integers, one per element, kept when at or above a
threshold: P(keep) = 1 - round(P_drop 2^32) / 2^32, exact to 2^-32. It keeps a boolean mask
for the backward pass instead of a float one (a quarter of the memory). On a GPU, torch's fused
dropout kernel is faster and is used.

Tensor layout: any; the mask has the input's shape.
"""
import torch
import torch.nn.functional as F
from torch import Tensor, nn

_INT32_MIN = -(2 ** 31)


def keep_threshold(p: float) -> int:
    """The int32 threshold t with P(uniform int32 >= t) = 1 - round(p 2^32) / 2^32."""
    return _INT32_MIN + round(p * 2 ** 32)


def uniform_int32(shape) -> Tensor:
    """Independent uniform int32 draws of `shape` on the CPU: 64-bit words from torch's default
    generator, each split in two."""
    n = torch.Size(shape).numel()
    words = torch.empty((n + 1) // 2, dtype=torch.int64)
    words.random_(-(2 ** 63), 2 ** 63 - 1)  # all 64 bits (the top value excluded)
    return words.view(torch.int32)[:n].view(shape)


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Section 5.4: x with each element zeroed with probability p, the rest scaled by 1 / (1 - p)."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:  # a GPU's fused kernel; p = 1 would scale by 1 / 0
        return F.dropout(x, p, training=True)
    keep = uniform_int32(x.shape) >= keep_threshold(p)  # same shape as x, bool
    return torch.where(keep, x * (1.0 / (1.0 - p)), 0.0)


class Dropout(nn.Module):
    """Section 5.4: dropout at rate p while training, the identity in eval mode (see above)."""

    def __init__(self, p: float):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
