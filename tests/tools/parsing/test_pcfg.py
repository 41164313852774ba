"""The treebank PCFG baseline for Section 6.3 / Table 4 of Vaswani et al. (2017) (Klein & Manning 2003):
rules and probabilities by hand, Viterbi CKY against hand-computed trees and brute force, parent
annotation and Markovization, the rare-word lexicon."""

import io
import itertools
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest

from attn_only_tools.guards.errors import PluginError
from attn_only_tools.parsing.cky import Chart
from attn_only_tools.parsing.grammar import START, Grammar, binarize, debinarize
from attn_only_tools.parsing.lexicon import Lexicon, backoff, signature
from attn_only_tools.parsing.linearize import normalize, right_branching_tree
from attn_only_tools.parsing.pcfg import PCFGParser
from attn_only_tools.parsing.ptb import parse_tree, read_trees, tree_to_str

# VP attachment (flat VP, binarized) once, NP attachment once, no PP twice.
PP_BANK = [
    "(S (NP (NNS dogs)) (VP (VBD saw) (NP (NNS cats)) (PP (IN with) (NP (NNS hats)))))",
    "(S (NP (NNS cats)) (VP (VBD saw) (NP (NP (NNS dogs)) (PP (IN with) (NP (NNS hats))))))",
    "(S (NP (NNS dogs)) (VP (VBD saw) (NP (NNS cats))))",
]


def trees(lines):
    return [normalize(parse_tree(line)) for line in lines]


def test_rules_and_probabilities_by_hand():
    g = PCFGParser.train(trees(PP_BANK), v=1, h=2).grammar
    # 3 VPs: one VBD NP PP (-> VBD @VP<VBD>, @VP<VBD> -> NP PP), two VBD NP. 9 NPs: 8 over NNS, 1 NP PP.
    assert g.rule_logp("VP", ["VBD", "@VP<VBD>"]) == pytest.approx(math.log(1 / 3))
    assert g.rule_logp("VP", ["VBD", "NP"]) == pytest.approx(math.log(2 / 3))
    assert g.rule_logp("@VP<VBD>", ["NP", "PP"]) == 0.0
    assert g.rule_logp("NP", ["NNS"]) == pytest.approx(math.log(8 / 9))
    assert g.rule_logp("NP", ["NP", "PP"]) == pytest.approx(math.log(1 / 9))
    assert g.rule_logp(START, ["S"]) == 0.0 and g.rule_logp("S", ["VP"]) == -math.inf


def test_tiny_grammar_parsed_by_hand():
    """dogs saw cats with hats: VP attachment (8/9)^3 * 1/3 against NP attachment (8/9)^3 * 2/3 * 1/9;
    words P(dogs|NNS) P(saw|VBD) P(cats|NNS) P(with|IN) P(hats|NNS) = 3/8 * 1 * 3/8 * 1 * 2/8 (no
    word is seen once, so there are no rare-word classes to smooth with)."""
    parser = PCFGParser.train(trees(PP_BANK), v=1, h=2)
    words = "dogs saw cats with hats".split()
    rules = (8 / 9) ** 3 / 3
    assert parser.chart(words).score == pytest.approx(math.log(rules * 3 / 8 * 3 / 8 * 2 / 8))
    tree, fallback = parser.parse(words)
    assert not fallback and tree_to_str(tree) == tree_to_str(trees(PP_BANK[:1])[0])
    np_attached = trees(["(S (NP (NNS dogs)) (VP (VBD saw) (NP (NP (NNS cats)) (PP (IN with) (NP (NNS hats))))))"])[0]
    assert parser.score(np_attached) == pytest.approx(math.log((8 / 9) ** 3 * 2 / 27 * 9 / 256))
    tags = ["NNS", "VBD", "NNS", "IN", "NNS"]
    assert parser.chart(words, tags).score == pytest.approx(math.log(rules))  # gold tags: no word factor
    assert tree_to_str(parser.parse(words, tags)[0]) == tree_to_str(tree)


