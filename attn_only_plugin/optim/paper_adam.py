"""The optimizer of section 5.3 of Vaswani et al. (2017), registered as `paper_adam`:
Adam (Kingma & Ba, the paper's reference [20]) with beta_1 = 0.9, beta_2 = 0.98, epsilon = 1e-9.

    fairseq-train --user-dir attn_only_plugin --optimizer paper_adam --lr-scheduler noam ...

It is torch's Adam (its fused kernel where the parameters allow: one pass over all parameters on
the CPU or the GPU), so the update is Kingma & Ba's Algorithm 1:

    m_t = beta_1 m_{t-1} + (1 - beta_1) g_t          m^_t = m_t / (1 - beta_1^t)
    v_t = beta_2 v_{t-1} + (1 - beta_2) g_t^2        v^_t = v_t / (1 - beta_2^t)
    theta_t = theta_{t-1} - lrate m^_t / (sqrt(v^_t) + epsilon)

Departs from fairseq's `adam` on purpose, in two ways:
- fairseq adds epsilon to sqrt(v_t) before the bias correction, which is epsilon /
  sqrt(1 - beta_2^t) in the formula above (7x the paper's 1e-9 at t = 1 with beta_2 = 0.98,
  tending to it); here epsilon is where the paper's Adam puts it.
- fairseq's `adam` on a CPU (and on a GPU without apex) walks the parameters in Python, several
  kernels each: 55 against 26 ms a step for the 48M parameters of the benchmark's `cpu` shape
  (docs/speed.md).
Weight decay (none in the paper, default 0) is decoupled, AdamW-style, as in fairseq's `adam`.
"""

import ast
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import List

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.optim import FairseqOptimizer, register_optimizer
from omegaconf import II

from attn_only_tools.guards.errors import PluginError


@dataclass
class PaperAdamConfig(FairseqDataclass):
    adam_betas: str = field(default="(0.9, 0.98)", metadata={"help": "(beta_1, beta_2), section 5.3"})
    adam_eps: float = field(default=1e-9, metadata={"help": "epsilon, section 5.3"})
    weight_decay: float = field(default=0.0, metadata={"help": "decoupled weight decay (none in the paper)"})
    lr: List[float] = II("optimization.lr")  # overridden every update by the schedule (`noam`)


def parse_betas(text) -> tuple:
    """'(0.9, 0.98)' -> (0.9, 0.98); a PluginError naming the problem for anything else."""
    try:
        betas = tuple(float(b) for b in (ast.literal_eval(text) if isinstance(text, str) else text))
    except (ValueError, TypeError, SyntaxError):
        betas = ()
    if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
        raise PluginError(
            f"--adam-betas must be two numbers in [0, 1) such as '(0.9, 0.98)' (section 5.3), got {text!r}"
        )
    return betas


def fusable(params) -> bool:
    """torch's fused Adam takes floating-point tensors on the CPU or a CUDA device."""
    return all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)


@register_optimizer("paper_adam", dataclass=PaperAdamConfig)
class PaperAdam(FairseqOptimizer):
    """Section 5.3 (Adam, beta_1 0.9, beta_2 0.98, epsilon 1e-9), Kingma & Ba's update; see the
    module docstring for where it departs from fairseq's `adam`."""

    def __init__(self, cfg: PaperAdamConfig, params):
        super().__init__(cfg)
        if cfg.adam_eps <= 0 or cfg.weight_decay < 0:
            raise PluginError(
                f"--adam-eps must be > 0 (the paper uses 1e-9) and --weight-decay >= 0, "
                f"got {cfg.adam_eps} and {cfg.weight_decay}"
            )
        params = list(params)
        tensors = [p for g in params for p in g["params"]] if params and isinstance(params[0], dict) else params
        self._optimizer = torch.optim.AdamW(params, fused=fusable(tensors), **self.optimizer_config)

    @property
    def optimizer_config(self):
        """What a resumed run takes from the command line over the checkpoint (fairseq's contract)."""
        lr = self.cfg.lr[0] if isinstance(self.cfg.lr, Collection) else self.cfg.lr
        return {
            "lr": lr,
            "betas": parse_betas(self.cfg.adam_betas),
            "eps": self.cfg.adam_eps,
            "weight_decay": self.cfg.weight_decay,
        }

    @property
    def supports_flat_params(self):
        """--fp16 keeps one flat fp32 copy of the parameters; Adam is element-wise, so it may."""
        return True
