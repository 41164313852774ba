"""modules/cache.py: the self-attention caches of incremental decoding and their beam reorders,
against hand-computed layouts."""

import torch

from attn_only_plugin.modules.cache import (
    CACHE_CHUNK,
    append_to_cache,
    history_mask,
    moved_rows,
    new_history,
    own_weights,
    per_hypothesis,
    reorder_cache,
    reorder_history,
    spare_positions,
    window_history_mask,
)


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


def test_history_marks_each_hypothesis_path():
    """2 hypotheses per beam: slot j writes entry t g + j; after a reorder the child inherits its
    parent's path, and the table grows when full."""
    table = new_history(1, 2, "cpu")
    table, mask = history_mask(table, 0)
    assert mask.shape == (1, 1, 2, 2) and mask[0, 0].int().tolist() == [[1, 0], [0, 1]]
    table = reorder_history(table, torch.tensor([0]), torch.tensor([[1, 1]]))  # both continue hypothesis 1
    table, mask = history_mask(table, 1)
    assert mask[0, 0].int().tolist() == [[0, 1, 1, 0], [0, 1, 0, 1]]
    table = reorder_history(table, torch.tensor([0]), torch.tensor([[1, 0]]))  # the two swap
    table, mask = history_mask(table, 2)
    assert mask[0, 0].int().tolist() == [[0, 1, 0, 1, 1, 0], [0, 1, 1, 0, 0, 1]]
    for step in range(3, CACHE_CHUNK + 1):
        table, mask = history_mask(table, step)
    assert mask.shape == (1, 1, 2, 2 * (CACHE_CHUNK + 1)) and table.size(2) == 4 * CACHE_CHUNK
    assert mask.sum(-1).tolist() == [[[CACHE_CHUNK + 1, CACHE_CHUNK + 1]]]  # one entry per step each


def test_reorder_history_drops_finished_sentences():
    table = torch.zeros(3, 2, 4, dtype=torch.bool)
    table[:, 0, 0] = table[:, 1, 1] = True
    table[2, :, 2] = True
    out = reorder_history(table, torch.tensor([2, 0]), torch.tensor([[1, 1], [0, 1]]))
    assert out.int().tolist() == [[[0, 1, 1, 0], [0, 1, 1, 0]], [[1, 0, 0, 0], [0, 1, 0, 0]]]


def test_per_hypothesis_and_own_weights_follow_the_paths():
    """Entries numbered by value: hypothesis paths read off by hand."""
    g, S = 2, 3
    cached = torch.arange(S * g, dtype=torch.float).view(1, 1, S * g, 1).expand(1, 2, S * g, 3).contiguous()
    table = torch.zeros(1, g, S * g, dtype=torch.bool)
    table[0, 0, [0, 3, 4]] = True  # steps 0, 1, 2 through slots 0, 1, 0
    table[0, 1, [0, 2, 5]] = True  # slots 0, 0, 1
    rows = per_hypothesis(cached, table)  # (2, h, S, d)
    assert rows.shape == (2, 2, 3, 3) and rows[:, 0, :, 0].tolist() == [[0, 3, 4], [0, 2, 5]]
    weights = torch.arange(2 * 2 * 6, dtype=torch.float).view(2, 2, 1, 6)  # (B, h, 1, E)
    own = own_weights(weights, table[:, None])  # (B, h, 1, S)
    assert own[0, 0, 0].tolist() == [0, 3, 4] and own[1, 1, 0].tolist() == [18, 20, 23]


def test_masked_entries_change_nothing():
    """Attention over a sentence's entries with the others masked equals attention over the
    hypothesis's own positions alone (Eq. (1) unchanged)."""
    from attn_only_plugin.modules.attention import scaled_dot_product_attention

    torch.manual_seed(0)
    k, v, q = torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4), torch.randn(1, 2, 2, 4)  # g = 2, 3 steps
    table = torch.zeros(1, 2, 6, dtype=torch.bool)
    table[0, 0, [0, 3, 4]] = table[0, 1, [0, 2, 5]] = True
    for need_weights in (False, True):
        y, _ = scaled_dot_product_attention(q, k, v, table[:, None], need_weights=need_weights)
        for j, path in enumerate(([0, 3, 4], [0, 2, 5])):
            alone, _ = scaled_dot_product_attention(q[:, :, j : j + 1], k[:, :, path], v[:, :, path])
            assert torch.allclose(y[:, :, j : j + 1], alone, atol=1e-6)


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
    table, mask = window_history_mask(None, 1, 2, 4, "cpu")  # beam of 2, keep 2 steps = 4 entries
    table = reorder_history(table, None, torch.tensor([[1, 1]]))
    for _ in range(2):
        table, mask = window_history_mask(table, 1, 2, 4, "cpu")
    assert mask[0, 0].int().tolist() == [[1, 0, 1, 0], [0, 1, 0, 1]]