def test_parent_annotation_and_markovization_symbols():
    tree = normalize(parse_tree("(S (NP-SBJ (DT the) (JJ big) (JJ red) (NN dog)) (VP (VBD barked)) (. .))"))
    assert str(binarize(tree, v=2, h=2)) == (
        "(TOP (S^TOP (NP^S (DT the) (@NP^S<DT> (JJ big) (@NP^S<DT JJ> (JJ red) (NN dog)))) "
        "(@S^TOP<NP> (VP^S (VBD barked)) (. .))))"
    )
    assert str(binarize(tree, v=2, h=1)).count("@NP^S<JJ> (JJ red)") == 1
    assert "(@NP^S<> (JJ big) (@NP^S<> (JJ red)" in str(binarize(tree, v=2, h=0))
    assert str(binarize(tree, v=1, h=3)).startswith(
        "(TOP (S (NP (DT the) (@NP<DT> (JJ big) (@NP<DT JJ> (JJ red) (NN dog)))) (@S<NP> (VP (VBD barked))"
    )
    with pytest.raises(ValueError, match="phrase label 'N@P'"):
        binarize(parse_tree("(S (N@P (NN x)))"))


def test_binarize_debinarize_round_trip(ptb_files):
    bank = [normalize(t) for path in ptb_files[:15] for t in read_trees(path)]
    for v, h in [(1, 0), (2, 1), (2, 2), (2, 5)]:
        for tree in bank:
            binary = binarize(tree, v, h)
            assert all(len(n.children) <= 2 for n in _nodes(binary))
            assert tree_to_str(debinarize(binary)) == tree_to_str(tree)


def _nodes(tree):
    return [tree] + [n for c in tree.children for n in _nodes(c)]


def test_unary_closure_by_hand():
    """A -> B (1/2), B -> C (1/2), A -> C (1/10): the chain A B C (1/4) beats the rule A -> C."""
    g = Grammar(
        {("A", "B"): 5, ("A", "C"): 1, ("A", "D", "D"): 4, ("B", "C"): 1, ("B", "D", "D"): 1, (START, "A"): 1},
        ["C", "D"],
        1,
        0,
    )
    a, b, c = (g.index[s] for s in "ABC")
    rows = g.closure.of(a)
    best = dict(zip(g.closure.left[rows].tolist(), g.closure.logp[rows].tolist(), strict=False))
    assert best == pytest.approx({b: math.log(1 / 2), c: math.log(1 / 4)})
    assert g.chain(a, c) == [a, b, c]
    assert g.chain(g.start, c) == [g.start, a, b, c]


def test_signature_by_hand():
    assert signature("Comptroller") == "UNK-CAP-er"
    assert signature("Unpredictably", initial=True) == "UNK-INITC-ly"
    assert signature("IBM") == "UNK-ALLCAPS" and signature("3.14") == "UNK-NUM"
    assert signature("ex-dividend") == "UNK-LC-DASH" and signature("--") == "UNK-PUNCT"
    assert signature("walks") == "UNK-LC-s" and signature("business") == "UNK-LC-ness"
    assert signature("glass") == "UNK-LC" and signature("iPod") == "UNK-MIXC"
    assert signature("1980s") == "UNK-LC-NUM" and signature("fixing") == "UNK-LC-ing"
    assert backoff("Comptroller") == ["UNK-CAP-er", "UNK-CAP", "UNK"]
    assert backoff("glass") == ["UNK-LC", "UNK"]


def test_lexicon_by_hand():
    """c(NN) = 4 (dog twice, walker, printer), c(VBZ) = 2 (runs, walks); words seen once: walker,
    printer (NN, LC-er) and runs, walks (VBZ, LC-s); their shape class LC holds all four."""
    sentences = [
        (["dog", "runs"], ["NN", "VBZ"]),
        (["dog", "walks"], ["NN", "VBZ"]),
        (["walker", "printer"], ["NN", "NN"]),
    ]
    plain = Lexicon(sentences, rare=0)
    nn, vbz = plain.tags.index("NN"), plain.tags.index("VBZ")
    s = plain.scores(["dog", "builder", "jumps", "x"])
    assert s[0, nn] == pytest.approx(math.log(2 / 4)) and s[0, vbz] == -math.inf
    assert s[1, nn] == pytest.approx(math.log(2 / 4)) and s[1, vbz] == -math.inf  # LC-er: walker, printer
    assert s[2, vbz] == pytest.approx(math.log(2 / 2)) and s[2, nn] == -math.inf  # LC-s: runs, walks
    assert s[3, nn] == pytest.approx(math.log(2 / 4)) and s[3, vbz] == pytest.approx(math.log(2 / 2))  # LC
    # rare = 3 (the default): dog (LC: P(NN|sig) = P(VBZ|sig) = 1/2) gets P(NN|dog) = (2 + 1/2) / 3 = 5/6, P(VBZ|dog)
    # = 1/6, so P(dog|NN) = 5/6 * 2/4 and P(dog|VBZ) = 1/6 * 2/2; walker (LC-er: all NN) stays NN only.
    s = Lexicon(sentences).scores(["dog", "walker", "builder"])
    assert s[0].tolist() == pytest.approx([math.log(5 / 12), math.log(1 / 6)])
    assert s[1, nn] == pytest.approx(math.log(1 / 4)) and s[1, vbz] == -math.inf
    assert s[2, nn] == pytest.approx(math.log(2 / 4)) and s[2, vbz] == -math.inf
    g = plain.gold(["VBZ", "XYZ"])
    assert g[0].tolist() == [-math.inf, 0.0] and np.isneginf(g[1]).all()
    assert plain.scores([]).shape == (0, 2)


