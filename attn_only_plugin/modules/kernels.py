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

Under torch.compile (compiled.py) the choice is read once, when a layer is traced, and kept in its
graph: reading torch.backends.cuda's switches inside the graph would break it at every attention
call (they return Python bools, which torch.compile cannot trace), and a layer broken into pieces
is recompiled per piece until torch.compile's recompile limit sends it back to eager. So a switch
changed after the first compiled step is not seen by the compiled layers.

With --decode-attention-kernel a decoding step's attention over the fixed-size caches goes to
decode_attention.py's kernel instead, which reads only the keys its mask lets a query see.
"""

from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from . import decode_attention

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


def chooses_kernel(q: Tensor) -> bool:
    """Whether ours chooses the kernel for q: on CUDA, with a torch that has cuDNN's. Tests put
    their own rule here."""
    return q.is_cuda and HAS_CUDNN_KERNEL


@torch.compiler.assume_constant_result
def allowed_backends() -> Optional[List[SDPBackend]]:
    """preferred_backends of the kernels torch.backends.cuda allows now; a constant to
    torch.compile (module docstring)."""
    cuda = torch.backends.cuda
    return preferred_backends(
        cuda.cudnn_sdp_enabled(), cuda.flash_sdp_enabled(), cuda.mem_efficient_sdp_enabled(), cuda.math_sdp_enabled()
    )


def fused_attention(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor] = None, dropout_p: float = 0.0) -> Tensor:
    """F.scaled_dot_product_attention(q, k, v, mask, dropout_p), on CUDA without cuDNN's kernel
    where another is allowed (the module docstring says why); a decoding step with
    --decode-attention-kernel by decode_attention.py's kernel, where it applies. (B, h, T, d_v)."""
    if decode_attention.applies(q, k, v, mask, dropout_p):
        return decode_attention.attend(q, k, v, mask)  # (B, h, 1, d_v), the keys the mask lets it see only
    backends = allowed_backends() if chooses_kernel(q) else None
    if backends is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    with sdpa_kernel(backends):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
