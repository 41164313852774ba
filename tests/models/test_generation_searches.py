"""Incremental decoding (modules/decoding_state.py, cache.py) under fairseq's searches: every search
that SequenceGenerator offers gives the same hypotheses with the decoding caches and their beam
reorders as with the full pass over each hypothesis's prefix at every step (no cache)."""

import pytest
import torch
from fairseq import search
from fairseq.sequence_generator import SequenceGenerator

from attn_only_plugin.modules.decoding_state import DecodingState
from helpers import build_model, make_dictionary, random_batch

SEARCHES = {
    "beam": lambda d: None,
    "diverse_beam": lambda d: search.DiverseBeamSearch(d, num_groups=2, diversity_strength=0.5),
    "sampling": lambda d: search.Sampling(d, sampling_topk=5),
}


@pytest.mark.parametrize(
    "name,variant",
    [(name, {}) for name in sorted(SEARCHES) + ["prefix"]] + [("beam", dict(attention_window=2, relative_positions=2))],
)
def test_cached_decoding_gives_the_hypotheses_of_the_full_pass(name, variant, monkeypatch):
    """Also with restricted self-attention (a window's caches keep R + 1 steps) and relative positions."""
    d = make_dictionary(30)
    model = build_model(d, **variant)
    src, _ = random_batch(d, B=3, S=7)
    sample = {"net_input": {"src_tokens": src, "src_lengths": src.ne(d.pad()).sum(1)}}
    prefix = src[:, -3:-1] if name == "prefix" else None  # force the first two target tokens

    def generate(cached):
        gen = SequenceGenerator(
            [model], d, beam_size=4, max_len_a=1, max_len_b=6, search_strategy=SEARCHES.get(name, SEARCHES["beam"])(d)
        )
        gen.model.has_incremental = cached  # False: fairseq runs the decoder's full pass every step
        torch.manual_seed(0)
        with torch.no_grad():
            out = gen.generate([model], sample, prefix_tokens=prefix)
        return [[(h["tokens"].tolist(), round(float(h["score"]), 4)) for h in hyps] for hyps in out]

    original, cached_steps = DecodingState.self_attention, []

    def spy(state, *args):
        cached_steps.append(1)
        return original(state, *args)

    monkeypatch.setattr(DecodingState, "self_attention", spy)
    cached = generate(True)
    assert len(cached_steps) > 3 * len(model.decoder.layers)  # every layer ran on the caches, step after step
    steps = len(cached_steps)
    assert generate(False) == cached and len(cached_steps) == steps  # the reference used no cache
    if prefix is not None:
        assert all(h[0][0][:2] == p for h, p in zip(cached, prefix.tolist(), strict=True))
