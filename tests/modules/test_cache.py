"""modules/cache.py: the self-attention caches of incremental decoding and their beam reorders,
against hand-computed layouts."""

import torch

from attn_only_plugin.modules.cache import CACHE_CHUNK, append_to_cache, moved_rows, reorder_cache, spare_positions


def test_cache_grows_in_place_and_reorders_with_one_copy():
    steps = [torch.randn(3, 2, 1, 4) for _ in range(CACHE_CHUNK + 3)]  # (B, h, 1, d_k) per step
    with torch.no_grad():
        cache = append_to_cache(None, steps[0])
        first = cache.data_ptr()
        for i, new in enumerate(steps[1 : CACHE_CHUNK + 1], start=2):
            cache = append_to_cache(cache, new)
            assert cache.data_ptr() == first and cache.shape == (3, 2, i, 4)  # same buffer: no copy
        assert spare_positions(cache) == 0
        cache = append_to_cache(cache, steps[CACHE_CHUNK + 1])  # full: a new buffer with room again
        assert cache.data_ptr() != first and spare_positions(cache) == CACHE_CHUNK
        assert torch.equal(cache, torch.cat(steps[: CACHE_CHUNK + 2], dim=2))
        order = torch.tensor([2, 2, 0])  # beam search: hypothesis 2 kept twice, 1 dropped
        reordered = reorder_cache(cache, order)
        assert torch.equal(reordered, cache.index_select(0, order)) and spare_positions(reordered) == CACHE_CHUNK
        grown = append_to_cache(reordered, steps[-1])
        assert grown.data_ptr() == reordered.data_ptr()
        assert torch.equal(grown, torch.cat([cache.index_select(0, order), steps[-1]], dim=2))
        assert torch.equal(cache, torch.cat(steps[: CACHE_CHUNK + 2], dim=2))  # the old one untouched


def test_reorder_in_place_moves_only_rows_that_change():
    cache = append_to_cache(None, torch.arange(6.0).view(6, 1, 1, 1).expand(6, 2, 3, 4).contiguous())
    order = torch.tensor([0, 1, 1, 3, 4, 5])
    moved = moved_rows(order)
    assert moved.tolist() == [2]
    out = reorder_cache(cache, order, moved)
    assert out.data_ptr() == cache.data_ptr()  # same buffer, spare room kept
    assert out[:, 0, 0, 0].tolist() == [0, 1, 1, 3, 4, 5]
    assert moved_rows(torch.tensor([1, 0, 3, 2])) is None  # most rows move: one gather instead
    with torch.no_grad():
        assert append_to_cache(out, torch.zeros(6, 2, 1, 4)).data_ptr() == cache.data_ptr()


def test_a_windowed_cache_keeps_its_last_positions_in_a_bounded_buffer():
    """keep = R + 1 (window.py): the view is the last keep positions, grown in place while the
    buffer has room, and a new buffer takes only those: never more than keep + CACHE_CHUNK."""
    steps = [torch.full((2, 1, 1, 3), float(i)) for i in range(3 * CACHE_CHUNK)]  # (B, h, 1, d) per step
    cache, buffers = None, set()
    with torch.no_grad():
        for i, new in enumerate(steps):
            cache = append_to_cache(cache, new, keep=3)
            assert cache[0, 0, :, 0].tolist() == [float(j) for j in range(max(0, i - 2), i + 1)]
            assert cache.untyped_storage().nbytes() <= 2 * (3 + CACHE_CHUNK) * 3 * 4
            buffers.add(cache.untyped_storage().data_ptr())
    assert len(buffers) <= 4  # a copy of 3 positions every CACHE_CHUNK steps, not one per step