# A grammar with ambiguity and unary cycles (S -> VP -> S, NP -> NP) for the brute-force check.
CYCLE_BANK = [
    "(S (NP (NNS dogs)) (VP (VBD saw) (NP (NNS cats)) (PP (IN with) (NP (NNS hats)))))",
    "(S (NP (NP (NNS cats))) (VP (VBD saw) (NP (NP (NNS dogs)) (PP (IN with) (NP (NNS hats))))))",
    "(S (VP (VBD saw) (NP (NNS cats) (NNS hats))))",
    "(VP (VBD saw) (S (NP (NNS dogs)) (VP (VBD saw))))",
    "(VP (S (VP (VBD saw) (NP (NNS dogs)))))",
    "(NP (NP (NNS dogs)) (PP (IN with) (NP (NNS cats) (PP (IN with) (NNS hats)))))",
]


def brute_force(grammar: Grammar, scores, i, j, symbol, chain=()):
    """Every derivation's log probability of `symbol` over words i..j-1, as a list; a unary chain
    never repeats a symbol (a cycle multiplies by a probability <= 1, so it never raises the max)."""
    found = []
    if j - i == 1 and symbol in grammar.tags.tolist():
        found.append(scores[i, grammar.tags.tolist().index(symbol)])
    u, b = grammar.unary, grammar.binary
    for r in range(*grammar.unary.of(symbol).indices(len(u.parent))):
        if u.left[r] not in chain + (symbol,):
            found += [u.logp[r] + s for s in brute_force(grammar, scores, i, j, u.left[r], chain + (symbol,))]
    for r in range(*b.of(symbol).indices(len(b.parent))):
        for k in range(i + 1, j):
            found += [
                b.logp[r] + x + y
                for x in brute_force(grammar, scores, i, k, b.left[r])
                for y in brute_force(grammar, scores, k, j, b.right[r])
            ]
    return found


@pytest.mark.parametrize("v,h", [(1, 0), (1, 2), (2, 1)])
def test_viterbi_equals_the_maximum_over_all_derivations(v, h):
    """Every sentence of 1-3 words over the vocabulary (gnus: unseen), and longer ones."""
    parser = PCFGParser.train(trees(CYCLE_BANK), v=v, h=h)
    g, vocabulary = parser.grammar, ["dogs", "cats", "hats", "saw", "with", "gnus"]
    sentences = [list(s) for n in (1, 2, 3) for s in itertools.product(vocabulary, repeat=n)] + [
        s.split()
        for s in (
            "dogs saw cats with hats",
            "saw gnus with dogs with hats",
            "dogs saw saw cats",
            "cats hats saw dogs with gnus",
            "dogs with cats saw hats",
        )
    ]
    parsed = 0
    for words in sentences:
        chart = parser.chart(words)
        every = brute_force(g, parser.lexicon.scores(words), 0, len(words), g.start)
        assert chart.score == pytest.approx(max(every, default=-math.inf)), words
        tree, fallback = parser.parse(words)
        if math.isfinite(chart.score):  # the tree read back from the chart has the chart's score
            parsed += 1
            assert not fallback and parser.score(tree) == pytest.approx(chart.score)
        else:
            assert fallback and tree == right_branching_tree(words)
    assert parsed >= 20


def test_viterbi_never_below_the_gold_tree(ptb_files):
    bank = [normalize(t) for path in ptb_files[:25] for t in read_trees(path)]
    parser = PCFGParser.train(bank, v=2, h=2)
    short = [t for t in bank if len(t.words()) <= 12][:25]
    for gold in short:  # training trees: the grammar derives each
        for tags in (None, gold.tags()):
            chart = parser.chart(gold.words(), tags)
            best = parser.score(gold, tags_only=tags is not None)
            assert math.isfinite(best) and chart.score >= best - 1e-9
            tree, _ = parser.parse(gold.words(), tags)
            assert parser.score(tree, tags_only=tags is not None) == pytest.approx(chart.score)


