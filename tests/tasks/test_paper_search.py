"""tensor2tensor's beam search stopping rule (section 6.1), `--beam-stop paper`, and `--beam-patience`
(tasks/paper_search.py): checked against exhaustive enumeration on a toy model whose next-token
distribution is a fixed function of the source and the prefix, and against fairseq's rule on a
tiny random model."""

import itertools
import math

import pytest
import torch
from fairseq.data import Dictionary
from fairseq.search import BeamSearch

from attn_only_plugin.tasks.paper_search import EndsFirst, StoppingRuleGenerator
from attn_only_plugin.tasks.translation_paper import (
    gnmt_length_penalty,
)

WORDS = ("a", "b", "c")


class ToyEncoder(torch.nn.Module):
    """Passes the (B, S) source tokens on as the encoder output."""

    def forward_torchscript(self, net_input):
        return {"src": net_input["src_tokens"]}

    def reorder_encoder_out(self, encoder_out, new_order):
        return {"src": encoder_out["src"].index_select(0, new_order)}


class ToyDecoder(torch.nn.Module):
    """Next-token logits drawn from a generator seeded by (source, prefix): a fixed distribution
    over the words and EOS for each prefix; every other symbol has probability 0."""

    def __init__(self, d: Dictionary, sharpness: float):
        super().__init__()
        self.allowed = [d.index(w) for w in WORDS] + [d.eos()]
        self.V, self.sharpness = len(d), sharpness

    def logits(self, src: tuple, prefix: tuple) -> torch.Tensor:
        g = torch.Generator().manual_seed(hash((src, prefix)) % 2**31)
        out = torch.full((self.V,), -math.inf)
        out[self.allowed] = torch.randn(len(self.allowed), generator=g) * self.sharpness
        return out

    def forward(self, tokens, encoder_out=None):  # tokens (N, t) -> logits (N, t, V), only the last position real
        src = encoder_out["src"].tolist()
        rows = [self.logits(tuple(s), tuple(p[1:])) for s, p in zip(src, tokens.tolist(), strict=True)]
        return torch.stack(rows).unsqueeze(1).expand(-1, tokens.size(1), -1).clone(), None


class ToyModel(torch.nn.Module):
    def __init__(self, d, sharpness=2.0):
        super().__init__()
        self.encoder, self.decoder = ToyEncoder(), ToyDecoder(d, sharpness)

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        return torch.log_softmax(net_output[0], -1)

    def max_decoder_positions(self):
        return 1000

    def log_prob(self, src: tuple, prefix: tuple, token: int) -> float:
        return float(torch.log_softmax(self.decoder.logits(src, prefix), -1)[token])


def toy_dictionary(n_dummies: int = 0) -> Dictionary:
    """The words, then symbols the toy model never writes (so that a beam may be as wide as
    fairseq allows: the vocabulary size - 1)."""
    d = Dictionary()
    for w in WORDS + tuple(f"dummy{i}" for i in range(n_dummies)):
        d.add_symbol(w)
    return d


