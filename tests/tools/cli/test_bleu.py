"""The paper's compound-split tokenized BLEU (section 6.1) and detokenized sacreBLEU."""

import math

import sacrebleu

HYP = "der Auto-Markt wächst heute stark"
REF = "der Auto-Markt wächst sehr stark"


def test_split_compounds_like_the_perl_one_liner(script):
    m = script("bleu_compound_split")
    assert m.split_compounds("die Auto-Industrie") == "die Auto ##AT##-##AT## Industrie"
    assert m.split_compounds("a-b-c x - y -z") == "a ##AT##-##AT## b-c x - y -z"  # one non-overlapping /g pass
    assert m.split_compounds(HYP) == "der Auto ##AT##-##AT## Markt wächst heute stark"


def test_compound_split_bleu_by_hand(script):
    m = script("bleu_compound_split")
    # split: 7 tokens each; matches 1-gram 6/7, 2-gram 4/6, 3-gram 3/5, 4-gram 2/4; BP = 1
    hand = 100 * (6 / 7 * 4 / 6 * 3 / 5 * 2 / 4) ** 0.25
    score = m.compound_split_bleu([HYP], [REF])
    assert score.counts == [6, 4, 3, 2] and score.totals == [7, 6, 5, 4]
    assert math.isclose(score.score, hand, rel_tol=1e-9)
    presplit = sacrebleu.corpus_bleu([m.split_compounds(HYP)], [[m.split_compounds(REF)]], tokenize="none")
    assert math.isclose(score.score, presplit.score, rel_tol=1e-12)
    unsplit = sacrebleu.corpus_bleu([HYP], [[REF]], tokenize="none")
    assert unsplit.score < 50 < score.score  # the split is what changes the score


def test_compound_split_cli(cli, tmp_path):
    (tmp_path / "hyp").write_text(f"{HYP}\nein Test\n", encoding="utf-8")
    (tmp_path / "ref").write_text(f"{REF}\nein Test\n", encoding="utf-8")
    proc = cli("bleu_compound_split", tmp_path / "hyp", tmp_path / "ref")
    assert proc.returncode == 0, proc.stderr
    hand = 100 * (8 / 9 * 5 / 7 * 3 / 5 * 2 / 4) ** 0.25  # the second line adds 2 unigrams, 1 bigram
    assert proc.stdout.startswith(f"BLEU = {hand:.2f} "), proc.stdout
    (tmp_path / "ref").write_text(f"{REF}\n", encoding="utf-8")
    short = cli("bleu_compound_split", tmp_path / "hyp", tmp_path / "ref")
    assert short.returncode == 1
    assert short.stderr.strip() == "error: 2 hypotheses but 1 references: the files must align"


def test_detok_identical_is_100(cli, script, tmp_path):
    lines = "Das ist gut.\nKlicken Sie auf „OK“.\nDie Auto-Industrie wächst\u2028weiter.\n"
    (tmp_path / "hyp").write_text(lines, encoding="utf-8")
    (tmp_path / "ref").write_text(lines, encoding="utf-8")
    proc = cli("sacrebleu_detok", tmp_path / "hyp", tmp_path / "ref")
    assert proc.returncode == 0, proc.stderr
    signature, _, score = proc.stdout.partition(" = ")
    assert signature.startswith("BLEU|nrefs:1|") and "tok:13a" in signature
    assert score.startswith("100.00 ")
    assert len(script("sacrebleu_detok").read_lines(tmp_path / "hyp")) == 3  # U+2028 is not a line break


def test_detok_scores_like_sacrebleu(script):
    score, signature = script("sacrebleu_detok").detok_bleu([HYP + "."], [REF + "."])
    assert math.isclose(score.score, sacrebleu.corpus_bleu([HYP + "."], [[REF + "."]]).score)
    assert score.score < 100 and "tok:13a" in str(signature)


def test_byte_order_mark_is_not_text(cli, tmp_path):
    """Hypotheses saved with a byte order mark scored 83 instead of 100 on 1-grams
    (the mark glued to the first word); it is an encoding mark, stripped when read."""
    ref = tmp_path / "ref"
    ref.write_text("Das ist ein Satz .\nNoch einer hier .\n", encoding="utf-8")
    hyp = tmp_path / "hyp"
    hyp.write_bytes(b"\xef\xbb\xbf" + ref.read_bytes())
    proc = cli("sacrebleu_detok", hyp, ref)
    assert proc.returncode == 0 and " = 100.00 100.0/100.0/100.0/100.0 " in proc.stdout, proc.stdout + proc.stderr


def test_compound_split_tokenizes_with_13a_when_asked(script, tmp_path, capsys):
    """--tokenize 13a: both files through sacreBLEU's 13a tokenizer first (the recipes' paper BLEU);
    the default scores the tokens as they are."""
    m = script("bleu_compound_split")
    (tmp_path / "hyp").write_text("Der Auto-Markt wächst.\n", encoding="utf-8")
    (tmp_path / "ref").write_text("Der Auto-Markt wächst stark.\n", encoding="utf-8")
    assert m.tokenize_13a(["Der Auto-Markt wächst."]) == ["Der Auto-Markt wächst ."]
    m.main([str(tmp_path / "hyp"), str(tmp_path / "ref"), "--tokenize", "13a"])
    tokenized = capsys.readouterr().out
    want = m.compound_split_bleu(["Der Auto-Markt wächst ."], ["Der Auto-Markt wächst stark ."])
    assert tokenized.strip() == str(want)
    m.main([str(tmp_path / "hyp"), str(tmp_path / "ref")])
    assert capsys.readouterr().out != tokenized  # "wächst." is one token untokenized
