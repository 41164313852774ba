"""The learning-rate schedule of section 5.3 of Vaswani et al. (2017), registered as `noam`
(the name it goes by in tensor2tensor, OpenNMT and the Annotated Transformer).
"""

from dataclasses import dataclass, field

from fairseq.dataclass import FairseqDataclass
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from omegaconf import II

from attn_only_tools.guards.errors import PluginError


def noam_lr(step: int, d_model: int, warmup_steps: int, multiplier: float = 1.0) -> float:
    """Section 5.3: lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5).

    Linear warm-up for warmup_steps steps, then decay with the inverse square root of the step;
    the peak, d_model^-0.5 * warmup_steps^-0.5, is at step = warmup_steps. step counts from 1.
    """
    step = max(step, 1)
    return multiplier * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


@dataclass
class NoamConfig(FairseqDataclass):
    warmup_updates: int = field(default=4000, metadata={"help": "warmup_steps (section 5.3)"})
    lr_multiplier: float = field(
        default=1.0, metadata={"help": "scale on the paper's formula (1.0 = the paper; tensor2tensor later used 2.0)"}
    )
    # d_model comes from the model config so users need not set --lr by hand.
    d_model: int = II("model.d_model")


@register_lr_scheduler("noam", dataclass=NoamConfig)
class NoamSchedule(FairseqLRScheduler):
    """Section 5.3. fairseq calls step_update(n) after update n; the rate it sets is the one the
    next update uses, so we set lrate(n + 1): update number k (from 1) runs at lrate(k), exactly
    the paper's step numbering. --lr is ignored (the formula gives the rate)."""

    def __init__(self, cfg: NoamConfig, optimizer):
        super().__init__(cfg, optimizer)
        if cfg.warmup_updates <= 0:
            raise PluginError(f"--warmup-updates must be > 0, got {cfg.warmup_updates} (the paper uses 4000)")
        if cfg.lr_multiplier <= 0:
            raise PluginError(f"--lr-multiplier must be > 0, got {cfg.lr_multiplier}")
        self.d_model, self.warmup, self.multiplier = int(cfg.d_model), cfg.warmup_updates, cfg.lr_multiplier
        self.optimizer.set_lr(self.rate(0))

    def rate(self, num_updates: int) -> float:
        return noam_lr(num_updates + 1, self.d_model, self.warmup, self.multiplier)

    def step(self, epoch, val_loss=None):
        super().step(epoch, val_loss)
        return self.optimizer.get_lr()

    def step_update(self, num_updates):
        lr = self.rate(num_updates)
        self.optimizer.set_lr(lr)
        return lr
