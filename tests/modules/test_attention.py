"""Eq. (1) and multi-head attention (section 3.2) against hand-computed values."""

import math

import torch

from attn_only_plugin.modules import MultiHeadAttention, scaled_dot_product_attention


def test_eq1_hand_computed():
    # one head, two queries, two keys, d_k = 2
    q = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]])
    k = torch.tensor([[[[1.0, 0.0], [1.0, 1.0]]]])
    v = torch.tensor([[[[1.0, 2.0], [3.0, 4.0]]]])
    s = 1 / math.sqrt(2)
    # row 0 scores: [1, 1] * s -> weights [0.5, 0.5]; row 1 scores: [0, 1] * s
    w1 = math.exp(s) / (1 + math.exp(s))
    expected = torch.tensor([[[[2.0, 3.0], [(1 - w1) * 1 + w1 * 3, (1 - w1) * 2 + w1 * 4]]]])
    out, w = scaled_dot_product_attention(q, k, v, need_weights=True)
    assert torch.allclose(out, expected, atol=1e-6)
    assert torch.allclose(w[0, 0, 0], torch.tensor([0.5, 0.5]))
    fused, none = scaled_dot_product_attention(q, k, v)
    assert none is None and torch.allclose(fused, expected, atol=1e-6)


def test_mask_and_causal():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8)
    key_mask = torch.tensor([[True, True, True, True], [False, True, True, True]])[:, None, None, :]
    out, w = scaled_dot_product_attention(q, k, v, key_mask, need_weights=True)
    assert torch.all(w[1, :, :, 0] == 0) and torch.allclose(w.sum(-1), torch.ones(2, 3, 4))
    fused, _ = scaled_dot_product_attention(q, k, v, key_mask)
    assert torch.allclose(out, fused, atol=1e-6)
    _, wc = scaled_dot_product_attention(q, k, v, causal=True, need_weights=True)
    assert torch.all(wc.triu(diagonal=1) == 0)


def test_multi_head_equals_per_head_concat():
    """MultiHead = Concat(head_1..head_h) W^O with head_i from the i-th slices of W^Q, W^K, W^V,
    with d_k != d_v != d_model / h (Table 3 rows A/B)."""
    torch.manual_seed(0)
    d_model, h, d_k, d_v = 12, 3, 2, 5
    mha = MultiHeadAttention(d_model, h, d_k, d_v)
    x = torch.randn(2, 4, d_model)
    out, w = mha(x, need_weights=True)
    Wq, Wk, Wv = mha.qkv.weight.split([h * d_k, h * d_k, h * d_v])
    bq, bk, bv = mha.qkv.bias.split([h * d_k, h * d_k, h * d_v])
    heads = []
    for i in range(h):
        qi = x @ Wq[i * d_k : (i + 1) * d_k].T + bq[i * d_k : (i + 1) * d_k]
        ki = x @ Wk[i * d_k : (i + 1) * d_k].T + bk[i * d_k : (i + 1) * d_k]
        vi = x @ Wv[i * d_v : (i + 1) * d_v].T + bv[i * d_v : (i + 1) * d_v]
        heads.append(torch.softmax(qi @ ki.transpose(-1, -2) / math.sqrt(d_k), -1) @ vi)
    expected = mha.out(torch.cat(heads, dim=-1))
    assert out.shape == (2, 4, d_model) and w.shape == (2, h, 4, 4)
    assert torch.allclose(out, expected, atol=1e-5)
    assert torch.allclose(mha(x)[0], out, atol=1e-5)  # fused kernel path, same function


def test_split_heads_puts_a_beams_queries_side_by_side():
    """(B, T, h d) -> (B, h, T, d); with rows = B_s (B = g B_s hypotheses sharing memory rows,
    decoding_state.py) the g hypotheses' queries of a row follow each other: (B_s, h, g T, d)."""
    from attn_only_plugin.modules.attention import split_heads

    x = torch.arange(8.0).view(4, 1, 2)  # B = 4 hypotheses, T = 1, h = 2 heads of d = 1
    assert split_heads(x, 2)[:, :, 0, 0].tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]  # (B, h, T, d)
    beams = split_heads(x, 2, rows=2)  # g = 2 hypotheses per row
    assert beams.shape == (2, 2, 2, 1) and beams[..., 0].tolist() == [[[0, 2], [1, 3]], [[4, 6], [5, 7]]]
