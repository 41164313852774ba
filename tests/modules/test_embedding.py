"""Section 3.4/3.5: sinusoidal encodings, sqrt(d_model) scaling, positions from 0."""

import math

import pytest
import torch
from torch import nn

from attn_only_plugin.modules import TransformerEmbedding, sinusoid_table
from attn_only_tools.guards.errors import PluginError


def test_sinusoid_hand_computed():
    pe = sinusoid_table(5, 6)
    for pos in range(5):
        for i in range(3):
            angle = pos / 10000 ** (2 * i / 6)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    assert torch.equal(pe[0], torch.tensor([0.0, 1.0] * 3))  # position 0: sin 0, cos 0
    assert sinusoid_table(3, 5).shape == (3, 5)  # odd d_model works


def test_scaling_and_left_padding():
    tokens = nn.Embedding(10, 4, padding_idx=1)
    emb = TransformerEmbedding(tokens, max_positions=8, learned=False, dropout=0.0)
    a = emb(torch.tensor([[5, 6, 2]]))
    b = emb(torch.tensor([[1, 1, 5, 6, 2]]))  # same sentence, left-padded
    assert torch.allclose(a[0], b[0, 2:])  # positions count from the first real token
    expected0 = 2.0 * tokens.weight[5] + sinusoid_table(1, 4)[0]  # sqrt(4) = 2, position 0
    assert torch.allclose(a[0, 0], expected0)
    step = emb(torch.tensor([[6]]), step=1)  # incremental: token at position 1
    assert torch.allclose(step[0, 0], a[0, 1])


def test_max_positions_error():
    emb = TransformerEmbedding(nn.Embedding(10, 4, padding_idx=1), 4, learned=True, dropout=0.0)
    with pytest.raises(PluginError, match="exceeds the model's maximum of 4"):
        emb(torch.full((1, 5), 3))
    with pytest.raises(PluginError, match="exceeds"):
        emb(torch.tensor([[3]]), step=4)
