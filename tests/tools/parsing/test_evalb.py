"""EVALB (Section 6.3 of Vaswani et al. 2017): our Python scorer against the original C program."""

import copy
import random
import re
import subprocess
from dataclasses import replace

import pytest

from attn_only_tools.parsing.evalb import (
    COLLINS,
    PluginError,
    evaluate_lines,
    format_report,
    read_lines,
    read_params,
    score_sentence,
)
from attn_only_tools.parsing.linearize import normalize
from attn_only_tools.parsing.ptb import Tree, tree_to_str
from helpers import BIN

SCRIPT = BIN / "attn-only-evalb"
LABELS = ["NP", "VP", "PP", "ADVP", "PRT", "S", "SBAR", "NP-SBJ", "TOP", "ADJP", "QP"]
TAGS = ["NN", "VB", ",", ".", "-NONE-", "``", "IN", "DT"]
NO_LIMIT = replace(COLLINS, max_error=10**6)


def run_c(evalb_c, gold, test, *args):
    proc = subprocess.run(
        [str(evalb_c / "evalb"), *args, str(gold), str(test)], capture_output=True, text=True, timeout=120
    )
    return proc


def compare_with_c(evalb_c, tmp_path, gold_lines, test_lines, params=NO_LIMIT, prm="COLLINS.prm"):
    gold, test = tmp_path / "gold.txt", tmp_path / "test.txt"
    gold.write_text("\n".join(gold_lines) + "\n")
    test.write_text("\n".join(test_lines) + "\n")
    proc = run_c(evalb_c, gold, test, "-p", str(evalb_c / prm), "-e", str(params.max_error))
    assert proc.returncode == 0, proc.stderr[-500:]
    ours = evaluate_lines(read_lines(gold), read_lines(test), params)
    c_rows = [line for line in proc.stdout.splitlines() if re.match(r"^\s*\d+\s+\d+\s+\d\s", line)]
    assert len(c_rows) == len(ours.sentences)
    for row, r in zip(c_rows, ours.sentences, strict=True):  # matched, gold, test brackets per sentence
        assert [int(v) for v in row.split()[5:8]] == [r.matched, r.gold, r.test], row
    assert _summary_numbers(proc.stdout) == _summary_numbers(format_report(ours))
    assert format_report(ours) == proc.stdout
    errors = [f"{r.line} : {m}" for r in ours.sentences for m in r.errors]
    assert errors == proc.stderr.splitlines()
    return ours


def _summary_numbers(report):
    keys = (
        "Bracketing Recall",
        "Bracketing Precision",
        "Bracketing FMeasure",
        "Complete match",
        "Number of sentence",
        "Number of Valid sentence",
    )
    return [line for line in report.splitlines() if line.startswith(keys)]


# ---------------------------------------------------------------- perturbations
def _internal(tree, parent=None):
    """(node, parent) of every phrase node."""
    if tree.is_preterminal:
        return []
    return [(tree, parent)] + [p for kid in tree.children for p in _internal(kid, tree)]


def _leaves(tree, parent=None):
    if tree.is_preterminal:
        return [(tree, parent)]
    return [p for kid in tree.children for p in _leaves(kid, tree)]


def _prune(tree):
    tree.children = [kid for kid in tree.children if kid.is_preterminal or _prune(kid)]
    return bool(tree.children)


def perturb(tree, rng, kind):
    tree = copy.deepcopy(tree)
    nodes, leaves = _internal(tree), _leaves(tree)
    node, parent = rng.choice(nodes)
    leaf, leaf_parent = rng.choice(leaves)
    if kind == "relabel":
        node.label = rng.choice(LABELS)
    elif kind == "merge" and parent is not None:
        at = parent.children.index(node)
        parent.children[at : at + 1] = node.children
    elif kind == "split" and len(node.children) >= 3:
        at = rng.randrange(len(node.children) - 1)
        node.children[at : at + 2] = [Tree(rng.choice(LABELS), node.children[at : at + 2])]
    elif kind == "move" and parent is not None and parent.children[-1] is not node:
        node.children.append(parent.children.pop(parent.children.index(node) + 1))
    elif kind == "unary":
        copy_of = Tree(rng.choice([node.label, rng.choice(LABELS)]), node.children)
        node.children = [copy_of]
    elif kind == "drop_word" and len(leaves) > 1:
        leaf_parent.children.remove(leaf)
        _prune(tree)
    elif kind == "pos":
        leaf.label = rng.choice(TAGS)
    elif kind == "word":
        leaf.word = leaf.word + "x"
    elif kind == "top":
        tree = Tree(rng.choice(["", "TOP"]), [tree])
    elif kind == "normalize":
        tree = normalize(tree)
    return tree


