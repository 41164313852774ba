"""Beam search's reorder of the fixed-size self-attention caches in one pass, in place
(`--beam-reorder-kernel`): speed only, not the paper's. Section 6.1 decodes by beam search; after
each step every hypothesis goes on from one of its sentence's k hypotheses, and each layer's
cached keys and values of the earlier positions (section 3.2.3's masked self-attention) follow it:
row r takes row order[r]. Eq. (1) is unchanged: the caches hold the same values as before.

static_cache.reorder_in_place does it with torch's ops: the positions written so far of every row
gathered into a new tensor (index_select) and copied back, so each element is read twice and
written twice, rows that keep their place included. Here a Triton kernel reads a moved row's
source once and writes it once, and leaves a row that keeps its place untouched. In place is safe
because a hypothesis only ever goes on from its own sentence's k rows (a search over a batch that
keeps its size, tasks/batched_search.py) and one program reads all k source rows of its block of
positions before it writes any of them (a barrier between the loads and the stores). The number of
positions written so far is read on the device, from the step's (1,) position, so the launch asks
the host nothing.

Needs Triton (PyTorch's CUDA wheels bring it) and a CUDA tensor; on a CPU, Triton's interpreter
(TRITON_INTERPRET=1) runs the same kernel, as the tests do. Elsewhere `available` says no and the
caller keeps torch's ops.

Tensor layout: a cache buffer (B k, h, C, d), its (C, d) positions contiguous in each (row, head)
(a view of the first C positions of a larger buffer allowed); order (B k,), each row's source,
row b k + j in sentence b; last (1,) long, the last position written.
"""

import functools
import importlib.util

from torch import Tensor

TILE = 4096  # elements a program moves: k rows x BLOCK positions' values; not the paper's, not tuned


@functools.cache
def installed() -> bool:
    """Whether Triton can be imported (looked up once)."""
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter, on the CPU (TRITON_INTERPRET=1)."""
    from triton import knobs

    return bool(knobs.runtime.interpret)


def available(x: Tensor) -> bool:
    """Whether the kernel can run on x's device: Triton is installed and x is on CUDA, or Triton's
    interpreter is on."""
    return installed() and (x.is_cuda or interpreting())


def fits(buffer: Tensor, order: Tensor, k: int) -> bool:
    """Whether the kernel can take this buffer (B k, h, C, d) and order (B k,): positions and
    features contiguous within a (row, head), whole groups of k rows."""
    rows, _, _, d = buffer.shape
    return buffer.stride(3) == 1 and buffer.stride(2) == d and order.numel() == rows and rows % k == 0


def reorder_within_groups(buffer: Tensor, order: Tensor, k: int, last: Tensor) -> Tensor:
    """buffer[order] in place for positions 0..last, each row's source among its group's k rows
    (rows g k .. g k + k - 1). Returns the buffer, (B k, h, C, d)."""
    rows, h, C, d = buffer.shape
    group = power_of_2_at_least(k)
    block = max(16, TILE // group)  # values of one (row, head) a program moves
    grid = (rows // k, h, -(-C * d // block))
    kernel(interpreting())[grid](
        buffer, order, last, buffer.stride(0), buffer.stride(1), d, K=k, GROUP=group, BLOCK=block
    )
    return buffer


def power_of_2_at_least(n: int) -> int:
    return 1 << (n - 1).bit_length()


@functools.cache
def kernel(interpret: bool):
    """The Triton kernel, made at its first use (compiled, or interpreted when `interpret`: Triton
    decides which when a function is decorated). One program per (group, head, block of positions)."""
    import triton
    import triton.language as tl

    @triton.jit
    def reorder(
        buf, order, last, row_stride, head_stride, d, K: tl.constexpr, GROUP: tl.constexpr, BLOCK: tl.constexpr
    ):
        g, head, block = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        j = tl.arange(0, GROUP)  # (GROUP,) the group's rows, padded to a power of 2
        dst = g * K + j  # (GROUP,) rows written
        src = tl.load(order + dst, mask=j < K, other=0)  # (GROUP,) their sources
        at = block * BLOCK + tl.arange(0, BLOCK)  # (BLOCK,) offsets within (positions, d) of a (row, head)
        written = (tl.load(last) + 1) * d  # values written so far in a (row, head)
        moves = ((j < K) & (src != dst))[:, None] & (at < written)[None, :]  # (GROUP, BLOCK)
        base = buf + head * head_stride + at[None, :]  # (1, BLOCK) pointers
        values = tl.load(base + src[:, None].to(tl.int64) * row_stride, mask=moves)  # (GROUP, BLOCK)
        tl.debug_barrier()  # every read of the group's block before any write to it
        tl.store(base + dst[:, None].to(tl.int64) * row_stride, values, mask=moves)

    return reorder
