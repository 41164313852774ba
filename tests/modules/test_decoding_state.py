"""modules/decoding_state.py: the one object through which the decoder and its attention keep and
reorder incremental decoding's keys and values; each layout and reorder against the plain cache
(one row per hypothesis, grown by torch.cat, reordered by index_select)."""

import torch

from attn_only_plugin.modules.cache import MAX_SHARED_BEAM, per_hypothesis
from attn_only_plugin.modules.decoding_state import DecodingState

H, D = 2, 3  # heads, d_k = d_v


def _begin(state, step, B, rows):
    memory, pad = torch.zeros(rows, 5, 4), torch.zeros(rows, 5, dtype=torch.bool)  # (B_s, S, d_model), (B_s, S)
    pad[0, 0] = True
    state.begin_step(step, B, memory, pad, torch.float32)


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
        _begin(state, t, B, state.entries["0.cross.k"].size(0))
        k = torch.randn(B, H, 1, D)  # (B, h, T, d_k): this step's keys
        keys, _, mask = state.self_attention("0.self", k, k.clone(), None, None)
        plain["k"] = k if "k" not in plain else torch.cat([plain["k"], k], dim=2)
    return keys, mask


def test_one_row_per_hypothesis_is_the_plain_cache_and_reorders_as_index_select():
    state, plain = DecodingState({}), {}
    cross = torch.randn(4, H, 5, D)  # (B, h, S, d_k): one memory row per hypothesis
    state.entries["0.cross.k"] = state.entries["0.cross.v"] = cross
    orders = {2: torch.tensor([1, 1, 3, 2]), 4: torch.tensor([3, 0])}
    keys, mask = _decode(state, plain, orders, B=4, steps=6)
    assert mask is None and "beam.history" not in state.entries
    assert torch.equal(keys, plain["k"]) and torch.equal(state.entries["0.self.v"], plain["k"])
    assert torch.equal(state.entries["0.cross.k"], cross[[1, 1, 3, 2]][[3, 0]])  # memory rows follow


def test_beam_shared_cache_reorders_as_index_select_of_the_plain_cache():
    """2 sentences, beam 2: every entry stays where it was written; each hypothesis's own entries
    (cache.per_hypothesis) equal the plain cache reordered by index_select, through reorders
    within the beams and a finished sentence."""
    state, plain = DecodingState({}), {}
    state.entries["0.cross.k"] = state.entries["0.cross.v"] = torch.randn(2, H, 5, D)  # (B_s, h, S, d_k)
    orders = {2: torch.tensor([1, 1, 3, 2]), 4: torch.tensor([2, 2])}  # within the beams; then sentence 0 finished
    keys, mask = _decode(state, plain, orders, B=4, steps=6)
    assert keys.shape == (1, H, 2 * 6, D) and mask.shape == (1, 1, 2, 12)  # (B_s, h, g t, d), (B_s, 1, g, E)
    assert state.entries["0.cross.k"].size(0) == 1
    assert torch.equal(per_hypothesis(keys, state.entries["beam.history"]), plain["k"])
    assert mask.eq(0).sum(-1).tolist() == [[[6, 6]]]  # each hypothesis sees its own 6 positions


def test_an_order_that_breaks_a_beam_gives_one_row_per_hypothesis():
    state, plain = DecodingState({}), {}
    state.entries["0.cross.k"] = state.entries["0.cross.v"] = torch.randn(2, H, 5, D)
    keys, mask = _decode(state, plain, {3: torch.tensor([0, 2, 1, 3])}, B=4, steps=5)
    assert mask is None and "beam.history" not in state.entries and state.entries["0.cross.k"].size(0) == 4
    assert torch.equal(keys, plain["k"])


def test_the_beam_shares_only_from_the_first_step_and_up_to_max_shared_beam():
    for g, shared in ((1, False), (2, True), (MAX_SHARED_BEAM, True), (MAX_SHARED_BEAM + 1, False)):
        state = DecodingState({})
        _begin(state, 0, 2 * g, 2)
        assert (state.history is not None) == shared and state.entries_per_step == (g if shared else 1)
    state = DecodingState({})
    _begin(state, 3, 4, 2)  # a state that did not start shared never becomes so
    assert state.history is None
    assert state.memory_mask[0].tolist() == [float("-inf"), 0, 0, 0, 0]  # additive, made once a step


def test_memory_keys_and_values_are_projected_once():
    state, calls = DecodingState({}), []

    def project():
        calls.append(1)
        return torch.ones(2, H, 5, D), torch.zeros(2, H, 5, D)

    for _ in range(3):
        k, v = state.memory("1.cross", project)
    assert len(calls) == 1 and k.sum() == 2 * H * 5 * D and state.entries["1.cross.v"] is v


def test_a_window_keeps_its_last_steps():
    state = DecodingState({}, window=2)
    for t in range(5):
        _begin(state, t, 2, 2)
        k = torch.full((2, H, 1, D), float(t))
        keys, _, _ = state.self_attention("0.self", k, k, None, 2)
    assert keys[0, 0, :, 0].tolist() == [2.0, 3.0, 4.0]  # R + 1 = 3 positions
