"""Penn Treebank reading for Section 6.3 of Vaswani et al. (2017)."""

import pytest

from attn_only_tools.parsing.ptb import Tree, parse_tree, read_trees, tree_to_str

MRG = """( (S
    (NP-SBJ (NNP Mr.) (NNP Vinken) )
    (VP (VBZ is)
      (NP-PRD (NN chairman) ))
    (. .) ))
( (S (NP (-NONE- *) ) (VP (VB go) )) )
"""


def test_reads_multi_line_trees_and_drops_empty_top(tmp_path):
    path = tmp_path / "wsj_test.mrg"
    path.write_text(MRG)
    trees = read_trees(path)
    assert [tree_to_str(t) for t in trees] == [
        "(S (NP-SBJ (NNP Mr.) (NNP Vinken)) (VP (VBZ is) (NP-PRD (NN chairman))) (. .))",
        "(S (NP (-NONE- *)) (VP (VB go)))",
    ]
    assert trees[0].words() == ["Mr.", "Vinken", "is", "chairman", "."]
    assert trees[0].tags() == ["NNP", "NNP", "VBZ", "NN", "."]


def test_round_trips_through_one_line_brackets():
    text = "( (S (NP (DT a)) (VP (VB b))) (. .))"
    tree = parse_tree(text)
    assert tree.label == "" and len(tree.children) == 2
    assert parse_tree(tree_to_str(tree)) == tree
    assert str(Tree("NP", [Tree("NN", word="x")])) == "(NP (NN x))"


@pytest.mark.parametrize(
    "text, line, what",
    [
        ("( (S (NP (NN a)) )\n( (S (NN b)) )\n", 1, "too many '('"),
        ("( (S (NN a)) )\n\n( (S (NN b))) )\n", 3, "too many ')'"),
    ],
)
def test_unbalanced_file_gives_one_line_error(tmp_path, text, line, what):
    path = tmp_path / "broken.mrg"
    path.write_text(text)
    with pytest.raises(ValueError) as error:
        read_trees(path)
    message = str(error.value)
    assert "\n" not in message and str(path) in message
    assert f"line {line}" in message and "unbalanced brackets" in message and what in message


def test_text_outside_trees_and_empty_brackets_are_errors(tmp_path):
    path = tmp_path / "junk.mrg"
    path.write_text("( (S (NN a)) ) junk\n")
    with pytest.raises(ValueError, match="line 1: text 'junk' outside any tree"):
        read_trees(path)
    with pytest.raises(ValueError, match="empty bracket"):
        parse_tree("(S (NP) (NN a))")


def test_reads_every_sample_file(ptb_files, ptb_trees):
    assert len(ptb_trees) >= len(ptb_files)
    assert all(tree.words() and tree.label for tree in ptb_trees)