KINDS = ["relabel", "merge", "split", "move", "unary", "drop_word", "pos", "word", "top", "normalize"]


def _within_c_limits(tree):
    brackets = len(_internal(tree))
    return len(tree.preterminals()) <= 190 and brackets <= 180 and len(tree_to_str(tree)) < 4500


@pytest.fixture(scope="module")
def gold_trees(ptb_trees):
    return [tree for tree in ptb_trees if _within_c_limits(tree)]


# ---------------------------------------------------------------- comparisons
@pytest.mark.parametrize("prm", ["sample/sample.prm", "COLLINS.prm", "new.prm"])
def test_same_report_as_c_on_evalb_own_sample(evalb_c, prm):
    gold, test = evalb_c / "sample" / "sample.gld", evalb_c / "sample" / "sample.tst"
    proc = run_c(evalb_c, gold, test, "-p", str(evalb_c / prm))
    ours = evaluate_lines(read_lines(gold), read_lines(test), read_params(evalb_c / prm))
    assert format_report(ours) == proc.stdout


def test_same_as_c_on_ptb_gold_against_itself(evalb_c, tmp_path, gold_trees):
    lines = [tree_to_str(tree) for tree in gold_trees]
    ours = compare_with_c(evalb_c, tmp_path, lines, lines)
    assert ours.all.fmeasure == 100.0 and ours.all.valid == len(lines)


@pytest.mark.parametrize("seed", [0, 1])
def test_same_as_c_on_perturbed_ptb(evalb_c, tmp_path, gold_trees, seed):
    rng = random.Random(seed)
    gold_lines, test_lines = [], []
    for number, tree in enumerate(gold_trees):
        test = tree
        for step in range(1 + number % 3):
            test = perturb(test, rng, KINDS[(number + step * 7 + seed) % len(KINDS)])
        gold = Tree("", [tree]) if number % 11 == 0 else tree
        gold_lines.append(tree_to_str(gold))
        test_lines.append("" if number % 97 == 5 else tree_to_str(test))
    ours = compare_with_c(evalb_c, tmp_path, gold_lines, test_lines)
    assert ours.all.errors > 50 and ours.all.skipped > 10
    assert 40 < ours.all.fmeasure < 100


def test_quote_label_repair_same_as_c(evalb_c, tmp_path):
    """new.prm's QUOTE_LABEL: a quote deleted on one side only is put back (fix_quote)."""
    gold = [
        "(S (NP (`` \") (NN a)) (VP (VB b) ('' ')))",
        '(S (NP (`` ") (NN a) (`` ")) (VP (VB b)))',
        "(S (NP (NN x) (POS ')) (VP (VB b)) (: /))",
    ]
    test = [
        "(S (NP (NN \") (NN a)) (VP (VB b) (POS ')))",
        '(S (NP (NN ") (NN a) (VBZ ")) (VP (VB b)))',
        "(S (NP (NN x) ('' ')) (VP (VB b) (CD /)))",
    ]
    params = replace(read_params(evalb_c / "new.prm"), max_error=10**6)
    ours = compare_with_c(evalb_c, tmp_path, gold, test, params=params, prm="new.prm")
    assert [r.words for r in ours.sentences] == [4, 4, 0]


