"""Section 5.3: Adam with beta_1 = 0.9, beta_2 = 0.98, epsilon = 1e-9, as Kingma & Ba write it."""

from types import SimpleNamespace

import pytest
import torch
from fairseq.optim import OPTIMIZER_REGISTRY
from fairseq.optim.adam import Adam as FairseqAdamKernel

from attn_only_plugin.optim.paper_adam import PaperAdam, PaperAdamConfig, fusable, parse_betas
from attn_only_tools.guards.errors import PluginError

# One scalar theta_0 = 1, gradients 0.5 then -1, lrate 0.1, and epsilon 0.1 so that where it
# goes shows. By hand (Kingma & Ba, Algorithm 1):
#   t=1: m = 0.05, v = 0.005; m^ = 0.5, v^ = 0.25; theta = 1 - 0.1 * 0.5 / (0.5 + 0.1) = 0.916667
#   t=2: m = -0.055, v = 0.0249; m^ = -0.055 / 0.19 = -0.289474, v^ = 0.0249 / 0.0396 = 0.628788;
#        theta = 0.916667 + 0.1 * 0.289474 / (0.792961 + 0.1) = 0.949084
HAND = [0.9166667, 0.9490839]
# fairseq's `adam` adds epsilon before the bias correction: t=1 gives
#   1 - 0.1 * sqrt(0.02) / 0.1 * 0.05 / (sqrt(0.005) + 0.1) = 0.958579
FAIRSEQ_T1 = 0.9585786


def config(**kw):
    return SimpleNamespace(**{**vars(PaperAdamConfig()), "lr": [0.1], **kw})


def two_steps(make_optimizer):
    theta = torch.nn.Parameter(torch.tensor([1.0]))
    opt = make_optimizer([theta])
    seen = []
    for g in (0.5, -1.0):
        theta.grad = torch.tensor([g])
        opt.step()
        seen.append(theta.item())
    return opt, seen


def test_update_is_kingma_ba():
    opt, seen = two_steps(lambda ps: PaperAdam(config(adam_eps=0.1), ps))
    assert seen == pytest.approx(HAND, abs=1e-6)
    assert opt.optimizer.defaults["fused"] is True  # one fused pass on the CPU
    _, fairseq_seen = two_steps(lambda ps: FairseqAdamKernel(ps, lr=0.1, betas=(0.9, 0.98), eps=0.1))
    assert fairseq_seen[0] == pytest.approx(FAIRSEQ_T1, abs=1e-6)  # the departure, at this large epsilon


def test_defaults_are_section_5_3_and_registered():
    assert OPTIMIZER_REGISTRY["paper_adam"] is PaperAdam
    group = PaperAdam(config(), [torch.nn.Parameter(torch.zeros(3))]).param_groups[0]
    assert group["betas"] == (0.9, 0.98) and group["eps"] == 1e-9 and group["weight_decay"] == 0.0
    assert group["lr"] == 0.1


def test_weight_decay_is_decoupled():
    """Not in the paper (default 0); as in fairseq's `adam`, theta <- theta (1 - lrate * decay),
    outside the moments: with a zero gradient, 1 * (1 - 0.1 * 0.5) = 0.95."""
    theta = torch.nn.Parameter(torch.tensor([1.0]))
    opt = PaperAdam(config(weight_decay=0.5), [theta])
    theta.grad = torch.zeros(1)
    opt.step()
    assert theta.item() == pytest.approx(0.95, abs=1e-7)


def test_parameter_groups_and_flat_params():
    a, b = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3))
    opt = PaperAdam(config(), [{"params": [a]}, {"params": [b]}])
    assert len(opt.param_groups) == 2 and opt.supports_flat_params
    assert fusable([a, b]) and not fusable([torch.zeros(2, device="meta")])
    assert not fusable([torch.zeros(2, dtype=torch.long)])


@pytest.mark.parametrize("bad", ["0.9, 0.98, 0.9", "(0.9,)", "(1.0, 0.98)", "beta", "__import__('os')"])
def test_bad_betas_one_line(bad):
    with pytest.raises(PluginError, match=r"--adam-betas must be two numbers in \[0, 1\)"):
        parse_betas(bad)


def test_bad_epsilon():
    with pytest.raises(PluginError, match="--adam-eps must be > 0"):
        PaperAdam(config(adam_eps=0.0), [torch.nn.Parameter(torch.zeros(1))])


def test_under_fairseq_fp16_flat_params(monkeypatch):
    """--fp16: fairseq's FP16Optimizer keeps one flat fp32 copy of the float16 parameters, scales
    the loss, and steps paper_adam on the copy. The float16 parameters must then be paper_adam's
    steps taken tensor by tensor in fp32 on the unscaled gradients. (On a GPU in practice; here on
    float16 CPU tensors, with fairseq's lookup of the current CUDA device, which keys the flat
    copy, answered with a CPU tensor's device index.)"""
    from fairseq.optim.fp16_optimizer import FP16Optimizer
    from omegaconf import OmegaConf

    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)
    cfg = OmegaConf.create(
        {
            "optimizer": {
                "_name": "paper_adam",
                "adam_betas": "(0.9, 0.98)",
                "adam_eps": 0.1,
                "weight_decay": 0.0,
                "lr": [0.1],
            },  # epsilon large enough that the gradients' scale shows
            "common": {
                "fp16_scale_window": 128,
                "fp16_init_scale": 128,
                "fp16_scale_tolerance": 0.0,
                "threshold_loss_scale": None,
                "min_loss_scale": 1e-4,
                "bf16": False,
                "fp16_no_flatten_grads": False,
            },
        }
    )
    torch.manual_seed(0)
    half = [torch.nn.Parameter(torch.randn(5, 3).half()), torch.nn.Parameter(torch.randn(4).half())]
    ref = [torch.nn.Parameter(p.detach().float()) for p in half]
    opt = FP16Optimizer.build_optimizer(cfg, half)
    reference = PaperAdam(config(adam_eps=0.1), ref)
    assert isinstance(opt.fp32_optimizer, PaperAdam) and opt.has_flat_params
    for step in range(2):
        x = torch.randn(3)
        opt.zero_grad()
        opt.backward((half[0].float() @ x).square().sum() + half[1].float().pow(3).sum())  # scaled by 128
        for p, r in zip(half, ref, strict=True):
            r.grad = p.grad.float() / 128  # what FP16Optimizer unscales (exact: a power of two)
        opt.step()
        reference.step()
        flat = torch.cat([r.detach().flatten() for r in ref])
        assert torch.equal(next(iter(opt.fp32_params.values())).detach(), flat), f"step {step}"
        assert all(torch.equal(p, r.half()) for p, r in zip(half, ref, strict=True)), f"step {step}"
