"""modules/decoding_state.py: the one object through which the decoder and its attention keep and
reorder incremental decoding's keys and values, against the plain cache (one row per hypothesis,
grown by torch.cat, reordered by index_select)."""

import torch

from attn_only_plugin.modules.decoding_state import DecodingState

H, D = 2, 3  # heads, d_k = d_v


def _begin(state, rows):
    pad = torch.zeros(rows, 5, dtype=torch.bool)  # (B_s, S)
    pad[0, 0] = True
    state.begin_step(pad, torch.float32)


def _decode(state, plain, orders, B, steps):
    """`steps` steps of B hypotheses on the memory rows of the state's encoder-decoder keys
    through the state, and the same keys appended to a plain cache (B, h, t, d); order
    `orders[t]` before step t, on both."""
    torch.manual_seed(0)
    for t in range(steps):
        if t in orders:
            state.reorder(orders[t])
            plain["k"] = plain["k"].index_select(0, orders[t])
            B = orders[t].numel()
        _begin(state, state.entries["0.cross.k"].size(0))
        k = torch.randn(B, H, 1, D)  # (B, h, T, d_k): this step's keys
        keys, _ = state.self_attention("0.self", k, k.clone(), None)
        plain["k"] = k if "k" not in plain else torch.cat([plain["k"], k], dim=2)
    return keys


def test_one_row_per_hypothesis_is_the_plain_cache_and_reorders_as_index_select():
    state, plain = DecodingState({}), {}
    cross = torch.randn(4, H, 5, D)  # (B, h, S, d_k): one memory row per hypothesis
    state.entries["0.cross.k"] = state.entries["0.cross.v"] = cross
    orders = {2: torch.tensor([1, 1, 3, 2]), 4: torch.tensor([3, 0])}
    keys = _decode(state, plain, orders, B=4, steps=6)
    assert set(state.entries) == {"0.self.k", "0.self.v", "0.cross.k", "0.cross.v"}  # fairseq's entries, no others
    assert torch.equal(keys, plain["k"]) and torch.equal(state.entries["0.self.v"], plain["k"])
    assert torch.equal(state.entries["0.cross.k"], cross[[1, 1, 3, 2]][[3, 0]])  # memory rows follow


def test_a_beam_on_shared_memory_rows_reorders_as_index_select_of_the_plain_cache():
    """2 sentences, beam 2: the encoder-decoder keys stay one row per sentence through reorders
    within the beams and a finished sentence, and the self-attention keys, one row per
    hypothesis, equal the plain cache reordered by index_select."""
    state, plain = DecodingState({}), {}
    cross = torch.randn(2, H, 5, D)  # (B_s, h, S, d_k)
    state.entries["0.cross.k"] = state.entries["0.cross.v"] = cross
    orders = {2: torch.tensor([1, 1, 3, 2]), 4: torch.tensor([2, 2])}  # within the beams; then sentence 0 finished
    keys = _decode(state, plain, orders, B=4, steps=6)
    assert keys.shape == (2, H, 6, D) and torch.equal(keys, plain["k"])  # (B, h, t, d)
    assert torch.equal(state.entries["0.cross.k"], cross[1:])  # the second sentence's row, never copied per hypothesis


def test_an_order_that_breaks_a_beam_gives_one_memory_row_per_hypothesis():
    state, plain = DecodingState({}), {}
    cross = torch.randn(2, H, 5, D)
    state.entries["0.cross.k"] = state.entries["0.cross.v"] = cross
    keys = _decode(state, plain, {3: torch.tensor([0, 2, 1, 3])}, B=4, steps=5)
    assert torch.equal(state.entries["0.cross.k"], cross[[0, 1, 0, 1]]) and torch.equal(keys, plain["k"])


def test_a_reorder_that_moves_few_hypotheses_copies_them_in_place():
    """Beam search keeps most hypotheses where they are: only the rows that change are written,
    into the same buffer (cache.moved_rows); the result is still index_select's."""
    state, plain = DecodingState({}), {}
    state.entries["0.cross.k"] = state.entries["0.cross.v"] = torch.randn(1, H, 5, D)  # one sentence, beam 4
    with torch.no_grad():
        _decode(state, plain, {}, B=4, steps=3)
        buffer = state.entries["0.self.k"].data_ptr()
        keys = _decode(state, plain, {0: torch.tensor([0, 1, 1, 3])}, B=4, steps=1)
    assert state.entries["0.self.k"].data_ptr() == buffer and torch.equal(keys, plain["k"])


def test_the_memory_is_projected_at_a_search_first_step_into_the_last_searchs_tensors():
    """Encoder-decoder keys and values: projected at step 0, kept after; a new search over the same
    state projects again at its step 0, into the tensors of the same shape it holds (a CUDA graph of
    the steps reads them there), and into new ones for another shape."""
    state = DecodingState({})
    memories = [torch.randn(rows, H, 5, D) for rows in (2, 2, 2, 2, 3, 3)]  # (B_s, h, S, d), k and v by turns
    calls = []

    def project():
        calls.append(1)
        return memories[2 * len(calls) - 2], memories[2 * len(calls) - 1]

    def step(t, rows=2):
        state.begin_step(torch.zeros(rows, 5, dtype=torch.bool), torch.float32, step=t)
        return state.memory("0.cross", project)

    k, v = step(0)
    assert step(1) == (k, v) and len(calls) == 1  # kept
    again = step(0)  # a new search
    assert again[0] is k and again[1] is v and len(calls) == 2  # projected, into the same tensors
    assert torch.equal(k, memories[2]) and torch.equal(v, memories[3])
    other = step(0, rows=3)  # a new search of another shape
    assert other[0] is memories[4] and other[1] is memories[5]


def test_the_memory_mask_is_additive_and_made_once_a_step():
    state = DecodingState({})
    _begin(state, 2)
    assert state.memory_mask[0].tolist() == [float("-inf"), 0, 0, 0, 0]  # (B_s, S): 0 / -inf


def test_memory_keys_and_values_are_projected_once():
    state, calls = DecodingState({}), []

    def project():
        calls.append(1)
        return torch.ones(2, H, 5, D), torch.zeros(2, H, 5, D)

    for _ in range(3):
        k, v = state.memory("1.cross", project)
    assert len(calls) == 1 and k.sum() == 2 * H * 5 * D and state.entries["1.cross.v"] is v


def test_a_window_keeps_its_last_steps():
    state = DecodingState({})
    for t in range(5):
        _begin(state, 2)
        k = torch.full((2, H, 1, D), float(t))
        keys, _ = state.self_attention("0.self", k, k, 2)
    assert keys[0, 0, :, 0].tolist() == [2.0, 3.0, 4.0]  # R + 1 = 3 positions