def test_stops_after_max_error_like_c(evalb_c, tmp_path):
    gold, test = tmp_path / "gold.txt", tmp_path / "test.txt"
    gold.write_text("(S (NN a) (NN b))\n" * 12)
    test.write_text("(S (NN a))\n" * 12)
    assert run_c(evalb_c, gold, test, "-p", str(evalb_c / "COLLINS.prm")).returncode == 1
    with pytest.raises(PluginError, match="MAX_ERROR=10"):
        evaluate_lines(read_lines(gold), read_lines(test))
    assert evaluate_lines(read_lines(gold)[:11], read_lines(test)[:11]).all.errors == 11


def test_nan_fmeasure_when_nothing_matches_like_c(evalb_c, tmp_path):
    ours = compare_with_c(evalb_c, tmp_path, ["(S (NN a))"], [""])
    assert "Bracketing FMeasure       =   -nan" in format_report(ours)


# ---------------------------------------------------------------- rules, without the C program
def test_punctuation_deleted_and_indices_shift():
    r = score_sentence(
        "(S (NP (DT a) (NN b)) (, ,) (VP (VB c)) (. .))", "(S (NP (DT a) (NN b) (, ,)) (VP (VB c)) (. .))"
    )
    assert (r.matched, r.gold, r.test, r.words, r.length) == (3, 3, 3, 3, 5)


def test_advp_prt_equivalent_and_function_tags_cut():
    r = score_sentence("(S (NP-SBJ (NN a)) (ADVP (RB b)))", "(S (NP (NN a)) (PRT (RP b)))")
    assert (r.matched, r.gold, r.correct_tags) == (3, 3, 1)


def test_empty_top_bracket_counts_and_top_does_not():
    inner = "(S (NP (NN a)) (VP (VB b)))"
    assert score_sentence(f"( {inner})", f"( {inner})").gold == 4
    assert score_sentence(f"(TOP {inner})", inner).gold == 3


def test_duplicate_brackets_match_one_to_one():
    r = score_sentence("(S (S (NN a) (NN b)))", "(S (NN a) (NN b))")
    assert (r.matched, r.gold, r.test) == (1, 2, 1)


def test_length_mismatch_is_an_error_and_empty_test_is_skipped():
    assert score_sentence("(S (NN a) (NN b))", "(S (NN a))").status == 1
    assert score_sentence("(S (NN a) (NN b))", "").status == 2
    with pytest.raises(PluginError, match="too many close"):
        score_sentence("(S (NN a)))", "(S (NN a))")


# ---------------------------------------------------------------- the CLI
def test_cli_prints_evalb_report_and_one_line_errors(tmp_path):
    gold, test = tmp_path / "gold.txt", tmp_path / "test.txt"
    gold.write_text("( (S (NP (NN a)) (VP (VB b) (. .))) )\n(S (NN c))\n")
    test.write_text("(S (NP (NN a)) (VP (VB b) (. .)))\n(S (NN c))\n")
    proc = subprocess.run([str(SCRIPT), str(gold), str(test)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    fmeasure = re.search(r"^Bracketing FMeasure\s+=\s+([\d.]+)$", proc.stdout, re.M)
    assert float(fmeasure.group(1)) == pytest.approx(100 * 2 * 0.8 / 1.8, abs=0.01)
    assert "Number of Valid sentence  =      2" in proc.stdout
    test.write_text("(S (NN c))\n")
    for args in ([gold, test], [gold, tmp_path / "missing"]):
        proc = subprocess.run([str(SCRIPT), *map(str, args)], capture_output=True, text=True)
        assert proc.returncode == 1 and proc.stderr.startswith("error: ")
        assert len(proc.stderr.strip().splitlines()) == 1


def test_empty_gold_is_an_error_not_a_zero_report(tmp_path):
    """Evalb.py on empty files printed an all-zero report, exit 0."""
    (tmp_path / "gold").write_text("")
    (tmp_path / "test").write_text("")
    proc = subprocess.run(
        [
            str(SCRIPT),
            str(tmp_path / "gold"),
            str(tmp_path / "test"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == (
        f"error: {tmp_path / 'gold'} holds no trees: give the gold file, one bracketed tree per line\n"
    )
