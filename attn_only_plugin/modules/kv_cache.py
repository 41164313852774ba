"""The decoder's self-attention cache for incremental decoding (section 3.2.3: position t attends
to positions <= t, so a step needs the keys and values of every earlier one).

Tensor layout: one buffer for all N decoder layers, (B, N, 2, h, C, d): hypothesis, layer,
keys/values, head, position (C = capacity), features (d = max(d_k, d_v); the keys use the first
d_k, the values the first d_v). The cache is its (B, N, 2, h, S, d) view of the S positions
decoded so far, under SELF_KV in the decoder's cache dict.

Why this layout (fairseq's transformer keeps 2 tensors per layer, concatenates every step and
gathers each of them on every beam reorder):
- a step writes its keys and values into the buffer's spare positions: no copy of the cache;
- a beam reorder is one copy for the whole decoder: the rows that move, in place, when few do
  (most hypotheses keep their place from one step to the next), else a gather of every row into
  a second buffer kept for that purpose (SPARE), after which the two swap. Decoding allocates
  no cache memory except when the spare positions run out (every CACHE_CHUNK steps).
The price is memory: the cache may be held twice once beam search has reordered it.

Under autograd the same layout is built out of place (torch.cat, torch.stack): in-place writes
would overwrite what earlier steps saved for backward.
"""
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

SELF_KV = "self.kv"  # (B, N, 2, h, S, d) view of the active buffer
SPARE = "self.kv.spare"  # (B_cap, N, 2, h, C, d): the buffer the next full gather writes into
CACHE_CHUNK = 32  # positions of spare room a new buffer gets

Cache = Dict[str, Optional[Tensor]]


def _tracks_grad(*tensors: Optional[Tensor]) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _capacity(cached: Tensor) -> int:
    """C when `cached` (B, ..., S, d) is the [:B, ..., :S, :] view of a contiguous
    (B_cap, ..., C, d) buffer (as made here), else 0."""
    *_, S, d = cached.shape
    C = cached.stride(-3) // d if d else 0
    strides, step = [], 1
    for size in reversed((*cached.shape[1:-2], C, d)):  # a contiguous (B_cap, ..., C, d) buffer's
        strides.insert(0, step)
        step *= size
    ours = (C >= S and list(cached.stride()) == [step] + strides and cached.storage_offset() == 0
            and cached.untyped_storage().nbytes() >= cached.size(0) * step * cached.element_size())
    return C if ours else 0


def spare_positions(cached: Tensor) -> int:
    """How many positions `cached` can grow by in place, into its buffer's spare room."""
    return max(0, _capacity(cached) - cached.size(-2))


def _extended(cached: Tensor, T: int) -> Tensor:
    """The same view T positions longer (into the spare room)."""
    return cached.as_strided((*cached.shape[:-2], cached.size(-2) + T, cached.size(-1)), cached.stride())


def _whole_buffer(cached: Tensor) -> Tensor:
    """Every row and position of the (B_cap, N, 2, h, C, d) buffer behind `cached` (_capacity > 0)."""
    rows = cached.untyped_storage().nbytes() // (cached.stride(0) * cached.element_size())
    return cached.as_strided((rows, *cached.shape[1:-2], _capacity(cached), cached.size(-1)), cached.stride())


def layer_keys_values(cache: Cache, layer: int, k: Tensor, v: Tensor) -> Tuple[Tensor, Tensor]:
    """Keys (B, h, S + T, d_k) and values (B, h, S + T, d_v) of decoder layer `layer` up to this
    step, from the step's k (B, h, T, d_k) and v (B, h, T, d_v). Written into the buffer's spare
    positions when it has some (commit() then only lengthens the view), else concatenated out of
    place and parked in the cache until commit() stacks every layer's into a new buffer."""
    T, d_k, d_v = k.size(2), k.size(3), v.size(3)
    joint = cache.get(SELF_KV)  # (B, N, 2, h, S, d), or None before the first step
    if joint is not None and not _tracks_grad(joint, k, v) and spare_positions(joint) >= T:
        S = joint.size(-2)
        kv = _extended(joint, T)[:, layer]  # (B, 2, h, S + T, d) view of the buffer
        kv[:, 0, :, S:, :d_k] = k
        kv[:, 1, :, S:, :d_v] = v
        return kv[:, 0, :, :, :d_k], kv[:, 1, :, :, :d_v]
    if joint is not None:
        k = torch.cat([joint[:, layer, 0, :, :, :d_k], k], dim=2)  # (B, h, S + T, d_k)
        v = torch.cat([joint[:, layer, 1, :, :, :d_v], v], dim=2)  # (B, h, S + T, d_v)
    cache[f"{layer}.self.k.step"], cache[f"{layer}.self.v.step"] = k, v  # parked for commit()
    return k, v


def commit(cache: Cache, layers: int, T: int) -> None:
    """After all `layers` decoder layers ran a step of T positions: the cache grows by T."""
    ks = [cache.pop(f"{i}.self.k.step", None) for i in range(layers)]
    vs = [cache.pop(f"{i}.self.v.step", None) for i in range(layers)]
    if ks[0] is None:  # every layer wrote into the spare room
        cache[SELF_KV] = _extended(cache[SELF_KV], T)
        return
    B, h, S, d_k = ks[0].shape
    d = max(d_k, vs[0].size(-1))
    if _tracks_grad(*ks, *vs):  # (B, N, 2, h, S, d), out of place
        pairs = [torch.stack([F.pad(k, (0, d - d_k)), F.pad(v, (0, d - v.size(-1)))], dim=1) for k, v in zip(ks, vs)]
        cache[SELF_KV] = torch.stack(pairs, dim=1)
        return
    joint = ks[0].new_empty(B, layers, 2, h, S + CACHE_CHUNK, d)[..., :S, :]  # (B, N, 2, h, S, d) of (.., C, d)
    for i, (k, v) in enumerate(zip(ks, vs)):
        joint[:, i, 0, :, :, :d_k] = k
        joint[:, i, 1, :, :, :v.size(-1)] = v
    cache[SELF_KV] = joint
    cache.pop(SPARE, None)  # sized for the old capacity


def reorder(cache: Cache, order: Tensor) -> None:
    """cache[SELF_KV][order] along the hypotheses (beam search: reorder within the beams, drop
    finished sentences), with one copy: in place when fewer than half the rows move, else a
    gather into the spare buffer, which then becomes the active one."""
    joint = cache.get(SELF_KV)
    if joint is None:
        return
    if _tracks_grad(joint):
        cache[SELF_KV] = joint.index_select(0, order)
        return
    n = order.numel()
    if n == joint.size(0):
        moved = (order != torch.arange(n, device=order.device)).nonzero().squeeze(1)  # (M,)
        if 2 * moved.numel() < n:
            if moved.numel():
                joint[moved] = joint.index_select(0, order[moved])  # (M, N, 2, h, S, d): read, then written
            return
    C, shape = max(joint.size(-2), _capacity(joint)), joint.shape
    spare = cache.get(SPARE)
    if (spare is None or spare.size(0) < n or spare.shape[1:-2] != shape[1:-2] or spare.size(-2) != C
            or spare.size(-1) != shape[-1] or spare.dtype != joint.dtype or spare.device != joint.device):
        spare = joint.new_empty(n, *shape[1:-2], C, shape[-1])
    cache[SELF_KV] = torch.index_select(joint, 0, order, out=spare[:n, ..., :shape[-2], :])  # (n, N, 2, h, S, d)
    if _capacity(joint):
        cache[SPARE] = _whole_buffer(joint)  # the next full gather's target
    else:
        cache.pop(SPARE, None)
