"""modules/window.py: which keys a query sees under --attention-window R, hand-written for a
4-token sentence, and the restricted attention against per-query softmaxes written out."""

import math

import pytest
import torch

from attn_only_plugin.modules import MultiHeadAttention
from attn_only_plugin.modules.window import position_mask, query_key_positions

POS = torch.arange(4)


@pytest.mark.parametrize(
    "R,encoder,decoder",
    [
        (
            1,
            [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]],
            [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]],
        ),
        (
            2,
            [[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1]],
            [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1]],
        ),
        (3, [[1] * 4] * 4, [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]),
    ],
)
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
    q, k = query_key_positions(1, 3, "cpu")  # a decoding step's query after 2 cached positions
    assert q.tolist() == [2] and k.tolist() == [0, 1, 2]
    q, k = query_key_positions(3, 3, "cpu")  # no cache: T = S
    assert q.tolist() == [0, 1, 2] and k.tolist() == [0, 1, 2]


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


@pytest.mark.parametrize("T,R", [(1, 1), (7, 2), (16, 4), (33, 5), (9, 20)])
@pytest.mark.parametrize("causal", [False, True])
def test_banded_attention_equals_the_masked_one(T, R, causal):
    """The band computed block by block (O(r n d)) is the masked full attention (O(n^2 d)): same
    keys per query, padding included (row 1 left-padded), any n against R."""
    from attn_only_plugin.modules import scaled_dot_product_attention
    from attn_only_plugin.modules.window import banded_attention

    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, T, 8), torch.randn(2, 3, T, 8), torch.randn(2, 3, T, 5)
    real = torch.ones(2, T, dtype=torch.bool)
    real[1, : T // 2] = False
    pos = torch.arange(T)
    expected, _ = scaled_dot_product_attention(q, k, v, position_mask(real[:, None, None, :], pos, pos, R, causal))
    assert torch.allclose(banded_attention(q, k, v, R, causal, real), expected, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_long_inputs_take_the_banded_path(monkeypatch, causal):
    """From BANDED_MIN_LENGTH on, training and encoding run banded_attention, with the same result
    as the masked path (and the same gradients); the encoder's row 1 is left-padded."""
    from attn_only_plugin.modules import window

    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, 4, 4, window=2)
    x = torch.randn(2, window.BANDED_MIN_LENGTH, 8, requires_grad=True)
    real = None if causal else torch.arange(window.BANDED_MIN_LENGTH).expand(2, -1) >= torch.tensor([[0], [100]])
    calls = []
    banded = window.banded_attention
    monkeypatch.setattr(
        "attn_only_plugin.modules.attention.banded_attention", lambda *a, **kw: calls.append(1) or banded(*a, **kw)
    )
    out = mha(x, key_mask=real, causal=causal)[0]
    (grad,) = torch.autograd.grad(out.square().sum(), x)
    monkeypatch.setattr("attn_only_plugin.modules.attention.use_banded", lambda n, r: False)
    masked = mha(x, key_mask=real, causal=causal)[0]
    assert calls == [1] and torch.allclose(out, masked, atol=1e-5)
    assert torch.allclose(grad, torch.autograd.grad(masked.square().sum(), x)[0], atol=1e-4)
    # the switch: n from BANDED_MIN_LENGTH on, and a band (r = 2R + 1) of at most a quarter of n
    n = window.BANDED_MIN_LENGTH
    assert window.use_banded(n, 2) and not window.use_banded(n - 1, 2) and not window.use_banded(n, n // 8)
