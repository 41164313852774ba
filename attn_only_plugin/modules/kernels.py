"""Which of torch's fused kernels computes eq. (1), section 3.2.1, on a GPU: a speed path beside
attention.py's maths, which it does not change (every kernel computes softmax(Q K^T / sqrt(d_k)) V).

Tensor layout: q (B, h, T, d_k), k (B, h, S, d_k), v (B, h, S, d_v), as in attention.py.

On an H100, torch (2.11) runs `F.scaled_dot_product_attention` through cuDNN's kernel first, which
builds an execution plan for every new (B, T, S) shape: in fairseq-train's first epoch, where every
batch has a new shape, that cost about 350 ms a training step of transformer_big (docs/speed.md,
"GPUs": 401 against 58 ms a step with torch's memory-efficient kernel, which is no slower on shapes
seen before: 96k against 91k tokens/s); beam search, whose keys grow by one each step, meets new
shapes too. So on CUDA ours asks for the other fused kernels and keeps cuDNN's only where nothing
else is allowed; whatever torch.backends.cuda allows stays the set it picks from (a restriction a
user or `benchmarks/benchmark.py --sdpa-backends` makes is kept). On a CPU nothing changes.
"""

from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # torch < 2.3 has no way to choose, and no cuDNN kernel to leave out
    SDPBackend = sdpa_kernel = None
HAS_CUDNN_KERNEL = sdpa_kernel is not None and hasattr(torch.backends.cuda, "cudnn_sdp_enabled")


def preferred_backends(cudnn: bool, flash: bool, efficient: bool, math: bool) -> Optional[List[SDPBackend]]:
    """The kernels to allow, given those torch.backends.cuda allows: all of them but cuDNN's when
    another fused one is allowed; None (torch's own choice) when cuDNN's is not allowed anyway or is
    the only fused kernel allowed."""
    if not cudnn or not (flash or efficient):
        return None
    named = ((SDPBackend.FLASH_ATTENTION, flash), (SDPBackend.EFFICIENT_ATTENTION, efficient), (SDPBackend.MATH, math))
    return [backend for backend, allowed in named if allowed]


def fused_attention(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor] = None, dropout_p: float = 0.0) -> Tensor:
    """F.scaled_dot_product_attention(q, k, v, mask, dropout_p), on CUDA without cuDNN's kernel
    where another is allowed (the module docstring says why). (B, h, T, d_v)."""
    backends = None
    if q.is_cuda and HAS_CUDNN_KERNEL:
        cuda = torch.backends.cuda
        backends = preferred_backends(
            cuda.cudnn_sdp_enabled(),
            cuda.flash_sdp_enabled(),
            cuda.mem_efficient_sdp_enabled(),
            cuda.math_sdp_enabled(),
        )
    if backends is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    with sdpa_kernel(backends):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
