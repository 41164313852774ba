"""Section 5.3: lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)."""

from types import SimpleNamespace

import pytest

from attn_only_plugin.lr_scheduler.noam import NoamSchedule, noam_lr
from attn_only_tools.guards.errors import PluginError


def test_values():
    assert noam_lr(1, 512, 4000) == pytest.approx(512**-0.5 * 4000**-1.5)
    assert noam_lr(4000, 512, 4000) == pytest.approx(6.988e-4, rel=1e-3)  # base model peak
    steps = range(1, 20001, 7)
    peak = max(steps, key=lambda s: noam_lr(s, 512, 4000))
    assert abs(peak - 4000) <= 7
    assert noam_lr(16000, 512, 4000) == pytest.approx(noam_lr(4000, 512, 4000) / 2)  # 1/sqrt decay
    assert noam_lr(2000, 512, 4000) == pytest.approx(noam_lr(4000, 512, 4000) / 2)  # linear warm-up
    assert noam_lr(4000, 1024, 4000, multiplier=2.0) == pytest.approx(2 * 1024**-0.5 * 4000**-0.5)


class FakeOptimizer:
    lr = None

    def set_lr(self, lr):
        self.lr = lr

    def get_lr(self):
        return self.lr


def test_scheduler_steps_like_the_paper(monkeypatch):
    import fairseq.optim.lr_scheduler.fairseq_lr_scheduler as base

    monkeypatch.setattr(base, "FairseqOptimizer", FakeOptimizer)
    opt = FakeOptimizer()
    sched = NoamSchedule(SimpleNamespace(warmup_updates=4000, lr_multiplier=1.0, d_model=512), opt)
    assert opt.lr == pytest.approx(noam_lr(1, 512, 4000))  # the first update runs at step 1
    assert sched.step_update(3999) == pytest.approx(6.988e-4, rel=1e-3)  # the 4000th update
    with pytest.raises(PluginError, match="warmup-updates must be > 0"):
        NoamSchedule(SimpleNamespace(warmup_updates=0, lr_multiplier=1.0, d_model=512), opt)
