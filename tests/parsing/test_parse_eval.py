"""scripts/parse_eval.py: a fairseq-generate log is scored only against the split it translated
(its S- lines checked against SPLIT.words, in number and words), and --out never replaces an input."""
import importlib.util
import os
import re
from pathlib import Path

import pytest

from attn_only_plugin.parsing.linearize import linearize, normalize
from attn_only_plugin.parsing.ptb import parse_tree, tree_to_str

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "parse_eval.py"
TREES = ["(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))",
         "(S (NP (PRP It)) (VP (VBD rained)))"]


@pytest.fixture
def parse_eval():
    spec = importlib.util.spec_from_file_location("parse_eval", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def data(tmp_path):
    """tmp/text/test.{words,tags,gold} as prepare_ptb.py writes them, for TREES."""
    text = tmp_path / "text"
    text.mkdir()
    trees = [normalize(parse_tree(t)) for t in TREES]
    (text / "test.words").write_text("".join(" ".join(t.words()) + "\n" for t in trees))
    (text / "test.tags").write_text("".join(" ".join(t.tags()) + "\n" for t in trees))
    (text / "test.gold").write_text("".join(tree_to_str(t) + "\n" for t in trees))
    return text


def generate_log(path, sources, trees=TREES):
    """fairseq-generate's output: S- (source words), T-, H- lines per sentence, in its order."""
    lines = ["2026-01-01 10:00:00 | INFO | fairseq_cli.generate | loading model(s)"]
    for i, (source, tree) in reversed(list(enumerate(zip(sources, trees)))):
        target = " ".join(linearize(parse_tree(tree))[1])
        lines += [f"S-{i}\t{source}", f"T-{i}\t{target}", f"H-{i}\t-0.1\t{target}", f"D-{i}\t-0.1\t{target}"]
    path.write_text("\n".join(lines) + "\nGenerate test with beam=21: BLEU4 = 0.00\n")
    return path


def refused(call, message):
    with pytest.raises(SystemExit) as stop:
        call()
    assert re.fullmatch(message, str(stop.value)), stop.value


def test_the_split_it_translated_scores(parse_eval, data, tmp_path):
    log = generate_log(tmp_path / "gen.log", ["The <unk> sat .", "It rained"])  # <unk>: a word outside the dictionary
    report = parse_eval.evaluate(log, data, "test", tmp_path / "test.pred")
    assert report.startswith("EVALB (COLLINS.prm) on test, 2 sentences (2 valid): F1 100.00")
    assert (tmp_path / "test.pred").read_text().splitlines() == (data / "test.gold").read_text().splitlines()


def test_log_of_another_split_or_task_is_refused(parse_eval, data, tmp_path):
    fix = re.escape(f"score the log against the --data/--split it was generated from, or generate with --gen-subset "
                    f"test on the data-bin made from {data}")
    words = re.escape(str(data / "test.words"))
    other = generate_log(tmp_path / "valid.log", ["A dog barked .", "It snowed"])  # same lengths, other words
    refused(lambda: parse_eval.evaluate(other, data, "test"),
            f"error: {re.escape(str(other))} is not the output for {words}: its sentence 0 is 'A dog barked .' but "
            f"line 1 there is 'The cat sat .' \\(another split or task\\?\\); {fix}")
    longer = generate_log(tmp_path / "longer.log", ["The cat sat .", "It rained", "It rained"], TREES + TREES[1:])
    refused(lambda: parse_eval.evaluate(longer, data, "test"),
            f"error: {re.escape(str(longer))} holds 3 source sentences but {words} has 2: it is the output of another "
            f"split or task; {fix}")
    translation = generate_log(tmp_path / "mt.log", ["ein Satz", "noch einer"])
    refused(lambda: parse_eval.evaluate(translation, data, "test"), ".* its sentence 0 is 'ein Satz' but .*")
    only_h = tmp_path / "h.log"
    only_h.write_text("".join(line + "\n" for line in generate_log(tmp_path / "x.log", ["The cat sat .", "It rained"])
                              .read_text().splitlines() if line.startswith("H-")))
    refused(lambda: parse_eval.evaluate(only_h, data, "test"),
            f"error: {re.escape(str(only_h))} has no S- lines \\(source sentences\\): give fairseq-generate's whole "
            "output, without --quiet, not only its H- lines")


def test_out_that_is_an_input_is_refused(parse_eval, data, tmp_path, monkeypatch):
    log = generate_log(tmp_path / "gen.log", ["The cat sat .", "It rained"])
    (tmp_path / "link.pred").symlink_to(data / "test.gold")
    before = {p: p.read_bytes() for p in (log, *data.iterdir())}
    monkeypatch.chdir(tmp_path)
    for out, clash in [(log, log), (Path("gen.log"), log), (data / "test.words", data / "test.words"),
                       (tmp_path / "link.pred", data / "test.gold")]:
        refused(lambda: parse_eval.main([str(log), "--data", str(data), "--split", "test", "--out", str(out)]),
                re.escape(f"error: --out {out} is the input {clash}: the predicted trees would replace it; give --out "
                          "another path, e.g. test.pred"))
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(os.listdir(tmp_path)) == ["gen.log", "link.pred", "text"]
