"""Section 5.4 label smoothing against hand-computed values; the loss on real target tokens only."""

import math
from types import SimpleNamespace

import pytest
import torch

from attn_only_plugin.criterions.label_smoothed_ce import (
    LabelSmoothedCrossEntropy,
    label_smoothed_nll_loss,
    target_lprobs,
)
from attn_only_tools.guards.errors import PluginError
from helpers import build_model, random_batch


def test_hand_computed_loss_and_smoothing_mass():
    p = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.3, 0.3, 0.4]])
    target = torch.tensor([0, 2, 1])  # third row is padding (index 1 ignored below)
    eps, K = 0.1, 3
    loss, nll = label_smoothed_nll_loss(p.log(), target, eps, ignore_index=1)
    exp_nll = -math.log(0.7) - math.log(0.8)
    # q' = (1 - eps) one_hot + eps / K: true class gets 1 - eps + eps/K, others eps/K
    q0 = [1 - eps + eps / K, eps / K, eps / K]
    q1 = [eps / K, eps / K, 1 - eps + eps / K]
    exp_loss = -sum(q * math.log(pp) for q, pp in zip(q0, p[0].tolist(), strict=True)) - sum(
        q * math.log(pp) for q, pp in zip(q1, p[1].tolist(), strict=True)
    )
    assert nll.item() == pytest.approx(exp_nll, rel=1e-6)
    assert loss.item() == pytest.approx(exp_loss, rel=1e-6)
    assert sum(q0) == pytest.approx(1.0)


def test_no_smoothing_is_nll():
    lp = torch.log_softmax(torch.randn(5, 7), -1)
    t = torch.randint(0, 7, (5,))
    loss, nll = label_smoothed_nll_loss(lp, t, 0.0, ignore_index=-100)
    assert torch.allclose(loss, nll)


def test_pads_are_masked_not_counted():
    lp = torch.log_softmax(torch.randn(4, 6), -1)
    t = torch.tensor([2, 1, 5, 1])  # 1 = pad
    loss, nll = label_smoothed_nll_loss(lp, t, 0.1, ignore_index=1)
    keep = t.ne(1)
    want_loss, want_nll = label_smoothed_nll_loss(lp[keep], t[keep], 0.1, ignore_index=1)
    assert torch.allclose(loss, want_loss) and torch.allclose(nll, want_nll)


def _sample(dictionary, lengths=(3, 6, 5), S=7):
    """fairseq's collater layout: targets [y_1 .. y_L-1, eos] and decoder inputs [eos, y_1 .. y_L-1],
    both right-padded to the longest."""
    src, prev = random_batch(dictionary, B=len(lengths), S=S, T=max(lengths))
    tgt = torch.full_like(prev, dictionary.pad())
    for b, n in enumerate(lengths):
        tgt[b, : n - 1], tgt[b, n - 1] = prev[b, 1:n], dictionary.eos()
        prev[b, n:] = dictionary.pad()
    return dict(
        net_input=dict(src_tokens=src, src_lengths=src.ne(dictionary.pad()).sum(1), prev_output_tokens=prev),
        target=tgt,
        ntokens=int(tgt.ne(dictionary.pad()).sum()),
    )


def _criterion_loss_and_grads(model, dictionary, sample):
    criterion = LabelSmoothedCrossEntropy(SimpleNamespace(target_dictionary=dictionary), 0.1, report_accuracy=True)
    loss, sample_size, log = criterion(model, sample)
    model.zero_grad()
    loss.backward()
    return loss, log, {n: p.grad.clone() for n, p in model.named_parameters()}


def test_real_tokens_only_equals_every_position(dictionary):
    """Our model in training gives the logits of the real target tokens only (N, V), not (B, T, V):
    the same loss, accuracy and gradients as the padded logits a model without real_only gives."""
    model = build_model(dictionary).train()  # dropout 0: deterministic
    sample = _sample(dictionary)
    lprobs, target = target_lprobs(model, sample, dictionary.pad())
    assert lprobs.shape == (sample["ntokens"], len(dictionary)) and target.ne(dictionary.pad()).all()
    got = _criterion_loss_and_grads(model, dictionary, sample)
    model.gives_real_only = False  # as fairseq's own transformer: every position's logits
    lprobs, _ = target_lprobs(model, sample, dictionary.pad())
    assert lprobs.shape == (sample["target"].numel(), len(dictionary))
    want = _criterion_loss_and_grads(model, dictionary, sample)
    assert torch.allclose(got[0], want[0], atol=1e-5)
    assert got[1]["n_correct"] == want[1]["n_correct"] and got[1]["total"] == want[1]["total"] == sample["ntokens"]
    for name, g in want[2].items():
        assert torch.allclose(got[2][name], g, atol=1e-5), name


def test_targets_not_matching_decoder_inputs_are_refused(dictionary):
    model = build_model(dictionary).train()
    sample = _sample(dictionary)
    sample["target"][0, 3] = dictionary.eos()  # one real token more than the decoder inputs have
    with pytest.raises(PluginError, match="shifted right by one"):
        target_lprobs(model, sample, dictionary.pad())
