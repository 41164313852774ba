"""Eq. (1), section 3.2.1, on packed rows: attention over each sentence's real tokens with
FlashAttention's variable-length kernel. A speed path beside attention.py's maths, not the paper's.

Not in the paper, and no change to its maths. Training packs each batch's real tokens (packing.py),
but attention, the one step that mixes positions, unpacks them into a padded (B, h, T, d_k) batch
and packs its output back; the kernel then computes every sentence at the batch's longest length
and masks the pads. `--varlen-attention` skips both moves: the kernel reads the N packed rows
(N, h, d_k) and each sentence's run of them (packing.py's sequences), so a sentence's queries see
its own keys only, and in the decoder's self-attention only those up to their own position
(section 3.2.3). The same softmax(Q K^T / sqrt(d_k)) V to float rounding, on fewer numbers.

The kernel is torch's (torch.nn.attention.varlen, torch >= 2.10), on CUDA in float16 or bfloat16
(fairseq-train --fp16 or --bf16, or autocast to either), with d_k = d_v <= 256 and a multiple of 8,
and without dropout on the attention weights (the translation presets' attention_dropout is 0);
wherever one of these fails, attention takes attention.py's padded path, so on a CPU nothing
changes. Beam search and validation never pack, so they never come here.

Tensor layout: packed rows, q (N, h, d_k), k (N_s, h, d_k), v (N_s, h, d_v); out (N, h, d_v).
"""

import inspect
from typing import Optional

import torch
from torch import Tensor

from .packing import Packing

try:
    from torch.nn.attention.varlen import varlen_attn
except ImportError:  # torch < 2.10: no variable-length kernel; the padded path
    varlen_attn = None

HALF = (torch.float16, torch.bfloat16)


def causal_arguments(kernel) -> dict:
    """How torch's varlen_attn `kernel` is told section 3.2.3's mask: is_causal=True in its first
    version, a window of (-1, 0) (every earlier key, no later one) since; {} without the kernel."""
    if kernel is None:
        return {}
    return {"window_size": (-1, 0)} if "window_size" in inspect.signature(kernel).parameters else {"is_causal": True}


CAUSAL = causal_arguments(varlen_attn)  # read once: torch.compile traces no signature


def flash_varlen(q: Tensor, k: Tensor, v: Tensor, queries: Packing, keys: Packing, causal: bool) -> Tensor:
    """torch's varlen_attn on the rows of `queries` against those of `keys`: (N, h, d_v); causal
    with the same runs of queries and keys is section 3.2.3's mask."""
    (cu_q, max_q), (cu_k, max_k) = queries.sequences, keys.sequences
    return varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, **(CAUSAL if causal else {}))  # (N, h, d_v)


KERNEL = flash_varlen  # tests put a reference of the same maths on the CPU here


def kernel_runs(x: Tensor) -> bool:
    """Whether the kernel takes x's projections: on CUDA in float16 or bfloat16 (x itself, or
    autocast to either). Tests put their own rule here."""
    if varlen_attn is None or not x.is_cuda:
        return False
    return x.dtype in HALF or (torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda") in HALF)


def applies(
    x: Tensor, packing: Optional[Packing], keys: Optional[Packing], d_k: int, d_v: int, dropout_p: float, plain: bool
) -> bool:
    """Whether this attention call runs on the packed rows: training packs the queries with
    --varlen-attention, and the keys (`keys`: the queries' own Packing in self-attention, the
    memory's in encoder-decoder attention), the heads' sizes suit the kernel, no dropout on the
    weights, and `plain` (full attention, no weights asked for: no window, no relative positions,
    no attention plot) on a device where the kernel runs."""
    if packing is None or not packing.varlen or keys is None or not keys.varlen or not plain or dropout_p > 0.0:
        return False
    return d_k == d_v and d_k % 8 == 0 and d_k <= 256 and kernel_runs(x)


def packed_attention(q: Tensor, k: Tensor, v: Tensor, queries: Packing, keys: Packing, causal: bool) -> Tensor:
    """softmax(Q K^T / sqrt(d_k)) V per sentence over packed rows (module docstring): (N, h, d_v)."""
    return KERNEL(q, k, v, queries, keys, causal)
