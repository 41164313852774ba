"""The loss straight from the logits (criterions/fused_softmax.py, --fused-softmax-loss): the
hand-computed smoothed loss, and label_smoothed_nll_loss on log_softmax's loss and gradients, over
chunks, ignored rows, half-precision logits and through torch.compile's tracing; the criterion
with the flag gives the plain criterion's loss and gradients."""

import math
from types import SimpleNamespace

import pytest
import torch

from attn_only_plugin.criterions import fused_softmax
from attn_only_plugin.criterions.fused_softmax import fused_label_smoothed_loss
from attn_only_plugin.criterions.label_smoothed_ce import LabelSmoothedCrossEntropy, label_smoothed_nll_loss
from helpers import build_model, random_batch


def test_hand_computed():
    """Logits log(0.7, 0.2, 0.1) (already normalised: lse = 0), target 0, eps 0.1: nll = -log 0.7,
    loss = 0.9 (-log 0.7) + 0.1 mean(-log p); a second row ignored."""
    p = torch.tensor([[0.7, 0.2, 0.1], [0.5, 0.25, 0.25]], dtype=torch.float64)
    loss, nll = fused_label_smoothed_loss(p.log(), torch.tensor([0, 1]), 0.1, ignore_index=1)
    assert nll.item() == pytest.approx(-math.log(0.7), rel=1e-12)
    uniform = -(math.log(0.7) + math.log(0.2) + math.log(0.1)) / 3
    assert loss.item() == pytest.approx(0.9 * -math.log(0.7) + 0.1 * uniform, rel=1e-12)


@pytest.mark.parametrize("chunk", [2, 8192])
def test_loss_and_gradients_of_the_plain_path(monkeypatch, chunk):
    monkeypatch.setattr(fused_softmax, "CHUNK_ROWS", chunk)
    torch.manual_seed(0)
    logits = (3 * torch.randn(7, 11, dtype=torch.float64)).requires_grad_()
    target = torch.tensor([3, 1, 0, 10, 1, 5, 2])  # 1 = ignored
    plain = logits.detach().clone().requires_grad_()
    loss, nll = fused_label_smoothed_loss(logits, target, 0.1, 1)
    (loss + 0.5 * nll).backward()
    loss_ref, nll_ref = label_smoothed_nll_loss(torch.log_softmax(plain, -1), target, 0.1, 1)
    (loss_ref + 0.5 * nll_ref).backward()
    torch.testing.assert_close((loss, nll), (loss_ref, nll_ref), rtol=1e-12, atol=0)
    torch.testing.assert_close(logits.grad, plain.grad, rtol=1e-10, atol=1e-12)
    assert logits.grad[1].eq(0).all() and logits.grad[4].eq(0).all()  # ignored rows


def test_half_precision_logits_give_half_gradients_near_float32():
    torch.manual_seed(1)
    logits32 = (2 * torch.randn(5, 9)).requires_grad_()
    logits16 = logits32.detach().bfloat16().requires_grad_()
    target = torch.tensor([0, 4, 8, 2, 2])
    for x in (logits32, logits16):
        fused_label_smoothed_loss(x, target, 0.1, -100)[0].backward()
    assert logits16.grad.dtype == torch.bfloat16
    torch.testing.assert_close(logits16.grad.float(), logits32.grad, rtol=0.02, atol=2e-3)


def test_the_chunk_functions_trace_with_dynamic_row_counts(monkeypatch):
    """What CUDA runs: the chunk functions through torch.compile with dynamic sizes (here its
    aot_eager backend, the same traced graphs without generated kernels), two row counts."""
    compiled = {}
    monkeypatch.setattr(fused_softmax, "_COMPILED", compiled)
    monkeypatch.setattr(
        fused_softmax,
        "kernel",
        # fullgraph: a graph break inside a chunk function fails here instead of slowing CUDA down
        lambda name, fn, x: compiled.setdefault(
            name, torch.compile(fn, dynamic=True, fullgraph=True, backend="aot_eager")
        ),
    )
    torch._dynamo.reset()
    for rows in (6, 9):
        logits = torch.randn(rows, 13, requires_grad=True)
        target = torch.randint(0, 13, (rows,))
        plain = logits.detach().clone().requires_grad_()
        loss, _ = fused_label_smoothed_loss(logits, target, 0.1, -100)
        loss.backward()
        loss_ref, _ = label_smoothed_nll_loss(torch.log_softmax(plain, -1), target, 0.1, -100)
        loss_ref.backward()
        torch.testing.assert_close(loss, loss_ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(logits.grad, plain.grad, rtol=1e-5, atol=1e-6)
    assert sorted(compiled) == ["backward", "forward"]


def test_the_criterion_with_the_flag(dictionary):
    """paper_label_smoothed_ce with --fused-softmax-loss: the plain criterion's loss, nll_loss,
    accuracy and gradients on a training batch of our model (its real tokens only)."""
    task = SimpleNamespace(target_dictionary=dictionary)
    model = build_model(dictionary).train()
    src, prev = random_batch(dictionary, B=3, S=7, T=6)
    prev[0, 3:] = dictionary.pad()
    target = torch.cat([prev[:, 1:], prev.new_full((3, 1), dictionary.pad())], dim=1)
    target[torch.arange(3), prev.ne(dictionary.pad()).sum(1) - 1] = dictionary.eos()
    sample = {"net_input": {"src_tokens": src, "src_lengths": src.ne(dictionary.pad()).sum(1)}, "target": target}
    sample["net_input"]["prev_output_tokens"] = prev
    sample.update(ntokens=int(target.ne(dictionary.pad()).sum()))
    results = []
    for fused in (False, True):
        criterion = LabelSmoothedCrossEntropy(task, 0.1, report_accuracy=True, fused_softmax_loss=fused)
        model.zero_grad()
        loss, size, log = criterion(model, sample)
        loss.backward()
        results.append((loss.item(), log, [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (loss, log, grads), (loss_f, log_f, grads_f) = results
    assert loss_f == pytest.approx(loss, rel=1e-6) and float(log_f["nll_loss"]) == pytest.approx(float(log["nll_loss"]))
    assert int(log_f["n_correct"]) == int(log["n_correct"]) and int(log_f["total"]) == int(log["total"])
    for g, g_ref in zip(grads_f, grads, strict=True):
        torch.testing.assert_close(g, g_ref, rtol=1e-4, atol=1e-6)
