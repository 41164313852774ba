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

Inference: the identity, unless fairseq-generate/-interactive are given --retain-dropout
(Monte-Carlo dropout): fairseq's make_generation_fast_ contract, which its FairseqDropout and
ours share (retain_at_inference below), then sets apply_during_inference on every dropout, or on
those whose module name --retain-dropout-modules lists (fairseq's names or ours, see MODULE_NAMES).

Tensor layout: any; the mask has the input's shape.
"""

import logging
import re
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_INT32_MIN = -(2**31)
logger = logging.getLogger(__name__)

# --retain-dropout-modules: the module names that select a dropout, by where it sits in our model
# (its path from the model), fairseq's transformer's name for the dropout at that place first.
# The first pattern that matches a path wins.
MODULE_NAMES = [
    (r"(en|de)coder\.layers\.\d+\.(self|cross)_attn$", ("MultiheadAttention", "MultiHeadAttention")),
    (r"encoder\.layers\.", ("TransformerEncoderLayer", "TransformerEncoderLayerBase", "EncoderLayer")),
    (r"decoder\.layers\.", ("TransformerDecoderLayer", "TransformerDecoderLayerBase", "DecoderLayer")),
    (r"encoder\.", ("TransformerEncoder", "TransformerEncoderBase", "Encoder")),
    (r"decoder\.", ("TransformerDecoder", "TransformerDecoderBase", "Decoder")),
]


def module_names(path: str) -> tuple:
    """The names --retain-dropout-modules may give for the dropout at `path` (e.g.
    "models.0.encoder.layers.1.sub_attn.dropout"); () for a path outside the encoder and decoder."""
    for pattern, names in MODULE_NAMES:
        if re.search(r"(^|\.)" + pattern, path):
            return names
    return ()


def retain_at_inference(
    module: torch.nn.Module, name: str, retain_dropout: bool = False, retain_dropout_modules: Optional[List[str]] = None
) -> None:
    """fairseq's FairseqDropout.make_generation_fast_: with retain_dropout, `module` (named `name`
    in the model) keeps dropping out at inference when retain_dropout_modules is None (all) or
    lists one of its names."""
    if not retain_dropout:
        return
    if retain_dropout_modules is None or set(module_names(name)) & set(retain_dropout_modules):
        logger.info(f"Enabling dropout during inference for module: {name}")
        module.apply_during_inference = True
    else:
        logger.info(f"Disabling dropout for module: {name}")


def keep_threshold(p: float) -> int:
    """The int32 threshold t with P(uniform int32 >= t) = 1 - round(p 2^32) / 2^32."""
    return _INT32_MIN + round(p * 2**32)


def uniform_int32(shape) -> Tensor:
    """Independent uniform int32 draws of `shape` on the CPU: 64-bit words from torch's default
    generator, each split in two."""
    n = torch.Size(shape).numel()
    # all 64 bits (the top value excluded); out of place, which torch.compile traces (random_ it cannot)
    words = torch.randint(-(2**63), 2**63 - 1, ((n + 1) // 2,), dtype=torch.int64)
    if torch.compiler.is_compiling():  # torch.compile (compiled.py) cannot view int64 as int32: the same
        # values by shifts, low half then high half of each word, as int64: (n,)
        return torch.stack([(words << 32) >> 32, words >> 32], dim=-1).flatten()[:n].view(shape)
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
    """Section 5.4: dropout at rate p while training, the identity in eval mode unless retained
    at inference (see above)."""

    def __init__(self, p: float):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = p
        self.apply_during_inference = False

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training or self.apply_during_inference)

    def make_generation_fast_(
        self, name: str, retain_dropout: bool = False, retain_dropout_modules: Optional[List[str]] = None, **unused
    ):
        retain_at_inference(self, name, retain_dropout, retain_dropout_modules)

    def extra_repr(self) -> str:
        return f"p={self.p}"
