"""The paper's (GNMT) length penalty, section 6.1 via [38]."""

from types import SimpleNamespace

import pytest
import torch

from attn_only_plugin.tasks.translation_paper import (
    GNMTSequenceGenerator,
    PaperTranslationConfig,
    PaperTranslationTask,
    gnmt_exponent,
    gnmt_length_penalty,
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


def test_fairseq_division_by_the_exponent_gives_gnmt():
    for length in (1, 2, 6, 30):
        assert length ** gnmt_exponent(length, 0.6) == pytest.approx(gnmt_length_penalty(length, 0.6))


def test_task_builds_gnmt_generator():
    d = make_dictionary()
    task = PaperTranslationTask(PaperTranslationConfig(lenpen_style="gnmt"), d, d)
    gen_args = SimpleNamespace(beam=4, lenpen=0.6, max_len_a=1, max_len_b=50, sampling=False)
    gen = task.build_generator([build_model(d)], gen_args)
    assert isinstance(gen, GNMTSequenceGenerator)
    src = torch.tensor([[4, 5, 6, d.eos()]])
    hypos = gen.generate([build_model(d)], {"net_input": {"src_tokens": src, "src_lengths": torch.tensor([4])}})
    assert len(hypos[0]) == 4 and hypos[0][0]["tokens"][-1] == d.eos()
    for h in hypos[0]:  # the score is the summed log-probability / lp; the per-token scores are the model's
        total = h["positional_scores"].sum()
        assert h["score"] == pytest.approx(float(total) / gnmt_length_penalty(len(h["tokens"]), 0.6), rel=1e-5)


def test_gnmt_positional_scores_are_the_models():
    """Every hypothesis' per-token scores, its end of sentence included, are the log-probabilities
    the model gives its tokens in one teacher-forced pass (the ranking alone is penalised)."""
    d = make_dictionary()
    model = build_model(d).eval()
    task = PaperTranslationTask(PaperTranslationConfig(lenpen_style="gnmt"), d, d)
    gen = task.build_generator([model], SimpleNamespace(beam=4, lenpen=0.6, max_len_a=1, max_len_b=50, sampling=False))
    src = torch.tensor([[4, 5, 6, d.eos()]])
    with torch.no_grad():
        hypos = gen.generate([model], {"net_input": {"src_tokens": src, "src_lengths": torch.tensor([4])}})[0]
        for h in hypos:
            tokens = h["tokens"].unsqueeze(0)  # (1, T)
            prev = torch.cat([tokens.new_full((1, 1), d.eos()), tokens[:, :-1]], 1)  # (1, T): EOS moved to the front
            lprobs = model.get_normalized_probs(model(src, torch.tensor([4]), prev), log_probs=True)[0]  # (T, V)
            forced = lprobs.gather(1, tokens[0].unsqueeze(1)).squeeze(1)  # (T,)
            assert torch.allclose(h["positional_scores"], forced, atol=1e-4)


def _sample(d):
    return {"net_input": {"src_tokens": torch.tensor([[4, 5, 6, d.eos()]]), "src_lengths": torch.tensor([4])}}


TASKS = ["translation_paper", "constituency_parsing"]


def _task_named(name, **cfg):
    """A task of that name over a toy dictionary (the refusals and the GNMT generator are shared)."""
    from attn_only_plugin.tasks.constituency_parsing import ConstituencyParsingTask, ParsingConfig

    d = make_dictionary()
    if name == "translation_paper":
        return PaperTranslationTask(PaperTranslationConfig(**cfg), d, d), d
    return ConstituencyParsingTask(ParsingConfig(**cfg), d, d), d


@pytest.mark.parametrize("name", TASKS)
def test_gnmt_ranks_with_print_alignment(name):
    """--print-alignment needs fairseq's alignment generator; the GNMT penalty still ranks and
    scores its hypotheses, and the alignments come out."""
    from fairseq.sequence_generator import SequenceGeneratorWithAlignment

    task, d = _task_named(name, lenpen_style="gnmt")
    model = build_model(d).eval()
    model.decoder.need_attn = True  # as prepare_for_inference_ sets it for --print-alignment
    args = SimpleNamespace(beam=4, lenpen=0.6, max_len_a=1, max_len_b=50, sampling=False, print_alignment="hard")
    gen = task.build_generator([model], args)
    assert isinstance(gen, GNMTSequenceGenerator) and isinstance(gen, SequenceGeneratorWithAlignment)
    hypos = gen.generate([model], _sample(d))[0]
    for h in hypos:
        lp = gnmt_length_penalty(len(h["tokens"]), 0.6)
        assert h["score"] == pytest.approx(float(h["positional_scores"].sum()) / lp, rel=1e-5)
        assert h["alignment"] is not None


@pytest.mark.parametrize("name", TASKS)
def test_gnmt_ranks_sampled_hypotheses(name):
    """--sampling draws the hypotheses; the GNMT penalty scores and orders them (--nbest)."""
    task, d = _task_named(name, lenpen_style="gnmt")
    model = build_model(d).eval()
    args = SimpleNamespace(beam=3, lenpen=0.6, max_len_a=1, max_len_b=50, sampling=True)
    gen = task.build_generator([model], args)
    assert isinstance(gen, GNMTSequenceGenerator)
    torch.manual_seed(0)
    for h in gen.generate([model], _sample(d))[0]:
        lp = gnmt_length_penalty(len(h["tokens"]), 0.6)
        assert h["score"] == pytest.approx(float(h["positional_scores"].sum()) / lp, rel=1e-5)


@pytest.mark.parametrize("name", TASKS)
@pytest.mark.parametrize(
    "style, lenpen, flag, problem",
    [
        ("gnmt", 0.6, "unnormalized", "--lenpen-style gnmt has no effect with --unnormalized"),
        ("fairseq", 0.6, "unnormalized", "--lenpen 0.6 has no effect with --unnormalized"),
        ("gnmt", 1.0, "score_reference", "--lenpen-style gnmt has no effect with --score-reference"),
        ("fairseq", 0.3, "score_reference", "--lenpen 0.3 has no effect with --score-reference"),
    ],
)
def test_a_length_penalty_that_would_be_dropped_is_refused(name, style, lenpen, flag, problem):
    from attn_only_tools.guards.errors import PluginError

    task, d = _task_named(name, lenpen_style=style)
    args = SimpleNamespace(beam=4, lenpen=lenpen, max_len_a=1, max_len_b=50, **{flag: True})
    with pytest.raises(PluginError, match=problem):
        task.build_generator([build_model(d)], args)


@pytest.mark.parametrize("name", TASKS)
def test_fairseq_defaults_still_allow_unnormalized_and_score_reference(name):
    """--lenpen 1 (fairseq's default) divides by |Y| as --score-reference does: nothing dropped."""
    from fairseq.sequence_scorer import SequenceScorer

    task, d = _task_named(name)
    args = SimpleNamespace(beam=4, lenpen=1.0, max_len_a=1, max_len_b=50, score_reference=True)
    assert isinstance(task.build_generator([build_model(d)], args), SequenceScorer)
    args = SimpleNamespace(beam=4, lenpen=1.0, max_len_a=1, max_len_b=50, unnormalized=True)
    assert task.build_generator([build_model(d)], args).normalize_scores is False


def test_gnmt_with_a_callers_own_generator_class_is_refused():
    from fairseq.sequence_generator import SequenceGenerator

    from attn_only_tools.guards.errors import PluginError

    task, d = _task_named("translation_paper", lenpen_style="gnmt")
    args = SimpleNamespace(beam=4, lenpen=0.6, max_len_a=1, max_len_b=50)
    with pytest.raises(PluginError, match="cannot rank hypotheses of the generator SequenceGenerator"):
        task.build_generator([build_model(d)], args, seq_gen_cls=SequenceGenerator)
