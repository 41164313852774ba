"""The paper's (GNMT) length penalty, section 6.1 via [38]."""

from types import SimpleNamespace

import pytest
import torch

from attn_only_plugin.tasks.translation_paper import (
    GNMTSequenceGenerator,
    PaperTranslationConfig,
    PaperTranslationTask,
    gnmt_length_penalty,
    rescale_for_gnmt,
)
from helpers import build_model, make_dictionary


def fairseq_rank(score, length, alpha):
    return score / length**alpha


def test_penalties_pick_different_hypotheses():
    alpha = 0.6
    short, long_ = (-1.0, 2), (-1.6, 6)  # (summed log-prob, length incl. EOS)
    # fairseq: -1/2^0.6 = -0.660 < -1.6/6^0.6 = -0.546 -> the long one wins
    assert fairseq_rank(*long_, alpha) > fairseq_rank(*short, alpha)
    # GNMT: -1/(7/6)^0.6 = -0.912 > -1.6/(11/6)^0.6 = -1.112 -> the short one wins
    assert short[0] / gnmt_length_penalty(short[1], alpha) > long_[0] / gnmt_length_penalty(long_[1], alpha)
    assert gnmt_length_penalty(1, alpha) == pytest.approx(1.0)


def test_rescale_then_fairseq_division_gives_gnmt():
    scores = torch.tensor([-1.0, -1.6])
    for length in (2, 6, 30):
        after = rescale_for_gnmt(scores, length, 0.6) / length**0.6  # what finalize_hypos divides by
        assert torch.allclose(after, scores / gnmt_length_penalty(length, 0.6))


def test_task_builds_gnmt_generator():
    d = make_dictionary()
    task = PaperTranslationTask(PaperTranslationConfig(lenpen_style="gnmt"), d, d)
    gen_args = SimpleNamespace(beam=4, lenpen=0.6, max_len_a=1, max_len_b=50, sampling=False)
    gen = task.build_generator([build_model(d)], gen_args)
    assert isinstance(gen, GNMTSequenceGenerator)
    src = torch.tensor([[4, 5, 6, d.eos()]])
    hypos = gen.generate([build_model(d)], {"net_input": {"src_tokens": src, "src_lengths": torch.tensor([4])}})
    assert len(hypos[0]) == 4 and hypos[0][0]["tokens"][-1] == d.eos()
