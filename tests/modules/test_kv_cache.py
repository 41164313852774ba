"""modules/kv_cache.py: one self-attention buffer for every decoder layer, grown in place and
reordered with one copy."""
import pytest
import torch

from attn_only_plugin.modules import kv_cache
from attn_only_plugin.modules.kv_cache import CACHE_CHUNK, SELF_KV, SPARE, commit, layer_keys_values, reorder

N, B, h, d_k, d_v = 2, 4, 2, 4, 3  # layers, hypotheses, heads, key and value sizes (d_k != d_v: Table 3 row B)


def _steps(n, seed=0):
    """n steps of (k, v) per layer: [step][layer] = ((B, h, 1, d_k), (B, h, 1, d_v))."""
    g = torch.Generator().manual_seed(seed)
    return [[(torch.randn(B, h, 1, d_k, generator=g), torch.randn(B, h, 1, d_v, generator=g)) for _ in range(N)]
            for _ in range(n)]


def _decode(cache, steps):
    """Runs the steps through every layer as the decoder does; returns the last layer's (k, v)."""
    for step in steps:
        for layer, (k, v) in enumerate(step):
            kv = layer_keys_values(cache, layer, k, v)
        commit(cache, N, 1)
    return kv


def _plain(steps, orders=None):
    """Every layer's (keys, values), (B, N, h, S, d_k) and (B, N, h, S, d_v), built the plain way:
    concatenate each step, gather at orders[t] before step t."""
    ks = vs = None
    for t, step in enumerate(steps):
        if orders and t in orders:
            ks, vs = ks[orders[t]], vs[orders[t]]
        k, v = torch.stack([kv[0] for kv in step], 1), torch.stack([kv[1] for kv in step], 1)
        ks, vs = (k, v) if ks is None else (torch.cat([ks, k], 3), torch.cat([vs, v], 3))
    return ks, vs


def _split(joint):
    return joint[:, :, 0, :, :, :d_k], joint[:, :, 1, :, :, :d_v]


def test_steps_are_written_into_spare_room_until_it_runs_out():
    steps = _steps(CACHE_CHUNK + 2)
    cache = {}
    with torch.no_grad():
        k, v = _decode(cache, steps[:1])
        first = cache[SELF_KV].data_ptr()
        assert cache[SELF_KV].shape == (B, N, 2, h, 1, d_k) and kv_cache.spare_positions(cache[SELF_KV]) == CACHE_CHUNK
        for i in range(2, CACHE_CHUNK + 2):
            k, v = _decode(cache, steps[i - 1:i])
            assert cache[SELF_KV].data_ptr() == first and cache[SELF_KV].size(-2) == i  # no copy
            assert k.data_ptr() == first + (N - 1) * cache[SELF_KV].stride(1) * k.element_size()  # views of it
        assert kv_cache.spare_positions(cache[SELF_KV]) == 0
        k, v = _decode(cache, steps[-1:])  # full: the layers concatenate, commit makes a new buffer with room
        assert cache[SELF_KV].data_ptr() != first and kv_cache.spare_positions(cache[SELF_KV]) == CACHE_CHUNK
    ks, vs = _plain(steps)
    assert all(map(torch.equal, _split(cache[SELF_KV]), (ks, vs)))
    assert torch.equal(k, ks[:, N - 1]) and torch.equal(v, vs[:, N - 1])  # the last layer saw every position


def test_few_moves_are_copied_in_place_many_are_gathered_into_the_spare_buffer():
    steps = _steps(6)
    orders = {2: torch.tensor([0, 1, 1, 3]),  # one row moves: copied in place
              3: torch.tensor([3, 2, 1, 0]),  # every row moves: gathered into a new spare buffer
              4: torch.tensor([1, 1, 0, 0]),  # gathered again, into the first buffer: they swap
              5: torch.tensor([2, 3])}  # the batch shrinks (finished sentences): gathered
    cache, buffers = {}, []
    with torch.no_grad():
        _decode(cache, steps[:2])
        for t, order in orders.items():
            reorder(cache, order)
            buffers.append(cache[SELF_KV].data_ptr())
            assert kv_cache.spare_positions(cache[SELF_KV]) == CACHE_CHUNK + 1 - t  # the room is kept
            _decode(cache, steps[t:t + 1]) if t < 5 else None
        before = cache[SELF_KV].clone()
        reorder(cache, torch.arange(2))  # nothing moves: nothing copied
        assert torch.equal(cache[SELF_KV], before)
    assert buffers[0] != buffers[1] and buffers[2] == buffers[0] and buffers[3] == buffers[1]
    ks, vs = _plain(steps[:5], orders)
    ks, vs = ks[orders[5]], vs[orders[5]]
    assert all(map(torch.equal, _split(cache[SELF_KV]), (ks, vs)))


@pytest.mark.parametrize("change", ["capacity", "dtype", "rows"])
def test_a_spare_that_does_not_fit_is_replaced(change):
    with torch.no_grad():
        cache = {}
        _decode(cache, _steps(2))
        reorder(cache, torch.tensor([1, 0, 3, 2]))
        spare = cache[SPARE]
        cache[SPARE] = {"capacity": spare[..., :-1, :], "dtype": spare.double(), "rows": spare[:2]}[change]
        expected = cache[SELF_KV][[0, 0, 1, 1]]
        reorder(cache, torch.tensor([0, 0, 1, 1]))
        assert cache[SELF_KV].data_ptr() != cache[SPARE].data_ptr() and torch.equal(cache[SELF_KV], expected)
        assert cache[SELF_KV].dtype == torch.float32 and kv_cache.spare_positions(cache[SELF_KV]) == CACHE_CHUNK - 1


def test_under_autograd_the_cache_is_built_out_of_place_and_backpropagates():
    steps = _steps(3)
    for step in steps:
        for k, v in step:
            k.requires_grad_(), v.requires_grad_()
    cache = {}
    _decode(cache, steps[:2])
    reorder(cache, torch.tensor([1, 1, 0, 3]))
    k, v = _decode(cache, steps[2:])
    (k.sum() + v.sum()).backward()  # would fail had a step written into a tensor saved for backward
    ks, vs = _plain(steps, {2: torch.tensor([1, 1, 0, 3])})
    assert all(torch.equal(a.detach(), b.detach()) for a, b in zip(_split(cache[SELF_KV]), (ks, vs)))
    kept = torch.tensor([1.0, 2.0, 0.0, 1.0]).view(B, 1, 1, 1)  # rows 0-3 of step 0 were kept 1, 2, 0, 1 times
    assert torch.equal(steps[0][N - 1][0].grad, kept.expand(B, h, 1, d_k))
    assert torch.equal(steps[0][N - 1][1].grad, kept.expand(B, h, 1, d_v))
