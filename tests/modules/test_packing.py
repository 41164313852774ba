"""Training on real tokens only (modules/packing.py): the same outputs and gradients as the padded
computation, and pads never reach a real position."""

import pytest
import torch

from attn_only_plugin.modules.packing import MIN_PAD_FRACTION, Packing
from helpers import build_model, make_dictionary, random_batch


def test_pack_and_unpack():
    real = torch.tensor([[False, True, True], [True, True, True]])  # (B, T) = (2, 3), one pad
    x = torch.arange(18.0).view(2, 3, 3)  # (B, T, D)
    p = Packing(real)
    rows = p.pack(x)
    assert rows.tolist() == [[3.0, 4.0, 5.0], [6.0, 7.0, 8.0]] + x[1].tolist()
    back = p.unpack(rows)
    assert back[real].equal(x[real]) and back[0, 0].eq(0).all()


def test_packing_only_when_enabled_and_worth_it():
    real = torch.ones(4, 10, dtype=torch.bool)
    assert Packing.of(real, True) is None  # no pads
    real[0, -1] = False  # 1 pad in 40: 2.5%
    assert MIN_PAD_FRACTION > 1 / 40 and Packing.of(real, True) is None
    real[1:, -1] = False  # 4 in 40
    assert Packing.of(real, True) is not None and Packing.of(real, False) is None


def _loss_and_grads(model, src, prev, tgt_real):
    out, _ = model(src, src.ne(1).sum(1), prev)  # (B, T, V)
    loss = torch.log_softmax(out, -1)[tgt_real].logsumexp(-1).sum() + out[tgt_real].square().mean()
    model.zero_grad()
    loss.backward()
    return out[tgt_real], {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("pre_norm,left_pad_target", [(False, False), (True, False), (False, True)])
def test_packed_training_equals_padded(dictionary, monkeypatch, pre_norm, left_pad_target):
    """model.train() with dropout 0 packs (right-padded targets) and must give the outputs and
    gradients of model.eval(), which never packs. Left-padded targets are not packed."""
    model = build_model(dictionary, pre_norm=pre_norm)
    src, prev = random_batch(dictionary, B=3, S=7, T=6)
    prev[0, 3:] = dictionary.pad()  # shorter targets, right-padded
    prev[2, 5:] = dictionary.pad()
    if left_pad_target:
        prev = torch.stack([row.roll(int(row.eq(dictionary.pad()).sum())) for row in prev])
    tgt_real = prev.ne(dictionary.pad())
    packed_calls = []
    monkeypatch.setattr(
        Packing, "pack", lambda self, x, pack=Packing.pack: packed_calls.append(x.shape) or pack(self, x)
    )
    model.eval()
    want_out, want_grads = _loss_and_grads(model, src, prev, tgt_real)
    assert not packed_calls
    model.train()
    got_out, got_grads = _loss_and_grads(model, src, prev, tgt_real)
    packed_shapes = {tuple(shape[:2]) for shape in packed_calls}  # (B, S): encoder, (B, T): decoder
    assert tuple(src.shape) in packed_shapes and (tuple(prev.shape) in packed_shapes) != left_pad_target
    assert torch.allclose(got_out, want_out, atol=1e-5)
    assert want_grads.keys() == got_grads.keys()
    for name, g in want_grads.items():
        assert torch.allclose(got_grads[name], g, atol=1e-5), name


def _saved_for_backward_bytes(model, src, prev):
    """Bytes of the activations autograd keeps for the backward pass (parameters excluded)."""
    storages = {}

    def keep(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        model(src, src.ne(1).sum(1), prev)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(n for ptr, n in storages.items() if ptr not in params)


def test_packing_keeps_less_for_backward(monkeypatch):
    """Packed activations are smaller, and unpacking keeps nothing but the index (index_copy would
    keep each packed projection: more memory than not packing at all)."""
    dictionary = make_dictionary(200)  # logits and FFN activations outweigh attention's, as in real models
    model = build_model(dictionary, d_ff=256).train()
    src, prev = random_batch(dictionary, B=4, S=12, T=12)
    src[:2, :6] = dictionary.pad()  # a quarter of each side is padding
    prev[2:, 6:] = dictionary.pad()
    with_packing = _saved_for_backward_bytes(model, src, prev)
    monkeypatch.setattr("attn_only_plugin.modules.packing.MIN_PAD_FRACTION", 2.0)  # never packs
    assert with_packing < 0.95 * _saved_for_backward_bytes(model, src, prev)


def test_target_packing_only_for_right_padded_targets_in_training():
    """The decoder's one call (modules/packing.py target_packing): right-padded targets pack, a
    left-padded row (a real token after a pad, which causal attention would let see the pad) or
    inference does not."""
    from attn_only_plugin.modules.packing import target_packing

    right = torch.tensor([[5, 6, 7, 1], [5, 6, 1, 1]])  # pad = 1: 3 pads in 8
    left = torch.tensor([[5, 6, 7, 1], [1, 1, 5, 6]])
    packing = target_packing(right, 1, True)
    assert packing.index.tolist() == [0, 1, 2, 4, 5]  # flat positions b T + t of the real tokens
    assert target_packing(left, 1, True) is None and target_packing(right, 1, False) is None
