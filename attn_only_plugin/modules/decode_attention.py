"""Eq. (1) of Vaswani et al. (2017), section 3.2.1, for one decoding step in a Triton kernel that
reads only the keys and values a query may see (`--decode-attention-kernel`): speed only, not the
paper's; softmax(q K^T / sqrt(d_k) + mask) V is unchanged, to float rounding.

At a decoding step the decoder's one new query per hypothesis attends to every earlier position
(section 3.2.3). With the fixed-size caches (static_cache.py) the keys are a buffer of C positions,
C a multiple of STATIC_CHUNK, and an additive mask gives -inf to the positions not written yet;
torch's fused kernel reads all C positions and weighs the masked ones 0. Here one program per
(row, head) walks the keys in blocks of 64 positions, loads no key or value the mask gives -inf,
and keeps the softmax's running maximum and sum in float32 (FlashAttention's online softmax), so
a step reads the positions written so far, not the whole buffer.

kernels.fused_attention calls it for a call it `applies` to: inside `enabled()` (the batched
search turns it on for its decoding steps), one query per row, an additive mask over the keys (one
for all rows, or one per row), keys a multiple of 64 long (the buffers' lengths: few, so few
compiled variants), no dropout, d_k and d_v powers of 2, and a device where Triton runs (CUDA, or
its interpreter on a CPU, TRITON_INTERPRET=1, as the tests run it). A row whose keys are all
masked gives NaN, as torch's kernel does.

Tensor layout: q (B, h, 1, d_k), k (B, h, S, d_k), v (B, h, S, d_v), each a view with its last
dimension contiguous; mask (B or 1, 1, 1, S) additive (0 / -inf); the output (B, h, 1, d_v).
"""

import contextlib
import functools
import math

import torch
from torch import Tensor

from .beam_reorder import available, interpreting

BLOCK_N = 64  # key positions a program reads at a time; not the paper's, not tuned
ON = [False]  # whether decoding steps use the kernel now (enabled)


@contextlib.contextmanager
def enabled(on: bool = True):
    """Decoding steps inside this context use the kernel where it applies."""
    before, ON[0] = ON[0], on
    try:
        yield
    finally:
        ON[0] = before


def applies(q: Tensor, k: Tensor, v: Tensor, mask, dropout_p: float) -> bool:
    """Whether this attention call goes through the kernel (module docstring)."""
    if not ON[0] or dropout_p > 0 or mask is None or q.size(-2) != 1 or not mask.is_floating_point():
        return False
    B, _, _, S = mask.shape if mask.dim() == 4 else (0, 0, 0, -1)
    shapes = B in (1, q.size(0)) and mask.shape[1:3] == (1, 1) and S == k.size(-2) and S % BLOCK_N == 0
    dims = all(n & (n - 1) == 0 for n in (q.size(-1), v.size(-1))) and k.size(0) == q.size(0)
    strides = all(t.stride(-1) == 1 for t in (q, k, v, mask))
    return shapes and dims and strides and available(q)


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """softmax(q K^T / sqrt(d_k) + mask) V by the kernel: (B, h, 1, d_v)."""
    B, h, _, d_k = q.shape
    S, d_v = k.size(2), v.size(3)
    out = torch.empty(B, h, 1, d_v, dtype=q.dtype, device=q.device)  # (B, h, 1, d_v)
    mask_row = mask.stride(0) if mask.size(0) > 1 else 0  # 0: one mask for every row
    strides = (q.stride(0), q.stride(1), *k.stride()[:3], *v.stride()[:3], mask_row)
    kernel(interpreting())[(B, h)](q, k, v, mask, out, 1 / math.sqrt(d_k), *strides, S=S, DK=d_k, DV=d_v, BLOCK=BLOCK_N)
    return out


@functools.cache
def kernel(interpret: bool):
    """The Triton kernel, made at its first use (compiled, or interpreted when `interpret`: Triton
    decides which when a function is decorated). One program per (row, head)."""
    import triton
    import triton.language as tl

    @triton.jit
    def attention(
        q, k, v, mask, out, scale,
        q_row, q_head, k_row, k_head, k_pos, v_row, v_head, v_pos, mask_row,
        S: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        b, head, heads = tl.program_id(0), tl.program_id(1), tl.num_programs(1)
        i, j = tl.arange(0, DK), tl.arange(0, DV)  # (DK,), (DV,) features of a key, a value
        query = tl.load(q + b * q_row + head * q_head + i).to(tl.float32) * scale  # (DK,) q / sqrt(d_k)
        top = float("-inf")  # the largest score so far
        total = 0.0  # sum of exp(score - top) so far
        acc = tl.zeros((DV,), tl.float32)  # sum of exp(score - top) v so far
        for start in range(0, S, BLOCK):
            n = start + tl.arange(0, BLOCK)  # (BLOCK,) key positions
            add = tl.load(mask + b * mask_row + n).to(tl.float32)  # (BLOCK,) the additive mask
            seen = add > float("-inf")  # keys the query may see: only these are read
            at_k = k + b * k_row + head * k_head + n[:, None] * k_pos + i[None, :]  # (BLOCK, DK) pointers
            keys = tl.load(at_k, mask=seen[:, None], other=0.0).to(tl.float32)  # (BLOCK, DK)
            scores = tl.sum(keys * query[None, :], axis=1) + add  # (BLOCK,) q K^T / sqrt(d_k) + mask
            new_top = tl.maximum(top, tl.max(scores, axis=0))
            shift = tl.where(new_top == float("-inf"), 0.0, new_top)  # nothing seen yet: weights 0, not NaN
            rescale = tl.exp(top - shift)  # what the earlier sums were weighed by, now outdated
            weights = tl.exp(scores - shift)  # (BLOCK,) softmax numerators
            at_v = v + b * v_row + head * v_head + n[:, None] * v_pos + j[None, :]  # (BLOCK, DV) pointers
            values = tl.load(at_v, mask=seen[:, None], other=0.0).to(tl.float32)  # (BLOCK, DV)
            acc = acc * rescale + tl.sum(weights[:, None] * values, axis=0)  # (DV,)
            total = total * rescale + tl.sum(weights, axis=0)
            top = new_top
        tl.store(out + (b * heads + head) * DV + j, (acc / total).to(out.dtype.element_ty))  # (DV,) softmax(.) V

    return attention
