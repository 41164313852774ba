"""Section 5.4's label-smoothed cross entropy straight from the logits: a speed path beside
label_smoothed_ce.py's maths, which it computes to float rounding; not the paper's.

With x_i the logits of position i over K = |V| classes and lse_i = log sum_k exp(x_ik),
label_smoothed_nll_loss on log_softmax(x) gives

    loss_i = (1 - eps) (lse_i - x_iy) + eps (lse_i - mean_k x_ik),    nll_i = lse_i - x_iy,

and the gradient d loss_i / d x_ik = softmax(x_i)_k - (1 - eps) [k = y] - eps / K (nll's: the
same with eps = 0). So the forward pass needs only lse, x_iy and mean_k x_ik per position, and the
backward pass recomputes softmax from x and lse: nothing of size (M, K) is made or kept besides
the logits and their gradient. The plain path makes the float32 log-probabilities (M, K), keeps
them for the backward pass, and reads and writes (M, K) tensors about a dozen times a step; at the
paper's ~25k target tokens and K = 37k each of those is 4 GB. Rows go through in chunks of
CHUNK_ROWS, each chunk's forward and backward functions through torch.compile on CUDA (inductor
fuses each into a kernel or two that read the half-precision logits once); elsewhere eagerly.
`--fused-softmax-loss` (criterion paper_label_smoothed_ce) turns it on.

Tensor layout: logits (M, K) in any float dtype, targets (M,); per-row results (M,) in float32
(float64 for float64 logits).
"""

from typing import Callable, Dict, Tuple

import torch
from torch import Tensor

CHUNK_ROWS = 8192  # rows a chunk: bounds the float32 temporaries of an eager chunk to 8192 x K


def forward_rows(x: Tensor, target: Tensor, keep: Tensor, eps: float) -> Tuple[Tensor, Tensor, Tensor]:
    """One chunk: (loss_i, nll_i, lse_i), each (m,) in float32 at least, 0 where keep is False."""
    x = x.to(torch.promote_types(x.dtype, torch.float32))  # (m, K): half precision computed in float32
    lse = torch.logsumexp(x, dim=-1)  # (m,)
    nll = lse - x.gather(-1, target[:, None]).squeeze(-1)  # (m,) -log p_y
    uniform = lse - x.mean(dim=-1)  # (m,) -mean_k log p_k
    loss = (1.0 - eps) * nll + eps * uniform
    return loss * keep, nll * keep, lse


def backward_rows(x: Tensor, target: Tensor, keep: Tensor, lse: Tensor, g_loss: Tensor, g_nll: Tensor, eps: float):
    """One chunk's gradient (m, K) in x's dtype: g_loss (p - (1 - eps) onehot - eps / K) +
    g_nll (p - onehot), p = softmax(x) = exp(x - lse); 0 on rows not kept."""
    p = torch.exp(x.to(lse.dtype) - lse[:, None])  # (m, K)
    onehot = torch.zeros_like(p).scatter_(-1, target[:, None], 1.0)  # (m, K)
    grad = (g_loss + g_nll) * p - (g_loss * (1.0 - eps) + g_nll) * onehot - g_loss * eps / x.size(-1)
    return (grad * keep[:, None]).to(x.dtype)  # (m, K)


_COMPILED: Dict[str, Callable] = {}


def kernel(name: str, fn: Callable, x: Tensor) -> Callable:
    """fn through torch.compile (dynamic row counts) for CUDA tensors, compiled once; else fn."""
    if not x.is_cuda:
        return fn
    if name not in _COMPILED:
        _COMPILED[name] = torch.compile(fn, dynamic=True)
    return _COMPILED[name]


class SmoothedCrossEntropy(torch.autograd.Function):
    """(sum of loss_i, sum of nll_i) over the kept rows, from logits (M, K) and targets (M,)."""

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, eps: float, ignore_index: int):
        keep = target.ne(ignore_index)  # (M,)
        run = kernel("forward", forward_rows, logits)
        with torch.autocast(logits.device.type, enabled=False):  # float32 as written, under any autocast
            parts = [run(*chunk, eps) for chunk in zip(*chunks(logits, target, keep), strict=True)]
        loss, nll, lse = (torch.cat(part) for part in zip(*parts, strict=True))  # (M,) each
        ctx.save_for_backward(logits, target, keep, lse)
        ctx.eps = eps
        return loss.sum(), nll.sum()

    @staticmethod
    def backward(ctx, g_loss: Tensor, g_nll: Tensor):
        logits, target, keep, lse = ctx.saved_tensors
        run = kernel("backward", backward_rows, logits)
        with torch.autocast(logits.device.type, enabled=False):
            grads = [
                run(*chunk, g_loss, g_nll, ctx.eps) for chunk in zip(*chunks(logits, target, keep, lse), strict=True)
            ]
        return (grads[0] if len(grads) == 1 else torch.cat(grads)), None, None, None  # (M, K)


def chunks(*tensors: Tensor):
    """Each tensor split into chunks of CHUNK_ROWS rows (views)."""
    return [t.split(CHUNK_ROWS) for t in tensors]


def fused_label_smoothed_loss(logits: Tensor, target: Tensor, eps: float, ignore_index: int):
    """label_smoothed_ce.label_smoothed_nll_loss(log_softmax(logits), ...) without the (M, K)
    log-probabilities: summed (loss, nll_loss) over the rows whose target is not ignore_index."""
    return SmoothedCrossEntropy.apply(logits, target, eps, ignore_index)
