"""Linearization of Vinyals et al. (2015), as followed in Section 6.3 of Vaswani et al. (2017)."""

import random
import re

import pytest

from attn_only_tools.parsing.evalb import evaluate_trees
from attn_only_tools.parsing.linearize import (
    delinearize,
    linearize,
    normalize,
    repair,
    replace_tags,
    right_branching_tree,
)
from attn_only_tools.parsing.ptb import Tree, parse_tree, tree_to_str

TREE = parse_tree(
    "( (S (NP-SBJ-1 (DT The) (NN cat)) (VP (VBD sat) (NP (-NONE- *T*-1)) (PP-LOC (IN on) (NP (PRP it)))) (. .)) )"
)


def test_linearize_matches_vinyals_format():
    source, target = linearize(TREE)
    assert source == ["The", "cat", "sat", "on", "it", "."]
    assert " ".join(target) == "(S (NP XX XX )NP (VP XX (PP XX (NP XX )NP )PP )VP XX )S"


def test_normalize_keeps_special_tags_and_drops_trace_only_constituents():
    tree = normalize(parse_tree("(S (NP-SBJ (-NONE- *)) (VP (VB go) (-LRB- -LRB-) (NP=2 (NN x))))"))
    assert tree_to_str(tree) == "(S (VP (VB go) (-LRB- -LRB-) (NP (NN x))))"


def test_round_trip_every_sample_tree(ptb_trees):
    restored = []
    for tree in ptb_trees:
        source, target = linearize(tree)
        back = delinearize(target, source)
        gold = normalize(tree)
        assert tree_to_str(back) == tree_to_str(replace_tags(gold, ["XX"] * len(source)))
        restored.append(replace_tags(back, gold.tags()))
    scores = evaluate_trees(ptb_trees, restored).all
    assert scores.fmeasure == 100.0 and scores.valid == len(ptb_trees)


@pytest.mark.parametrize(
    "target",
    ["(S XX XX )NP", "(S XX )S XX", "(S XX XX XX )S", "(S XX", "XX )S", "(S (NP )NP XX XX )S", "(S XX foo XX )S"],
)
def test_delinearize_rejects_malformed(target):
    with pytest.raises(ValueError):
        delinearize(target.split(), ["a", "b"])


def _corrupt(tokens, rng):
    tokens = list(tokens)
    for _ in range(rng.randint(1, 4)):
        op = rng.choice(["drop", "dup", "swap", "garbage", "relabel"])
        at = rng.randrange(len(tokens))
        if op == "drop" and len(tokens) > 1:
            del tokens[at]
        elif op == "dup":
            tokens.insert(at, tokens[at])
        elif op == "swap":
            other = rng.randrange(len(tokens))
            tokens[at], tokens[other] = tokens[other], tokens[at]
        elif op == "garbage":
            tokens.insert(at, rng.choice(["<unk>", "(", ")", "((NP", "the", ""]))
        else:
            tokens[at] = tokens[at][:1] + rng.choice(["NP", "VP", "X"])
    return tokens


def test_repair_keeps_every_word_in_order(ptb_trees):
    rng = random.Random(1234)
    repaired = 0
    for tree in rng.sample(ptb_trees, 400):
        source, target = linearize(tree)
        fixed, needed = repair(_corrupt(target, rng), source)
        assert fixed.words() == source and not fixed.is_preterminal
        assert parse_tree(tree_to_str(fixed)) == fixed  # valid, no empty brackets
        repaired += needed
    assert repaired > 300
    source, target = linearize(TREE)
    assert repair(target, source) == (delinearize(target, source), False)


def test_repair_of_nothing_useful_still_gives_a_tree():
    tree, needed = repair(["<unk>", ")S", "XX"], ["a", "b"])
    assert needed and tree_to_str(tree) == "(S (XX a) (XX b))"


def test_right_branching_baseline():
    assert tree_to_str(right_branching_tree(["a", "b", "c"])) == "(S (XX a) (S (XX b) (XX c)))"
    assert right_branching_tree(["a"]).words() == ["a"]


def test_target_words_linearization():
    """attn-only-prepare-ptb --target-words: the word itself in each slot (not in the paper)."""
    source, target = linearize(TREE, target_words=True)
    assert source == ["The", "cat", "sat", "on", "it", "."]
    assert " ".join(target) == "(S (NP The cat )NP (VP sat (PP on (NP it )NP )PP )VP . )S"
    assert delinearize(target, source) == delinearize(linearize(TREE)[1], source)  # the same tree


@pytest.mark.parametrize("word", ["XX", "(NP", ")NP"])
def test_target_words_refuses_a_word_that_would_read_as_a_slot_marker_or_bracket(word):
    tree = Tree("S", [Tree("NN", word="a"), Tree("NN", word=word)])  # a reader of .mrg would refuse "(NP"
    assert linearize(tree)[0] == ["a", word]  # fine with XX in the slots
    with pytest.raises(ValueError, match=re.escape(f"the word {word!r} would read as a bracket or as the XX")):
        linearize(tree, target_words=True)


def test_every_token_but_a_bracket_is_a_word_slot():
    words = ["a", "b", "c"]
    expected = delinearize("(S (NP XX XX )NP XX )S".split(), words)
    for slots in (["a", "b", "c"], ["<unk>", "x", "("], ["XX", "b", "zzz"]):
        assert delinearize(f"(S (NP {slots[0]} {slots[1]} )NP {slots[2]} )S".split(), words) == expected
    # the repair path too: a missing closing bracket, a surplus slot
    assert repair("(S (NP The cat XX".split(), words) == repair("(S (NP XX XX XX".split(), words)
    assert repair("(S a b c d )S".split(), words) == repair("(S XX XX XX XX )S".split(), words)
