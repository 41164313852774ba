"""modules/window.py: which keys a query sees under --attention-window R, hand-written for a
4-token sentence, and the restricted attention against per-query softmaxes written out."""
import math

import pytest
import torch

from attn_only_plugin.modules import MultiHeadAttention
from attn_only_plugin.modules.window import position_mask, query_key_positions

POS = torch.arange(4)


@pytest.mark.parametrize("R,encoder,decoder", [
    (1, [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]],
        [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]),
    (2, [[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1]],
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1]]),
    (3, [[1] * 4] * 4, [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]),
])
def test_keys_each_query_sees(R, encoder, decoder):
    """Encoder: |i - j| <= R; decoder: the query and its R predecessors."""
    assert position_mask(None, POS, POS, R, causal=False).int().tolist() == encoder
    assert position_mask(None, POS, POS, R, causal=True).int().tolist() == decoder


def test_padding_and_a_pad_query_sees_itself():
    """Left-padded: position 0 is a pad. Real queries never see it; the pad query, whose window
    (R = 1) holds only itself and a real token, sees itself too so its softmax row is not empty."""
    real = torch.tensor([[False, True, True, True]])[:, None, None, :]  # (B, 1, 1, S)
    mask = position_mask(real, POS, POS, 1, causal=False)  # (B, 1, T, S)
    assert mask[0, 0].int().tolist() == [[1, 1, 0, 0], [0, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]]


def test_positions_of_a_cached_step():
    q, k = query_key_positions(1, 3, 1, "cpu")  # one row per hypothesis: 3 cached positions
    assert q.tolist() == [2] and k.tolist() == [0, 1, 2]
    q, k = query_key_positions(2, 6, 2, "cpu")  # shared by a beam of 2: 2 entries per step
    assert q.tolist() == [2, 2] and k.tolist() == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("causal", [False, True])
def test_restricted_attention_is_softmax_over_the_window(causal):
    torch.manual_seed(0)
    d_model, h, R = 8, 2, 1
    mha = MultiHeadAttention(d_model, h, 4, 4, window=R)
    x = torch.randn(1, 4, d_model)
    out, w = mha(x, causal=causal, need_weights=True)
    q, k, v = mha.qkv(x).view(1, 4, 3, h, 4).unbind(2)  # (B, T, h, d)
    heads = []
    for i in range(4):
        seen = [j for j in range(4) if abs(i - j) <= R and (j <= i or not causal)]
        scores = torch.einsum("bhd,bshd->bhs", q[:, i], k[:, seen]) / math.sqrt(4)  # (B, h, |seen|)
        heads.append(torch.einsum("bhs,bshd->bhd", scores.softmax(-1), v[:, seen]).flatten(1))  # (B, h d)
    assert torch.allclose(out, mha.out(torch.stack(heads, 1)), atol=1e-5)
    assert torch.allclose(mha(x, causal=causal)[0], out, atol=1e-5)  # fused kernel path
    assert torch.all(w[0, :, 0, 2:] == 0) and torch.all(w[0, :, 3, :2] == 0)
