"""The beam-shared self-attention cache (modules/cache.py) under fairseq's searches: every search
that SequenceGenerator offers gives the same hypotheses with it as with one cache row per
hypothesis (the layout fairseq's own transformer uses)."""

import pytest
import torch
from fairseq import search
from fairseq.sequence_generator import SequenceGenerator

from attn_only_plugin.modules.decoding_state import DecodingState
from helpers import build_model, make_dictionary, random_batch


def _per_hypothesis(state, B, rows, step, device):
    return None  # never share: one self-attention row per hypothesis


SEARCHES = {
    "beam": lambda d: None,
    "diverse_beam": lambda d: search.DiverseBeamSearch(d, num_groups=2, diversity_strength=0.5),
    "sampling": lambda d: search.Sampling(d, sampling_topk=5),
}


@pytest.mark.parametrize(
    "name,variant",
    [(name, {}) for name in sorted(SEARCHES) + ["prefix"]] + [("beam", dict(attention_window=2, relative_positions=2))],
)
def test_shared_cache_gives_the_same_hypotheses(name, variant, monkeypatch):
    """Also with restricted self-attention (a window's own history table) and relative positions."""
    d = make_dictionary(30)
    model = build_model(d, **variant)
    src, _ = random_batch(d, B=3, S=7)
    sample = {"net_input": {"src_tokens": src, "src_lengths": src.ne(d.pad()).sum(1)}}
    prefix = src[:, -3:-1] if name == "prefix" else None  # force the first two target tokens

    def generate():
        gen = SequenceGenerator(
            [model], d, beam_size=4, max_len_a=1, max_len_b=6, search_strategy=SEARCHES.get(name, SEARCHES["beam"])(d)
        )
        torch.manual_seed(0)
        with torch.no_grad():
            out = gen.generate([model], sample, prefix_tokens=prefix)
        return [[(h["tokens"].tolist(), round(float(h["score"]), 4)) for h in hyps] for hyps in out]

    original, shared_steps = DecodingState.history_mask, []

    def spy(state, B, rows, step, device):
        mask = original(state, B, rows, step, device)
        shared_steps.append(mask is not None)
        return mask

    monkeypatch.setattr(DecodingState, "history_mask", spy)
    shared = generate()
    assert all(shared_steps) and len(shared_steps) > 3  # every step ran on the shared cache
    monkeypatch.setattr(DecodingState, "history_mask", _per_hypothesis)
    assert generate() == shared
    if prefix is not None:
        assert all(h[0][0][:2] == p for h, p in zip(shared, prefix.tolist(), strict=True))
