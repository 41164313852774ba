"""attn-only-parse-eval: a fairseq-generate log is scored only against the split it translated
(its S- lines checked against SPLIT.words, in number and words), and --out never replaces an input."""

import os
import re
from pathlib import Path

import pytest

from attn_only_tools.guards.errors import PluginError
from attn_only_tools.parsing.data import score_predictions
from attn_only_tools.parsing.linearize import linearize, normalize
from attn_only_tools.parsing.ptb import parse_tree, tree_to_str

TREES = ["(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))", "(S (NP (PRP It)) (VP (VBD rained)))"]


@pytest.fixture
def parse_eval():
    from attn_only_tools.cli import parse_eval

    return parse_eval


@pytest.fixture
def data(tmp_path):
    """tmp/text/test.{words,tags,gold} as attn-only-prepare-ptb writes them, for TREES."""
    text = tmp_path / "text"
    text.mkdir()
    trees = [normalize(parse_tree(t)) for t in TREES]
    (text / "test.words").write_text("".join(" ".join(t.words()) + "\n" for t in trees))
    (text / "test.tags").write_text("".join(" ".join(t.tags()) + "\n" for t in trees))
    (text / "test.gold").write_text("".join(tree_to_str(t) + "\n" for t in trees))
    return text


def generate_log(path, sources, trees=TREES, target_words=False):
    """fairseq-generate's output: S- (source words), T-, H- lines per sentence, in its order."""
    lines = ["2026-01-01 10:00:00 | INFO | fairseq_cli.generate | loading model(s)"]
    for i, (source, tree) in reversed(list(enumerate(zip(sources, trees, strict=True)))):
        target = " ".join(linearize(parse_tree(tree), target_words)[1])
        lines += [f"S-{i}\t{source}", f"T-{i}\t{target}", f"H-{i}\t-0.1\t{target}", f"D-{i}\t-0.1\t{target}"]
    path.write_text("\n".join(lines) + "\nGenerate test with beam=21: BLEU4 = 0.00\n")
    return path


def refused(call, message):
    """call() ends with the one `error:` line `message`: a PluginError, which the hook prints after
    "error: "."""
    with pytest.raises(PluginError) as stop:
        call()
    line = f"error: {stop.value}"
    assert re.fullmatch(message, line), line


def test_the_split_it_translated_scores(parse_eval, data, tmp_path):
    log = generate_log(tmp_path / "gen.log", ["The <unk> sat .", "It rained"])  # <unk>: a word outside the dictionary
    report = parse_eval.evaluate(log, data, "test", tmp_path / "test.pred")
    assert report.startswith("EVALB (COLLINS.prm) on test, 2 sentences (2 valid): F1 100.00")
    assert (tmp_path / "test.pred").read_text().splitlines() == (data / "test.gold").read_text().splitlines()


def test_a_log_with_words_in_the_targets_scores(parse_eval, data, tmp_path):
    """A model trained on attn-only-prepare-ptb --target-words writes the words (or <unk>) in its slots."""
    log = generate_log(tmp_path / "gen.log", ["The <unk> sat .", "It rained"], target_words=True)
    assert "H-0\t-0.1\t(S (NP The cat )NP (VP sat )VP . )S" in log.read_text()
    report = parse_eval.evaluate(log, data, "test", tmp_path / "test.pred")
    assert report.startswith("EVALB (COLLINS.prm) on test, 2 sentences (2 valid): F1 100.00")
    assert "; 0 outputs repaired" in report


def test_the_same_bracketing_scores_the_same_with_xx_or_words():
    """score_predictions: right, wrong and malformed bracketings, each written with XX and with words
    (some of them wrong or <unk>), give the same F1, repairs and trees."""
    gold = [normalize(parse_tree(t)) for t in TREES]
    words, tags, lines = [t.words() for t in gold], [t.tags() for t in gold], [tree_to_str(t) for t in gold]
    as_xx = [
        ["(S (NP XX XX )NP (VP XX )VP XX )S", "(S (NP XX )NP (VP XX )VP )S"],  # right
        ["(S XX (VP XX XX )VP XX )S", "(S (VP XX XX )VP )S"],  # wrong brackets
        ["(S (NP XX XX (VP XX )VP", "(S XX XX XX )S )NP"],
    ]  # malformed: repaired
    as_words = [
        ["(S (NP The cat )NP (VP sat )VP . )S", "(S (NP It )NP (VP <unk> )VP )S"],
        ["(S The (VP cat sat )VP . )S", "(S (VP It rained )VP )S"],
        ["(S (NP The dog (VP sat )VP", "(S It rained rained )S )NP"],
    ]
    scores = []
    for xx, ws in zip(as_xx, as_words, strict=True):
        (a, repaired_a, trees_a), (b, repaired_b, trees_b) = (
            score_predictions([h.split() for h in hyps], words, lines, tags) for hyps in (xx, ws)
        )
        assert (a.all.fmeasure, repaired_a, trees_a) == (b.all.fmeasure, repaired_b, trees_b)
        scores.append((a.all.fmeasure, repaired_a))
    assert scores[0] == (100.0, 0) and scores[1][0] < 100 and scores[2][1] == 2  # each case is what it says


