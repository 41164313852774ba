"""kernels.py: which fused kernel computes eq. (1) on a GPU; the same maths on every path."""

import math

import pytest
import torch
from torch.nn.attention import SDPBackend

from attn_only_plugin.modules.kernels import fused_attention, preferred_backends

FLASH, EFFICIENT, MATH = SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH


@pytest.mark.parametrize(
    "cudnn, flash, efficient, math_, expected",
    [
        (True, True, True, True, [FLASH, EFFICIENT, MATH]),  # torch's defaults: all but cuDNN's
        (True, False, True, False, [EFFICIENT]),  # a user's restriction is kept
        (True, True, False, True, [FLASH, MATH]),
        (False, True, True, True, None),  # cuDNN's already off: torch's own choice
        (True, False, False, True, None),  # cuDNN's the only fused kernel allowed: kept
        (True, False, False, False, None),
    ],
)
def test_cudnn_only_where_nothing_else_is_allowed(cudnn, flash, efficient, math_, expected):
    assert preferred_backends(cudnn, flash, efficient, math_) == expected


def test_fused_attention_is_eq1_with_a_mask():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 6)
    mask = torch.rand(2, 1, 4, 5) > 0.3
    mask[..., 0] = True  # every query sees a key
    scores = (q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(~mask, float("-inf"))  # (B, h, T, S)
    expected = scores.softmax(-1) @ v  # (B, h, T, d_v)
    assert torch.allclose(fused_attention(q, k, v, mask), expected, atol=1e-6)
    assert torch.allclose(fused_attention(q, k, v), (q @ k.transpose(-2, -1) / math.sqrt(8)).softmax(-1) @ v, atol=1e-6)
