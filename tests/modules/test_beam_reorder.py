"""modules/beam_reorder.py: the kernel's in-place reorder of a fixed-size cache equals torch's
buffer[order] on the positions written so far and leaves the later ones as they were, for beams
of 1 to 21 rows, float32 and float16, a buffer that is a view of a larger one; run by Triton's
interpreter on the CPU (where Triton is installed: the CUDA wheels' torch brings it, e.g.
`bash scripts/test_torch.sh 2.11.0`); and where it cannot run, `available` says so."""

import pytest
import torch

from attn_only_plugin.modules import beam_reorder


@pytest.fixture
def interpreter(monkeypatch):
    """Triton's interpreter on: the kernel runs on CPU tensors."""
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def within_beams(B: int, k: int, seed: int) -> torch.Tensor:
    """A beam reorder (B k,): each row's source among its sentence's k rows, some rows in place."""
    g = torch.Generator().manual_seed(seed)
    order = torch.arange(B)[:, None] * k + torch.randint(0, k, (B, k), generator=g)  # (B, k)
    order[0] = torch.arange(k)  # the first sentence's rows all stay
    return order.reshape(-1)  # (B k,)


@pytest.mark.parametrize("k", [1, 4, 5, 21])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_equals_torchs_reorder_of_the_written_positions(interpreter, k, dtype):
    B, h, room, C, d = 3, 2, 128, 64, 8
    full = torch.randn(B * k, h, room, d, generator=torch.Generator().manual_seed(k)).to(dtype)  # (B k, h, room, d)
    buffer = full[:, :, :C]  # (B k, h, C, d), a view of the first C positions
    for last, seed in ((0, 1), (9, 2), (C - 1, 3)):
        order = within_beams(B, k, seed)
        expected = full.clone()
        expected[:, :, : last + 1] = full[order, :, : last + 1]
        assert beam_reorder.available(buffer) and beam_reorder.fits(buffer, order, k)
        out = beam_reorder.reorder_within_groups(buffer, order, k, torch.tensor([last]))
        assert out is buffer and torch.equal(full, expected)  # in place; positions after `last` untouched


def test_a_search_of_reorders_equals_torchs(interpreter):
    """Step after step, as a search reorders: the same buffer as torch's reorder of it."""
    B, k, h, C, d = 4, 4, 3, 64, 16
    ours = torch.randn(B * k, h, C, d)
    theirs = ours.clone()
    for step in range(12):
        order = within_beams(B, k, 10 + step)
        beam_reorder.reorder_within_groups(ours, order, k, torch.tensor([step]))
        theirs[:, :, : step + 1] = theirs[order, :, : step + 1]
        assert torch.equal(ours, theirs)


def test_what_the_kernel_cannot_take(monkeypatch):
    """Not contiguous over (positions, d), or rows not whole beams: `fits` says no; on a CPU with
    Triton's interpreter off, `available` says no."""
    order = torch.arange(8)
    assert not beam_reorder.fits(torch.zeros(8, 2, 4, 16).transpose(2, 3), order, 4)
    assert not beam_reorder.fits(torch.zeros(8, 2, 16, 4), order, 3)
    assert beam_reorder.fits(torch.zeros(8, 2, 16, 4), order, 4)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert not beam_reorder.available(torch.zeros(1))