def test_log_of_another_split_or_task_is_refused(parse_eval, data, tmp_path):
    fix = re.escape(
        f"score the log against the --data/--split it was generated from, or generate with --gen-subset "
        f"test on the data-bin made from {data}"
    )
    words = re.escape(str(data / "test.words"))
    other = generate_log(tmp_path / "valid.log", ["A dog barked .", "It snowed"])  # same lengths, other words
    refused(
        lambda: parse_eval.evaluate(other, data, "test"),
        f"error: {re.escape(str(other))} is not the output for {words}: its sentence 0 is 'A dog barked .' but "
        f"line 1 there is 'The cat sat .' \\(another split or task\\?\\); {fix}",
    )
    longer = generate_log(tmp_path / "longer.log", ["The cat sat .", "It rained", "It rained"], TREES + TREES[1:])
    refused(
        lambda: parse_eval.evaluate(longer, data, "test"),
        f"error: {re.escape(str(longer))} holds 3 source sentences but {words} has 2: it is the output of another "
        f"split or task; {fix}",
    )
    translation = generate_log(tmp_path / "mt.log", ["ein Satz", "noch einer"])
    refused(lambda: parse_eval.evaluate(translation, data, "test"), ".* its sentence 0 is 'ein Satz' but .*")
    only_h = tmp_path / "h.log"
    only_h.write_text(
        "".join(
            line + "\n"
            for line in generate_log(tmp_path / "x.log", ["The cat sat .", "It rained"]).read_text().splitlines()
            if line.startswith("H-")
        )
    )
    refused(
        lambda: parse_eval.evaluate(only_h, data, "test"),
        f"error: {re.escape(str(only_h))} has no S- lines \\(source sentences\\): give fairseq-generate's whole "
        "output, without --quiet, not only its H- lines",
    )


def test_out_that_is_an_input_is_refused(parse_eval, data, tmp_path, monkeypatch):
    log = generate_log(tmp_path / "gen.log", ["The cat sat .", "It rained"])
    (tmp_path / "link.pred").symlink_to(data / "test.gold")
    before = {p: p.read_bytes() for p in (log, *data.iterdir())}
    monkeypatch.chdir(tmp_path)
    for out, clash in [
        (log, log),
        (Path("gen.log"), log),
        (data / "test.words", data / "test.words"),
        (tmp_path / "link.pred", data / "test.gold"),
    ]:
        refused(
            lambda out=out: parse_eval.main([str(log), "--data", str(data), "--split", "test", "--out", str(out)]),
            re.escape(
                f"error: --out {out} is the input {clash}: writing it would destroy or change that input, "
                "--force or not; give --out a path outside every input"
            ),
        )
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(os.listdir(tmp_path)) == ["gen.log", "link.pred", "text"]


def test_existing_out_is_replaced_only_with_force(parse_eval, data, tmp_path):
    """The shared rule for outputs; an earlier --out is kept unless --force."""
    log = generate_log(tmp_path / "gen.log", ["The cat sat .", "It rained"])
    out = tmp_path / "test.pred"
    out.write_text("mine\n")
    args = [str(log), "--data", str(data), "--split", "test", "--out", str(out)]
    refused(
        lambda: parse_eval.main(args),
        re.escape(f"error: --out {out} already exists: pass --force to replace it, or choose another --out"),
    )
    assert out.read_text() == "mine\n"
    parse_eval.main([*args, "--force"])
    assert len(out.read_text().splitlines()) == 2 and out.read_text() != "mine\n"


def test_hidden_characters_in_the_words_are_stripped_or_refused(parse_eval, data, tmp_path):
    """A byte order mark starting test.words is an encoding mark (stripped: both sentences scored); a NUL
    inside made EVALB drop the sentence from F1 without a word: refused in one line."""
    log = generate_log(tmp_path / "gen.log", ["The cat sat .", "It rained"])
    words = data / "test.words"
    words.write_text("\ufeff" + words.read_text())
    report = parse_eval.evaluate(log, data, "test")
    assert report.startswith("EVALB (COLLINS.prm) on test, 2 sentences (2 valid): F1 100.00")
    words.write_text(words.read_text().lstrip("\ufeff").replace("It", "It\x00"))
    refused(
        lambda: parse_eval.evaluate(log, data, "test"),
        re.escape(f"error: {words} line 2 holds an invisible character, U+0000 NULL at column 3") + ".*",
    )
