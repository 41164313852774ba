"""Section 5.4 label smoothing against hand-computed values."""
import math

import pytest
import torch

from attn_only_plugin.criterions.label_smoothed_ce import label_smoothed_nll_loss


def test_hand_computed_loss_and_smoothing_mass():
    p = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.3, 0.3, 0.4]])
    target = torch.tensor([0, 2, 1])  # third row is padding (index 1 ignored below)
    eps, K = 0.1, 3
    loss, nll = label_smoothed_nll_loss(p.log(), target, eps, ignore_index=1)
    exp_nll = -math.log(0.7) - math.log(0.8)
    # q' = (1 - eps) one_hot + eps / K: true class gets 1 - eps + eps/K, others eps/K
    q0 = [1 - eps + eps / K, eps / K, eps / K]
    q1 = [eps / K, eps / K, 1 - eps + eps / K]
    exp_loss = -sum(q * math.log(pp) for q, pp in zip(q0, p[0].tolist())) \
               - sum(q * math.log(pp) for q, pp in zip(q1, p[1].tolist()))
    assert nll.item() == pytest.approx(exp_nll, rel=1e-6)
    assert loss.item() == pytest.approx(exp_loss, rel=1e-6)
    assert sum(q0) == pytest.approx(1.0)


def test_no_smoothing_is_nll():
    lp = torch.log_softmax(torch.randn(5, 7), -1)
    t = torch.randint(0, 7, (5,))
    loss, nll = label_smoothed_nll_loss(lp, t, 0.0, ignore_index=-100)
    assert torch.allclose(loss, nll)
