"""Fixed-size self-attention caches (modules/static_cache.py, --static-decoding-cache): beam search
gives the hypotheses of the growing caches (cache.py), their scores to float rounding, every step of a chunk has the
same buffer shapes and the same buffers, and the mask hides exactly the positions not written yet."""

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator

from attn_only_plugin.modules import static_cache
from attn_only_plugin.modules.decoding_state import DecodingState
from attn_only_tools.guards.errors import PluginError
from helpers import build_model, make_dictionary, random_batch


def test_mask_and_buffers_by_hand():
    step = torch.tensor([2])
    mask = static_cache.visible(step, 4, torch.float32)
    assert mask.tolist() == [[0.0, 0.0, 0.0, float("-inf")]]
    buf = static_cache.write(None, torch.ones(2, 1, 1, 3), torch.tensor([0]), 4)  # (2, 1, 4, 3)
    assert buf.shape == (2, 1, 4, 3) and buf[:, :, 0].eq(1).all() and buf[:, :, 1:].eq(0).all()
    same = static_cache.write(buf, 2 * torch.ones(2, 1, 1, 3), torch.tensor([1]), 4)
    assert same.data_ptr() == buf.data_ptr() and same[:, :, 1].eq(2).all()  # in place
    grown = static_cache.write(buf, 3 * torch.ones(2, 1, 1, 3), torch.tensor([4]), 8)  # a new chunk
    assert grown.shape == (2, 1, 8, 3) and grown[:, :, :2].tolist() == buf[:, :, :2].tolist()
    assert grown[:, :, 4].eq(3).all() and grown[:, :, 5:].eq(0).all()
    assert [static_cache.capacity(n) for n in (1, 64, 65)] == [64, 64, 128]


def test_room_reserved_up_front_is_widened_in_place_and_restarted_by_a_new_search():
    """With `reserve`, the buffer is a view of the first C positions of one storage: a new chunk
    widens the view (no copy, the same storage), and a new search's first step (restart) zeroes the
    storage and starts over in it."""
    new = torch.ones(2, 1, 1, 3)  # (B, h, 1, d)
    buf = static_cache.write(None, new, torch.tensor([0]), 4, reserve=12)
    assert buf.shape == (2, 1, 4, 3) and static_cache.room(buf) == 12 and buf[:, :, 0].eq(1).all()
    wide = static_cache.write(buf, 2 * new, torch.tensor([4]), 8, reserve=12)  # a new chunk
    assert wide.shape == (2, 1, 8, 3) and wide.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr()
    assert wide[:, :, [0, 4]].tolist() == [[[[1.0] * 3, [2.0] * 3]]] * 2 and wide[:, :, 5:].eq(0).all()
    again = static_cache.write(wide, 3 * new, torch.tensor([0]), 4, reserve=12, restart=True)  # a new search
    assert again.shape == (2, 1, 4, 3) and again.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr()
    assert again[:, :, 0].eq(3).all() and wide[:, :, 1:].eq(0).all()
    fresh = static_cache.write(None, new, torch.tensor([0]), 4)  # no reserve: just the chunk
    assert static_cache.room(fresh) == 4


def test_reorder_in_place_keeps_the_buffer():
    buf = torch.arange(4.0).view(4, 1, 1, 1).repeat(1, 1, 3, 1)  # (4, 1, 3, 1), row b holds b
    order = torch.tensor([1, 1, 3, 2])
    out = static_cache.reorder_in_place(buf.clone(), order, None)
    assert out[:, 0, 0, 0].tolist() == [1, 1, 3, 2]
    kept = buf.clone()
    assert static_cache.reorder_in_place(kept, order, None).data_ptr() == kept.data_ptr()
    assert static_cache.reorder_in_place(buf.clone(), torch.tensor([2, 0]), None)[:, 0, 0, 0].tolist() == [2, 0]
    # the positions written so far only: the later ones keep what they held (masked, overwritten before read)
    head = static_cache.reorder_in_place(buf.clone(), order, None, written=2)
    assert head[:, 0, :, 0].tolist() == [[1, 1, 0], [1, 1, 1], [3, 3, 2], [2, 2, 3]]


def beam_search(model, d, sample, beam=4, max_len_b=12):
    gen = SequenceGenerator([model], d, beam_size=beam, max_len_a=1, max_len_b=max_len_b)
    with torch.no_grad():
        out = gen.generate([model], sample)
    return [[(h["tokens"].tolist(), h["score"].item(), h["positional_scores"].tolist()) for h in hyps] for hyps in out]


@pytest.mark.parametrize("chunk", [4, 64])
def test_beam_search_equals_the_growing_caches(chunk, monkeypatch):
    """Across chunk boundaries (4: the buffers grow 5 times) and within one chunk; sentences of
    different lengths, so beam search drops finished ones and reorders in place and not."""
    monkeypatch.setattr(static_cache, "STATIC_CHUNK", chunk)
    d = make_dictionary(30)
    model = build_model(d)
    src, _ = random_batch(d, B=3, S=7)
    sample = {"net_input": {"src_tokens": src, "src_lengths": src.ne(d.pad()).sum(1)}}
    growing = beam_search(model, d, sample)
    model.decoder.static_cache = True
    writes = []
    original = static_cache.write
    monkeypatch.setattr(static_cache, "write", lambda *a: writes.append(1) or original(*a))
    fixed = beam_search(model, d, sample)
    assert writes  # the fixed-size caches were used
    assert [[h[0] for h in hyps] for hyps in fixed] == [[h[0] for h in hyps] for hyps in growing]  # same hypotheses
    for hyps, hyps_ref in zip(fixed, growing, strict=True):  # scores to float rounding: a softmax over C, not S,
        for (_, score, steps), (_, score_ref, steps_ref) in zip(hyps, hyps_ref, strict=True):  # positions sums
            assert abs(score - score_ref) < 1e-5  # its terms in another order
            torch.testing.assert_close(torch.tensor(steps), torch.tensor(steps_ref), rtol=0, atol=1e-5)


def test_steps_of_a_chunk_share_shapes_and_buffers(monkeypatch):
    """What a captured CUDA graph needs: within a chunk, while the batch keeps its size, each
    layer's key buffer is the same tensor, of the same shape, step after step, reorders included."""
    d = make_dictionary(30)
    model = build_model(d, static_decoding_cache=True)
    src, _ = random_batch(d, B=2, S=7)
    sample = {"net_input": {"src_tokens": src, "src_lengths": src.ne(d.pad()).sum(1)}}
    seen = []
    original = DecodingState.self_attention

    def spy(state, layer, k, v, window):
        out = original(state, layer, k, v, window)
        if layer == "0.self":
            seen.append((tuple(out[0].shape), out[0].data_ptr()))
        return out

    monkeypatch.setattr(DecodingState, "self_attention", spy)
    beam_search(model, d, sample, beam=2, max_len_b=20)
    full = [s for s in seen if s[0][0] == 4]  # both sentences still in the beam: 2 x beam 2 rows
    assert len(full) > 5 and len(set(full)) == 1 and full[0][0] == (4, 4, 64, 8)


def test_refused_with_windows_and_relative_positions():
    d = make_dictionary(10)
    for variant in (dict(attention_window=2), dict(relative_positions=2)):
        with pytest.raises(PluginError, match="--static-decoding-cache works with full self-attention only"):
            build_model(d, static_decoding_cache=True, **variant)
