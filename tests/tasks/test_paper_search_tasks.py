"""`--beam-stop paper` and `--beam-patience` through the tasks (tasks/paper_search.py) on tiny random
models: against fairseq's rule, a teacher-forced pass, one sentence at a time, parsing with
`--constrain-trees` and an ensemble, and the combinations refused."""

from types import SimpleNamespace

import pytest
import torch

from attn_only_plugin.tasks.constituency_parsing import ConstituencyParsingTask, ParsingConfig
from attn_only_plugin.tasks.paper_search import StoppingRuleGenerator, raises_log_probs
from attn_only_plugin.tasks.translation_paper import PaperTranslationConfig, PaperTranslationTask, gnmt_length_penalty
from attn_only_tools.guards.errors import PluginError
from attn_only_tools.parsing.linearize import delinearize
from helpers import build_model, make_dictionary, tree_dictionary


def batch(d, B=24, S=6, seed=0):
    """B random sources of S - 1 words and EOS, left-padded to different lengths."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(d.nspecial, len(d), (B, S), generator=g)
    src[:, -1] = d.eos()
    for row in range(0, B, 3):
        src[row, : row % 4] = d.pad()
    lengths = src.ne(d.pad()).sum(1)
    return {"id": torch.arange(B), "net_input": {"src_tokens": src, "src_lengths": lengths}}


def decode(model, d, sample, task_cfg=None, **gen):
    args = SimpleNamespace(**{"beam": 4, "lenpen": 0.6, "max_len_a": 1, "max_len_b": 5, "sampling": False, **gen})
    task = PaperTranslationTask(PaperTranslationConfig(**(task_cfg or {})), d, d)
    generator = task.build_generator([model], args)
    with torch.no_grad():
        return generator, generator.generate([model], sample)


def best(hypos):
    return [float(beam[0]["score"]) for beam in hypos]


@pytest.mark.parametrize("style, alpha, temperature", [("gnmt", 0.6, 1.0), ("fairseq", 0.6, 0.5)])
def test_paper_rule_scores_at_least_fairseqs_and_more_on_some(style, alpha, temperature):
    """Both rules grow the same alive hypotheses; the paper's keeps every ended candidate and
    looks on while one could still win, so its best is never worse, and here better on some."""
    d = make_dictionary()
    model, sample = build_model(d), batch(d)
    common = dict(lenpen=alpha, temperature=temperature)
    _, fairseq = decode(model, d, sample, {"lenpen_style": style}, **common)
    generator, paper = decode(model, d, sample, {"lenpen_style": style, "beam_stop": "paper"}, **common)
    assert isinstance(generator, StoppingRuleGenerator)
    pairs = list(zip(best(paper), best(fairseq), strict=True))
    assert all(p >= f - 1e-6 for p, f in pairs)
    assert any(p > f + 1e-6 for p, f in pairs)


@pytest.mark.parametrize("style", ["gnmt", "fairseq"])
def test_printed_scores_are_a_teacher_forced_pass_of_the_returned_tokens(style):
    """H- (score) = summed log P / lp(|Y|), P- (positional_scores) = the model's log-probabilities
    of the returned tokens, end of sentence included."""
    d = make_dictionary()
    model, sample = build_model(d), batch(d, B=6)
    _, hypos = decode(model, d, sample, {"lenpen_style": style, "beam_stop": "paper"})
    src, lengths = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
    for row, beam in enumerate(hypos):
        for h in beam:
            tokens = h["tokens"].unsqueeze(0)  # (1, T)
            prev = torch.cat([tokens.new_full((1, 1), d.eos()), tokens[:, :-1]], 1)  # (1, T): EOS in front
            with torch.no_grad():
                out = model(src[row : row + 1], lengths[row : row + 1], prev)
            lprobs = model.get_normalized_probs(out, log_probs=True)[0]  # (T, V)
            forced = lprobs.gather(1, tokens[0].unsqueeze(1)).squeeze(1)  # (T,)
            assert torch.allclose(h["positional_scores"], forced, atol=1e-4)
            T = len(h["tokens"])
            lp = gnmt_length_penalty(T, 0.6) if style == "gnmt" else T**0.6
            assert float(h["score"]) == pytest.approx(float(forced.sum()) / lp, abs=1e-4)


def test_batched_equals_one_sentence_at_a_time():
    """Sentences leave the batch at different steps (fairseq then renumbers the rows): each one's
    hypotheses are those it gets alone (a fixed length cap: fairseq's a x source length counts the
    batch's padded width)."""
    d = make_dictionary()
    model, sample = build_model(d), batch(d, B=9)
    paper, cap = {"lenpen_style": "gnmt", "beam_stop": "paper"}, {"max_len_a": 0, "max_len_b": 10}
    _, together = decode(model, d, sample, paper, **cap)
    src = sample["net_input"]["src_tokens"]
    for row in range(len(src)):
        one = src[row : row + 1][:, src[row].ne(d.pad())]  # (1, S_row) without its padding
        single = {
            "id": torch.tensor([row]),
            "net_input": {"src_tokens": one, "src_lengths": torch.tensor([one.size(1)])},
        }
        _, (alone,) = decode(model, d, single, paper, **cap)
        assert [h["tokens"].tolist() for h in alone] == [h["tokens"].tolist() for h in together[row]]
        assert [float(h["score"]) for h in alone] == pytest.approx([float(h["score"]) for h in together[row]], abs=1e-4)


@pytest.mark.parametrize("style", ["fairseq", "gnmt"])
def test_patience_one_is_fairseqs_rule_and_two_never_worse(style):
    """patience 1 through StoppingRuleGenerator gives fairseq's hypotheses and scores; patience 2
    waits for 8 ended hypotheses and returns the best 4, never worse (better on some: the toy
    model's test in test_paper_search.py)."""
    d = make_dictionary()
    model, sample = build_model(d), batch(d)
    _, fairseq = decode(model, d, sample, {"lenpen_style": style})
    penalty = gnmt_length_penalty if style == "gnmt" else None
    one = StoppingRuleGenerator(
        [model], d, "fairseq", 1.0, penalty, beam_size=4, max_len_a=1, max_len_b=5, len_penalty=0.6
    )
    with torch.no_grad():
        patience1 = one.generate([model], sample)
    for a, b in zip(fairseq, patience1, strict=True):
        assert [h["tokens"].tolist() for h in a] == [h["tokens"].tolist() for h in b]
        assert [float(h["score"]) for h in a] == pytest.approx([float(h["score"]) for h in b], abs=1e-6)
    _, patience2 = decode(model, d, sample, {"lenpen_style": style, "beam_patience": 2.0})
    assert all(len(beam) == 4 for beam in patience2)
    pairs = list(zip(best(patience2), best(fairseq), strict=True))
    assert all(p >= f - 1e-6 for p, f in pairs)


@pytest.mark.parametrize("constrain", [True, False])
def test_parsing_with_an_ensemble_gives_trees(constrain):
    """fairseq-generate --path a:b --constrain-trees --beam-stop paper: two models, the tree
    constraints inside the paper's search; every hypothesis a tree over the sentence's words."""
    src_dict, tgt_dict = make_dictionary(), tree_dictionary()
    models = [build_model(src_dict, tgt_dict, embedding_sharing="decoder", d_model=d) for d in (32, 16)]
    task = ConstituencyParsingTask(
        ParsingConfig(constrain_trees=constrain, beam_stop="paper", lenpen_style="gnmt"), src_dict, tgt_dict
    )
    args = SimpleNamespace(beam=4, lenpen=0.3, max_len_a=1, max_len_b=30, sampling=False)
    generator = task.build_generator(models, args)
    lengths = [4, 2, 1]
    src = torch.full((3, max(lengths) + 1), src_dict.pad())
    for row, n in enumerate(lengths):
        src[row, -n - 1 :] = torch.tensor([src_dict.index(f"w{i}") for i in range(n)] + [src_dict.eos()])
    sample = {"id": torch.tensor([5, 6, 7]), "net_input": {"src_tokens": src, "src_lengths": torch.tensor(lengths) + 1}}
    with torch.no_grad():
        hypos = task.inference_step(generator, models, sample)
    assert type(generator.search).__name__ == ("TreeConstrainedBeamSearch" if constrain else "BeamSearch")
    for n, beam in zip(lengths, hypos, strict=True):
        assert beam and beam[0]["tokens"][-1] == tgt_dict.eos()
        if constrain:
            for h in beam:
                tokens = [tgt_dict[t] for t in h["tokens"].tolist()[:-1]]
                assert delinearize(tokens, [f"w{i}" for i in range(n)]).words() == [f"w{i}" for i in range(n)]


@pytest.mark.parametrize(
    "task_cfg, gen, message",
    [
        ({"beam_stop": "paper"}, {"sampling": True}, "plain beam search"),
        ({"beam_stop": "paper"}, {"diverse_beam_groups": 2}, "plain beam search"),
        ({"beam_patience": 2.0}, {"diversity_rate": 0.5}, "plain beam search"),
        ({"beam_stop": "paper", "beam_patience": 2.0}, {}, "--beam-patience works with --beam-stop fairseq"),
        ({"beam_patience": 0.0}, {}, "give a number > 0"),
        ({"beam_stop": "paper"}, {"print_alignment": "hard"}, "--print-alignment"),
        ({"beam_stop": "best"}, {}, "give 'fairseq' (the default) or 'paper'"),
        ({"beam_stop": "paper"}, {"unkpen": -1.0}, "every log-probability <= 0"),
    ],
)
def test_what_the_rules_cannot_honour_is_refused_in_one_line(task_cfg, gen, message):
    d = make_dictionary()
    cfg = PaperTranslationConfig()
    for name, value in task_cfg.items():
        setattr(cfg, name, value)
    task = PaperTranslationTask(cfg, d, d)
    args = SimpleNamespace(beam=4, lenpen=0.6, max_len_a=1, max_len_b=5, **gen)
    with pytest.raises(PluginError, match=message.replace("(", r"\(").replace(")", r"\)")) as error:
        task.build_generator([build_model(d)], args)
    assert "\n" not in str(error.value)


def test_prefix_tokens_are_kept_and_the_paper_rule_still_scores_at_least_fairseqs():
    """fairseq-generate --prefix-size 2: every hypothesis starts with its sentence's prefix, and the
    paper's rule is still never below fairseq's with the same prefix."""
    d = make_dictionary()
    model, sample = build_model(d), batch(d, B=8)
    prefix = sample["net_input"]["src_tokens"][:, -3:-1]  # (B, 2): two words of each source
    results = {}
    for rule in ("fairseq", "paper"):
        task = PaperTranslationTask(PaperTranslationConfig(lenpen_style="gnmt", beam_stop=rule), d, d)
        args = SimpleNamespace(beam=4, lenpen=0.6, max_len_a=1, max_len_b=5, sampling=False)
        with torch.no_grad():
            results[rule] = task.build_generator([model], args).generate([model], sample, prefix_tokens=prefix)
    for row, beam in enumerate(results["paper"]):
        assert all(h["tokens"][:2].tolist() == prefix[row].tolist() for h in beam)
    assert all(p >= f - 1e-6 for p, f in zip(best(results["paper"]), best(results["fairseq"]), strict=True))


def test_a_language_model_with_a_negative_weight_is_refused_with_the_paper_rule():
    """--lm-path with --lm-weight < 0 adds a positive term to the log-probabilities, which the
    paper's bound assumes <= 0 (refused); a positive weight keeps them <= 0 (accepted)."""
    d = make_dictionary()
    task = PaperTranslationTask(PaperTranslationConfig(beam_stop="paper"), d, d)
    args = SimpleNamespace(beam=4, lenpen=0.6, max_len_a=1, max_len_b=5)
    with pytest.raises(PluginError, match="every log-probability <= 0"):
        task.build_generator([build_model(d)], args, extra_gen_cls_kwargs={"lm_model": object(), "lm_weight": -0.5})
    assert not raises_log_probs({"lm_model": object(), "lm_weight": 0.5})
    assert not raises_log_probs({"lm_weight": -0.5})  # no language model: the weight is unused