def test_chart_of_one_word_and_no_parse():
    parser = PCFGParser.train(trees(PP_BANK), v=2, h=2)
    assert parser.parse(["dogs"]) == (parse_tree("(S (XX dogs))"), True)  # no S^TOP over one NNS
    tree, fallback = parser.parse("cats saw dogs".split())
    assert not fallback and str(tree) == "(S (NP (NNS cats)) (VP (VBD saw) (NP (NNS dogs))))"
    assert math.isinf(Chart(parser.grammar, parser.lexicon.gold(["IN"])).score)
    with pytest.raises(ValueError, match="empty sentence"):
        parser.parse([])


@pytest.fixture
def script():
    from attn_only_tools.cli import pcfg_baseline

    return pcfg_baseline


@pytest.fixture
def data(tmp_path):
    """tmp/text/{train,test}.{words,tags,gold} as attn-only-prepare-ptb writes them."""
    text = tmp_path / "text"
    text.mkdir()
    for split, bank in [("train", PP_BANK), ("test", PP_BANK[2:] + ["(S (NP (NNS gnus)) (VP (VBD saw)))"])]:
        gold = trees(bank)
        (text / f"{split}.words").write_text("".join(" ".join(t.words()) + "\n" for t in gold))
        (text / f"{split}.tags").write_text("".join(" ".join(t.tags()) + "\n" for t in gold))
        (text / f"{split}.gold").write_text("".join(tree_to_str(t) + "\n" for t in gold))
    return text


def test_script_scores_and_counts_fallbacks(script, data, tmp_path):
    """Sentence 1 is parsed right (4 of 4 brackets, 3 of 3 tags); sentence 2 (gnus saw) has no parse (no
    VP of a lone VBD in training) and gets (S (XX gnus) (XX saw)): 1 bracket, right, of gold's 3, and
    no tag right. Recall 5/7, precision 5/5, F1 2 * 5/7 / (12/7) = 5/6; tagging 3/5."""
    report = script.baseline(data, "test", out=tmp_path / "test.pcfg", log=io.StringIO())
    assert report == (
        "EVALB (COLLINS.prm) on test, 2 sentences (2 valid): F1 83.33 (recall 71.43, precision "
        "100.00, complete match 50.00); treebank PCFG (v=2, h=2, rare 3, trained on train) from words: "
        "tagging accuracy 60.00%, 1 right-branching fallbacks"
    )
    assert (tmp_path / "test.pcfg").read_text().splitlines() == [
        "(S (NP (NNS dogs)) (VP (VBD saw) (NP (NNS cats))))",
        "(S (NNS gnus) (VBD saw))",
    ]
    gold_tags = script.baseline(data, "test", markov=0, vertical=1, gold_tags=True, log=io.StringIO())
    assert "(v=1, h=0, rare 3, trained on train) from gold POS tags: tagging accuracy 60.00%, 1 right" in gold_tags


def refused(call, message):
    """call() ends with the one `error:` line `message`: a PluginError, which the hook prints after
    "error: "."""
    with pytest.raises(PluginError) as stop:
        call()
    line = f"error: {stop.value}"
    assert re.fullmatch(message, line), line


