"""Tree-constrained beam search for section 6.3 (tasks/constituency_parsing.py)."""
import random
from types import SimpleNamespace

import pytest
import torch
from fairseq.data import Dictionary

from attn_only_plugin.parsing.linearize import delinearize
from attn_only_plugin.tasks.constituency_parsing import (ConstituencyParsingTask, ParsingConfig,
                                                         TreeConstraints)
from helpers import build_model, make_dictionary

LABELS = ("S", "NP", "VP", "PP")


def tree_dictionary(with_orphan=True):
    d = Dictionary()
    for symbol in ["XX"] + [b + label for label in LABELS for b in "()"]:
        d.add_symbol(symbol)
    if with_orphan:
        d.add_symbol("(ORPHAN")  # no ")ORPHAN": could never be closed
    return d


def names(d, ids):
    return sorted(d[i] for i in ids)


def prefix(d, tokens):
    return torch.tensor([d.eos()] + [d.index(t) for t in tokens.split()])


@pytest.fixture
def constraints():
    d = tree_dictionary()
    c = TreeConstraints(d)
    c.set_batch([7], [2], max_len=50)
    return d, c


OPENS = sorted("(" + label for label in LABELS)


@pytest.mark.parametrize("tokens, expected", [
    ("", OPENS),                                    # a tree starts with a bracket; never (ORPHAN
    ("(S", ["XX"] + OPENS),                         # no empty constituent: no )S yet
    ("(S XX", ["XX"] + OPENS),                      # the outermost bracket waits for every word
    ("(S (NP XX", [")NP", "XX"] + OPENS),           # only the innermost bracket's label closes
    ("(S (NP XX XX", [")NP"]),                      # both words placed: only closing brackets
    ("(S (NP XX XX )NP", [")S"]),
    ("(S XX XX", [")S"]),
    ("(S XX XX )S", ["</s>"]),                      # nothing after the outermost bracket
])
def test_allowed_tokens_by_hand(constraints, tokens, expected):
    d, c = constraints
    assert names(d, c.allowed(7, prefix(d, tokens))) == sorted(expected)


def test_no_bracket_opens_without_room_to_close_it():
    d = tree_dictionary()
    c = TreeConstraints(d)
    # 2 words, limit 7 tokens before the forced EOS: "(S (NP" + 2 XX + 2 closes = 6 fits, a third
    # bracket would need 8
    c.set_batch([0], [2], max_len=7)
    assert "(VP" in names(d, c.allowed(0, prefix(d, "(S")))
    assert "(VP" not in names(d, c.allowed(0, prefix(d, "(S (NP")))
    c.set_batch([0], [2], max_len=3)  # not even "(S XX XX )S" fits: give up at once
    assert names(d, c.allowed(0, prefix(d, ""))) == ["</s>"]


def test_random_walks_are_always_trees():
    """Whatever the model prefers, every path through the allowed sets is a tree over the words."""
    d, rng = tree_dictionary(), random.Random(0)
    c = TreeConstraints(d)
    for trial in range(300):
        n = rng.randint(1, 12)
        max_len = rng.randint(2 * n + 2, 6 * n + 4)
        c.set_batch([trial], [n], max_len)
        tokens = [d.eos()]
        while True:
            choice = rng.choice(c.allowed(trial, torch.tensor(tokens)))
            if choice == d.eos():
                break
            tokens.append(choice)
            assert len(tokens) - 1 <= max_len
        words = [f"w{i}" for i in range(n)]
        tree = delinearize([d[t] for t in tokens[1:]], words)
        assert tree.words() == words


def test_dictionary_without_placeholder_is_refused():
    with pytest.raises(ValueError, match="no XX"):
        TreeConstraints(make_dictionary())


def test_constrained_beam_search_of_an_untrained_model_gives_trees():
    """fairseq's SequenceGenerator with beam 5 through the task: every hypothesis of a random model
    (which alone writes garbage) is a well-formed tree over exactly its sentence's words."""
    src_dict, tgt_dict = make_dictionary(), tree_dictionary()
    model = build_model(src_dict, tgt_dict, embedding_sharing="decoder")
    task = ConstituencyParsingTask(ParsingConfig(constrain_trees=True), src_dict, tgt_dict)
    args = SimpleNamespace(beam=5, lenpen=0.3, max_len_a=1, max_len_b=30, sampling=False)
    generator = task.build_generator([model], args)
    lengths = [5, 2, 1]  # words per sentence, left-padded as fairseq batches them
    src = torch.full((3, max(lengths) + 1), src_dict.pad())
    for row, n in enumerate(lengths):
        src[row, -n - 1:] = torch.tensor([src_dict.index(f"w{i}") for i in range(n)] + [src_dict.eos()])
    sample = {"id": torch.tensor([40, 41, 42]),
              "net_input": {"src_tokens": src, "src_lengths": torch.tensor([n + 1 for n in lengths])}}
    hypos = task.inference_step(generator, [model], sample)
    for n, beam in zip(lengths, hypos):
        assert len(beam) == 5
        for hypo in beam:
            tokens = [tgt_dict[t] for t in hypo["tokens"].tolist()]
            assert tokens[-1] == "</s>"
            words = [f"w{i}" for i in range(n)]
            assert delinearize(tokens[:-1], words).words() == words


def test_unconstrained_by_default():
    src_dict, tgt_dict = make_dictionary(), tree_dictionary()
    task = ConstituencyParsingTask(ParsingConfig(), src_dict, tgt_dict)
    args = SimpleNamespace(beam=2, lenpen=0.3, max_len_a=1, max_len_b=30, sampling=False)
    generator = task.build_generator([build_model(src_dict, tgt_dict, embedding_sharing="decoder")], args)
    assert type(generator.search).__name__ == "BeamSearch"  # not TreeConstrainedBeamSearch