def toy_sources(d, n):
    """n different sources, (n, 3), each ending with EOS (equal lengths: no padding)."""
    return torch.tensor([[4 + i % 3, 4 + i // 3 % 3, d.eos()] for i in range(n)])


def generate(gen, src, ids=None):
    ids = torch.arange(len(src)) if ids is None else ids
    sample = {"id": ids, "net_input": {"src_tokens": src, "src_lengths": torch.full((len(src),), src.size(1))}}
    with torch.no_grad():
        return gen.generate(gen.model.models, sample)


def toy_generator(model, d, beam, max_len, alpha, style, beam_stop="paper", patience=1.0):
    return StoppingRuleGenerator(
        [model],
        d,
        beam_stop=beam_stop,
        patience=patience,
        length_penalty=gnmt_length_penalty if style == "gnmt" else None,
        beam_size=beam,
        max_len_a=0,
        max_len_b=max_len,
        len_penalty=alpha,
    )


def lp(length, alpha, style):
    return gnmt_length_penalty(length, alpha) if style == "gnmt" else length**alpha


def sequence_score(model, src, words, alpha, style):
    """The penalised score of words + EOS: summed log-probability / lp(|words| + 1)."""
    eos = model.decoder.allowed[-1]
    tokens = tuple(words) + (eos,)
    total = sum(model.log_prob(src, tokens[:i], t) for i, t in enumerate(tokens))
    return total / lp(len(tokens), alpha, style)


def continuations(model, src, prefix, max_len, alpha, style):
    """The penalised scores of every sequence prefix + w* + EOS with at most max_len words."""
    words = model.decoder.allowed[:-1]
    for n in range(0, max_len - len(prefix) + 1):
        for tail in itertools.product(words, repeat=n):
            yield sequence_score(model, src, prefix + tail, alpha, style)


SETTINGS = [(0.6, "gnmt"), (1.0, "fairseq"), (0.0, "gnmt"), (-0.5, "gnmt"), (-0.5, "fairseq")]


@pytest.mark.parametrize("alpha, style", SETTINGS)
def test_a_beam_that_holds_every_prefix_returns_the_exhaustive_best(alpha, style):
    """3 words, at most 3 of them: a beam of 27 holds every prefix, so the paper's search finds
    the best of the 39 sequences, and its n-best list is the best 27 of them in order."""
    d = toy_dictionary(n_dummies=30)
    model = ToyModel(d)
    src = toy_sources(d, 4)
    hypos = generate(toy_generator(model, d, beam=27, max_len=3, alpha=alpha, style=style), src)
    for row, beam in zip(src.tolist(), hypos, strict=True):
        every = sorted(
            (sequence_score(model, tuple(row), w, alpha, style), w)
            for n in range(1, 4)
            for w in itertools.product(model.decoder.allowed[:-1], repeat=n)
        )[::-1]
        assert tuple(beam[0]["tokens"][:-1].tolist()) == every[0][1]
        assert [float(h["score"]) for h in beam] == pytest.approx([s for s, _ in every[:27]], abs=1e-5)


def record_alive(monkeypatch, search_class):
    """Spy on search_class.step: for each sentence id, the hypotheses alive after the last step it
    was decoded at, as (step, [word tuples])."""
    alive = {}
    step_of_search = search_class.step

    def spy(self, step, lprobs, scores, prev_output_tokens=None, original_batch_idxs=None):
        out = step_of_search(self, step, lprobs, scores, prev_output_tokens, original_batch_idxs)
        cand_scores, cand_indices, cand_beams = out
        k = lprobs.size(1)
        for row, sentence in enumerate(original_batch_idxs.tolist()):
            keep = [
                i
                for i in range(cand_scores.size(1))
                if cand_indices[row, i] != self.eos and cand_scores[row, i] > -math.inf
            ][:k]  # fairseq's alive hypotheses: the first k candidates that do not end
            alive[sentence] = (
                step,
                [
                    tuple(prev_output_tokens[row * k + cand_beams[row, i], 1:].tolist()) + (int(cand_indices[row, i]),)
                    for i in keep
                ],
            )
        return out

    monkeypatch.setattr(search_class, "step", spy)
    return alive


def violations(model, src, hypos, alive, max_len, alpha, style):
    """The sentences where a continuation of a hypothesis alive when the search stopped beats
    the worst finished hypothesis it returned."""
    bad = []
    for sentence, (row, beam) in enumerate(zip(src.tolist(), hypos, strict=True)):
        step, prefixes = alive[sentence]
        worst = float(beam[-1]["score"])
        best = max(
            (s for p in prefixes for s in continuations(model, tuple(row), p, max_len, alpha, style)),
            default=-math.inf,
        )
        if best > worst + 1e-6:
            bad.append(sentence)
    return bad


@pytest.mark.parametrize("alpha, style", SETTINGS)
def test_when_the_paper_search_stops_no_alive_continuation_beats_the_worst_finished(alpha, style, monkeypatch):
    """Beam 2, up to 6 words: where the paper's search stops before the length cap, every
    continuation of the hypotheses then alive, enumerated up to the cap, scores at most the worst
    finished hypothesis returned. fairseq's rule (first come, first served) breaks this on some
    sentence, so the check can fail."""
    d = toy_dictionary()
    model, src, max_len = ToyModel(d, sharpness=1.0), toy_sources(d, 9), 6
    alive = record_alive(monkeypatch, EndsFirst)
    hypos = generate(toy_generator(model, d, beam=2, max_len=max_len, alpha=alpha, style=style), src)
    assert any(step < max_len for step, _ in alive.values())  # some stopped early: the bound did it
    assert violations(model, src, hypos, alive, max_len, alpha, style) == []
    monkeypatch.undo()
    alive = record_alive(monkeypatch, BeamSearch)
    hypos = generate(
        toy_generator(model, d, beam=2, max_len=max_len, alpha=alpha, style=style, beam_stop="fairseq"), src
    )
    assert violations(model, src, hypos, alive, max_len, alpha, style) != []


class ScriptedDecoder(ToyDecoder):
    """Next-token probabilities from a table: prefix (words) -> {token: probability}, the rest of
    the mass shared by the other words and EOS; a prefix not in the table: uniform."""

    def __init__(self, d: Dictionary, table: dict):
        super().__init__(d, 1.0)
        self.table = {tuple(d.index(w) for w in prefix.split()): probs for prefix, probs in table.items()}
        self.ids = dict(zip(WORDS + ("EOS",), self.allowed, strict=True))

    def logits(self, src: tuple, prefix: tuple) -> torch.Tensor:
        given = {self.ids[t]: p for t, p in self.table.get(prefix, {}).items()}
        rest = [t for t in self.allowed if t not in given]
        out = torch.full((self.V,), -math.inf)
        for t in self.allowed:
            p = given[t] if t in given else (1 - sum(given.values())) / len(rest)
            out[t] = math.log(p) if p > 0 else -math.inf
        return out


# alpha = 1 (score = log P / |Y|): "a EOS" ends first (-1.02 / 2 = -0.51); "b c" (-1.57) goes on
# cheaply to "b c c c EOS" (-1.60 / 5), which only a bound at the longest length waits for
# (-1.57 / 6 = -0.26 beats -0.51; at the shortest, -1.57 / 3 = -0.52, would stop).
LONG_WINS = {"": {"a": 0.6, "b": 0.21, "c": 0.19, "EOS": 0.0}, "a": {"EOS": 0.6}, "b": {"c": 0.99}, "b c": {"c": 0.99}}
LONG_WINS.update({"b c c": {"c": 0.99}, "b c c c": {"EOS": 0.99}})
# alpha = -1 (score = log P x |Y|): "a EOS" ends first (-1.90 x 2 = -3.79); "b c" (-0.85) ends next
# step as "b c EOS" (-0.90 x 3 = -2.71), which only a bound at the shortest length waits for
# (-0.85 x 3 = -2.56 beats -3.79; at the longest, -0.85 x 6 = -5.1, would stop).
SHORT_WINS = {"": {"a": 0.5, "b": 0.45, "c": 0.05, "EOS": 0.0}, "a": {"EOS": 0.3}, "b": {"c": 0.95}}
SHORT_WINS["b c"] = {"EOS": 0.95}


@pytest.mark.parametrize("table, alpha", [(LONG_WINS, 1.0), (SHORT_WINS, -1.0)])
def test_the_bound_takes_the_most_favourable_length(table, alpha, monkeypatch):
    """Where a hypothesis alive after the first one ends can still win only at the longest
    (alpha > 0) or the shortest (alpha < 0) length it may end at, the search waits for it: the
    stopping guarantee holds and the exhaustive best of every sequence up to 5 words is returned."""
    d = toy_dictionary()
    model, src = ToyModel(d), toy_sources(d, 1)
    model.decoder = ScriptedDecoder(d, table)
    alive = record_alive(monkeypatch, EndsFirst)
    (beam,) = generate(toy_generator(model, d, beam=2, max_len=5, alpha=alpha, style="fairseq"), src)
    assert violations(model, src, [beam], alive, 5, alpha, "fairseq") == []
    row = tuple(src[0].tolist())
    every = [w for n in range(1, 6) for w in itertools.product(model.decoder.allowed[:-1], repeat=n)]
    top = max(every, key=lambda w: sequence_score(model, row, w, alpha, "fairseq"))
    assert tuple(beam[0]["tokens"][:-1].tolist()) == top and len(top) == (4 if alpha > 0 else 2)


def test_patience_two_looks_longer_and_finds_better():
    """fairseq's rule waiting for 2 x beam ended hypotheses: every sentence decodes at least as
    many steps as with patience 1 and returns a hypothesis at least as good; some more and better."""
    d = toy_dictionary()
    model, src = ToyModel(d, sharpness=1.0), toy_sources(d, 9)
    runs = []
    for patience in (1.0, 2.0):
        with pytest.MonkeyPatch.context() as monkeypatch:
            alive = record_alive(monkeypatch, BeamSearch)
            gen = toy_generator(model, d, 2, 6, 1.0, "fairseq", beam_stop="fairseq", patience=patience)
            hypos = generate(gen, src)
        runs.append(([alive[i][0] for i in range(len(src))], [float(beam[0]["score"]) for beam in hypos]))
    (steps1, best1), (steps2, best2) = runs
    assert all(b >= a for a, b in zip(steps1, steps2, strict=True)) and steps2 != steps1
    assert all(b >= a - 1e-6 for a, b in zip(best1, best2, strict=True))
    assert any(b > a + 1e-6 for a, b in zip(best1, best2, strict=True))
