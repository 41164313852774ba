"""modules/decode_attention.py: the decoding step's kernel gives Eq. (1) (attention.py's written-out
maths) over the keys its mask lets each query see, with the fixed-size caches' masks (one for all
rows, 0 up to the step and -inf after) and per-row masks (pads), float32 and float16, queries
that are views of the fused projection; kernels.fused_attention takes it only inside `enabled()`
and only for the calls it applies to. Run by Triton's interpreter on the CPU where Triton is
installed (the CUDA wheels' torch brings it: `bash scripts/test_torch.sh 2.11.0`)."""

import pytest
import torch

from attn_only_plugin.modules import decode_attention, kernels
from attn_only_plugin.modules.attention import scaled_dot_product_attention


@pytest.fixture
def interpreter(monkeypatch):
    """Triton's interpreter on: the kernel runs on CPU tensors."""
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def step_inputs(B=5, h=3, C=128, d=16, dtype=torch.float32, seed=0):
    """One decoding step: queries (B, h, 1, d) as views of a fused (B, 1, 3 h d) projection, and
    key and value buffers (B, h, C, d), views of the first C positions of larger ones."""
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(B, 1, 3 * h * d, generator=g).to(dtype)  # (B, 1, 3 h d)
    q = qkv[..., : h * d].view(B, 1, h, d).transpose(1, 2)  # (B, h, 1, d), a view
    k, v = (torch.randn(B, h, C + 64, d, generator=g).to(dtype)[:, :, :C] for _ in range(2))  # (B, h, C, d)
    return q, k, v


def static_mask(C: int, last: int) -> torch.Tensor:
    """A fixed-size cache's mask at step `last`: 0 up to it, -inf after; (1, 1, 1, C)."""
    return torch.zeros(1, 1, 1, C).masked_fill_(torch.arange(C) > last, float("-inf"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("C, last", [(64, 0), (64, 40), (128, 63), (128, 64), (128, 127)])
def test_equals_eq_1_over_the_seen_keys(interpreter, dtype, C, last):
    q, k, v = step_inputs(C=C, dtype=dtype)
    mask = static_mask(C, last).to(dtype)
    with decode_attention.enabled():
        assert decode_attention.applies(q, k, v, mask, 0.0)
        out = decode_attention.attend(q, k, v, mask)
    _, weights = scaled_dot_product_attention(q.float(), k.float(), v.float(), mask.float(), need_weights=True)
    expected = weights[..., : last + 1] @ v.float()[:, :, : last + 1]  # (B, h, 1, d): the seen keys only
    assert out.shape == (5, 3, 1, 16) and out.dtype == dtype
    torch.testing.assert_close(out.float(), expected, rtol=0, atol=1e-5 if dtype == torch.float32 else 2e-3)


@pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning")  # the interpreter's 0 / 0
def test_per_row_masks_and_rows_that_see_nothing(interpreter):
    """A mask per row (pads at the front, whole blocks of them included): Eq. (1) over each row's
    own keys; a row that may see no key gives NaN, as torch's kernel does."""
    q, k, v = step_inputs(B=4, C=128)
    pads = torch.tensor([0, 3, 70, 128])  # keys masked at the front of each row
    mask = torch.zeros(4, 1, 1, 128).masked_fill_((torch.arange(128) < pads[:, None])[:, None, None, :], float("-inf"))
    with decode_attention.enabled():
        out = decode_attention.attend(q, k, v, mask)
    expected, _ = scaled_dot_product_attention(q, k, v, mask, need_weights=True)
    torch.testing.assert_close(out[:3], expected[:3], rtol=0, atol=1e-5)
    assert out[3].isnan().all()


def test_fused_attention_takes_it_only_inside_enabled_and_where_it_applies(interpreter, monkeypatch):
    calls, attend = [], decode_attention.attend
    monkeypatch.setattr(decode_attention, "attend", lambda *a: calls.append(1) or attend(*a))
    q, k, v = step_inputs(C=64)
    mask = static_mask(64, 10)
    reference = kernels.fused_attention(q, k, v, mask)
    assert calls == []  # not enabled
    with decode_attention.enabled():
        torch.testing.assert_close(kernels.fused_attention(q, k, v, mask), reference, rtol=0, atol=1e-5)
        assert calls == [1]
        q2 = torch.cat([q, q], dim=2)  # (B, h, 2, d): not one query a row
        refused = [
            (q2, k, v, mask, 0.0),
            (q, k, v, mask, 0.1),  # dropout
            (q, k, v, None, 0.0),  # no mask
            (q, k, v, mask == 0, 0.0),  # a boolean mask
            (q, k[:, :, :40], v[:, :, :40], mask[..., :40], 0.0),  # keys not a multiple of 64
            (q[..., :12], k[..., :12], v, mask, 0.0),  # d_k not a power of 2
        ]
        assert not any(decode_attention.applies(*args) for args in refused)
    monkeypatch.delenv("TRITON_INTERPRET")
    with decode_attention.enabled():
        assert not decode_attention.applies(q, k, v, mask, 0.0)  # a CPU without the interpreter
