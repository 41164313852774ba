"""modules/relative.py: Shaw et al. (2018)'s Eq. (3)-(4) against hand-computed values for a
4-token sentence, and gradients reaching a^K and a^V."""

import math

import torch

from attn_only_plugin.modules import MultiHeadAttention
from attn_only_plugin.modules.relative import RelativePositions

POS = torch.arange(4)


def test_relative_logits_and_values_hand_computed():
    """K = 1, d_k = d_v = 1, one head: a^K = (-1, 0, 2) and a^V = (10, 20, 30) for j - i clipped to
    -1, 0, +1. Logits e_ij = q_i (k_j + a^K_ij) (sqrt(d_k) = 1)."""
    rel = RelativePositions(1, 1, 1)
    with torch.no_grad():
        rel.a_k.copy_(torch.tensor([[-1.0], [0.0], [2.0]]))
        rel.a_v.copy_(torch.tensor([[10.0], [20.0], [30.0]]))
    assert rel.buckets(POS, POS).tolist() == [[1, 2, 2, 2], [0, 1, 2, 2], [0, 0, 1, 2], [0, 0, 0, 1]]
    q = torch.tensor([1.0, 2.0, 0.0, 1.0]).view(1, 1, 4, 1)
    k = torch.tensor([0.0, 1.0, 1.0, 0.0]).view(1, 1, 4, 1)
    v = torch.tensor([1.0, 0.0, 0.0, 0.0]).view(1, 1, 4, 1)
    out, w = rel(q, k, v, POS, POS, need_weights=True)
    logits = torch.tensor(
        [
            [0.0, 3.0, 3.0, 2.0],  # q_0 = 1: (0+0, 1+2, 1+2, 0+2)
            [-2.0, 2.0, 6.0, 4.0],  # q_1 = 2: 2 (0-1, 1+0, 1+2, 0+2)
            [0.0, 0.0, 0.0, 0.0],  # q_2 = 0
            [-1.0, 0.0, 0.0, 0.0],
        ]
    )  # q_3 = 1: (0-1, 1-1, 1-1, 0+0)
    assert torch.allclose(w[0, 0], logits.softmax(-1), atol=1e-6)
    # row 2 is uniform: 0.25 (v_0 = 1) + 0.25 (a^V_-1 + a^V_-1 + a^V_0 + a^V_+1 = 10 + 10 + 20 + 30)
    assert math.isclose(out[0, 0, 2, 0].item(), 0.25 + 17.5, rel_tol=1e-6)
    a_v = torch.tensor([10.0, 20.0, 30.0])[rel.buckets(POS, POS)]  # (T, S)
    assert torch.allclose(out[0, 0, :, 0], (w[0, 0] * (v.view(1, 4) + a_v)).sum(-1), atol=1e-5)


def test_masked_and_causal_relative_attention():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, 4, 4, relative=2)
    x = torch.randn(2, 5, 8)
    _, w = mha(x, causal=True, need_weights=True)
    assert torch.all(w.triu(diagonal=1) == 0) and torch.allclose(w.sum(-1), torch.ones(2, 2, 5))


def test_gradients_reach_a_k_and_a_v():
    """Every distance's vectors get a gradient; causal attention never uses the positive ones."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, 4, 4, relative=1)
    x = torch.randn(2, 5, 8)
    mha(x)[0].square().sum().backward()
    for p in (mha.relative.a_k, mha.relative.a_v):
        assert torch.all(p.grad.abs().sum(-1) > 0)  # (2K + 1,)
        p.grad = None
    mha(x, causal=True)[0].square().sum().backward()
    for p in (mha.relative.a_k, mha.relative.a_v):
        assert torch.all(p.grad[:2].abs().sum(-1) > 0) and torch.all(p.grad[2] == 0)  # j - i = -1, 0 only