def test_script_refusals_are_one_line(script, data, tmp_path, monkeypatch):
    (tmp_path / "link.pcfg").symlink_to(data / "train.gold")
    before = {p: p.read_bytes() for p in data.iterdir()}
    monkeypatch.chdir(tmp_path)
    for out, clash in [
        (data / "test.words", data / "test.words"),
        (Path("text/test.gold"), data / "test.gold"),
        (tmp_path / "link.pcfg", data / "train.gold"),
    ]:
        refused(
            lambda out=out: script.main(["--data", str(data), "--out", str(out)]),
            re.escape(
                f"error: --out {out} is the input {clash}: writing it would destroy or change that input, "
                "--force or not; give --out a path outside every input"
            ),
        )
    (tmp_path / "earlier.pcfg").write_text("mine\n")  # an existing output: kept unless --force
    refused(
        lambda: script.main(["--data", str(data), "--out", "earlier.pcfg"]),
        re.escape("error: --out earlier.pcfg already exists: pass --force to replace it, or choose another --out"),
    )
    assert (tmp_path / "earlier.pcfg").read_text() == "mine\n"
    refused(
        lambda: script.main(["--data", str(data), "--split", "valid"]),
        re.escape(
            f"error: {data / 'valid.words'} not found: run attn-only-prepare-ptb first (--data is its --out folder)"
        ),
    )
    refused(
        lambda: script.main(["--data", str(data), "--train", "valid"]),
        re.escape(
            f"error: {data / 'valid.gold'} not found: run attn-only-prepare-ptb first, with a --split "
            "that makes this training split"
        ),
    )
    refused(
        lambda: script.main(["--data", str(data), "--markov", "-1"]),
        "error: --markov -1: give the number of siblings to remember, 0 or more",
    )
    refused(
        lambda: script.main(["--data", str(data), "--rare", "-1"]), "error: --rare -1: give a word count, 0 or more"
    )
    assert {p: p.read_bytes() for p in data.iterdir()} == before
    (data / "test.tags").write_text("NNS VBD NNS\n")
    refused(
        lambda: script.main(["--data", str(data)]),
        re.escape(
            f"error: {data / 'test.words'}, .tags and .gold have 2, 1 and 2 lines: they are not one "
            "attn-only-prepare-ptb output; rerun it"
        ),
    )
    (data / "test.tags").write_text("NNS VBD\nNNS VBD\n")
    refused(
        lambda: script.main(["--data", str(data)]),
        re.escape(
            f"error: line 1 of {data / 'test.words'} has 3 words but {data / 'test.tags'} has 2 tags: "
            "they are not one attn-only-prepare-ptb output; rerun it"
        ),
    )
    (data / "empty.gold").write_text("")
    refused(
        lambda: script.main(["--data", str(data), "--train", "empty", "--split", "train"]),
        re.escape(f"error: {data / 'empty.gold'} has no trees: give --train a split with trees"),
    )
    (data / "bad.gold").write_text("(S (N@P (NN x)))\n")
    refused(
        lambda: script.main(["--data", str(data), "--train", "bad", "--split", "train"]),
        re.escape(f"error: {data / 'bad.gold'}: phrase label 'N@P' is empty or holds") + ".*",
    )
    assert sorted(os.listdir(tmp_path)) == ["earlier.pcfg", "link.pcfg", "text"]


@pytest.mark.parametrize("where", ["start", "inside"])
@pytest.mark.parametrize("char", ["\ufeff", "\x00"])
def test_hidden_characters_in_the_words_score_every_sentence_or_are_refused(script, data, tmp_path, char, where):
    """A byte order mark or NUL in test.words made EVALB drop that sentence: F1 over fewer sentences
    than the report names, exit 0. A byte order mark that starts the file is an encoding mark: stripped,
    every sentence scored as without it; any other is refused in one line naming file, line and column."""
    clean = script.baseline(data, "test", log=io.StringIO())
    words = (data / "test.words").read_text().splitlines()
    if where == "start":
        words[0] = char + words[0]
    else:
        words[1] = words[1].replace(" ", " " + char, 1)
    (data / "test.words").write_text("\n".join(words) + "\n")
    if char == "\ufeff" and where == "start":
        assert script.baseline(data, "test", log=io.StringIO()) == clean  # 2 sentences (2 valid), the same F1
        return
    line, column = (1, 1) if where == "start" else (2, len(words[1].split(char)[0]) + 1)
    name = "U+FEFF ZERO WIDTH NO-BREAK SPACE" if char == "\ufeff" else "U+0000 NULL"
    refused(
        lambda: script.baseline(data, "test", log=io.StringIO()),
        re.escape(f"error: {data / 'test.words'} line {line} holds an invisible character, {name} at column {column}")
        + ".*remove it first.*",
    )


def test_a_sentence_evalb_cannot_score_is_refused(script, data):
    """Whatever makes a parse's words differ from its gold tree's, F1 is never reported without it."""
    gold = (data / "test.gold").read_text().replace("gnus", "gnu")  # the words and gold disagree on line 2
    (data / "test.gold").write_text(gold)
    refused(
        lambda: script.baseline(data, "test", log=io.StringIO()),
        re.escape("error: EVALB cannot score sentence 2 of test (")
        + ".*so F1 would leave it out: line 2 of .*test.words, .tags and .gold disagree; rerun attn-only-prepare-ptb",
    )
