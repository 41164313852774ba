"""Eq. (2), section 3.3: FFN(x) = max(0, x W1 + b1) W2 + b2."""

import torch

from attn_only_plugin.modules import PositionwiseFeedForward


def test_eq2_hand_computed():
    ffn = PositionwiseFeedForward(d_model=2, d_ff=3)
    with torch.no_grad():
        ffn.w1.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        ffn.w1.bias.copy_(torch.tensor([0.0, -5.0, 1.0]))
        ffn.w2.weight.copy_(torch.tensor([[1.0, 1.0, 1.0], [2.0, 0.0, -1.0]]))
        ffn.w2.bias.copy_(torch.tensor([0.5, 0.0]))
    x = torch.tensor([[[1.0, 2.0]]])  # hidden: relu([1, -3, 4]) = [1, 0, 4]
    assert torch.allclose(ffn(x), torch.tensor([[[5.5, -2.0]]]))
    assert ffn(torch.randn(4, 7, 2)).shape == (4, 7, 2)  # position-wise: (B, T, d_model)
