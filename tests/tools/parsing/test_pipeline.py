"""Section 6.3 end to end: treebank -> linearized data -> fairseq (transformer_parse) ->
beam 21 -> repaired trees -> EVALB F1; and the data/scoring steps on their own."""

import os
import subprocess
from pathlib import Path

import pytest

from helpers import BIN, PTB_SAMPLE

ROOT = Path(__file__).resolve().parents[3]
SMALL_CHECKPOINTS = "ensemble"  # what SMALL=1 decodes: the mean of the last 5 checkpoints, or them as an ensemble
OTHER_CHECKPOINTS = {"average": "ensemble", "ensemble": "average"}[SMALL_CHECKPOINTS]


def prepare(out, *split):
    return subprocess.run(
        [
            str(BIN / "attn-only-prepare-ptb"),
            "--treebank",
            str(PTB_SAMPLE),
            "--out",
            str(out),
            "--split",
            *split,
        ],
        capture_output=True,
        text=True,
    )


def test_prepare_and_score_gold(tmp_path, ptb_files):
    proc = prepare(tmp_path, "train=1-3", "valid=4-4", "test=5-6")
    assert proc.returncode == 0, proc.stderr
    words = (tmp_path / "test.words").read_text().splitlines()
    trees = (tmp_path / "test.tree").read_text().splitlines()
    assert len(words) == len(trees) == len((tmp_path / "test.gold").read_text().splitlines()) > 0
    assert all(t.split().count("XX") == len(w.split()) for w, t in zip(words, trees, strict=True))
    from attn_only_tools.parsing.data import right_branching_baseline, score_predictions

    tags = [line.split() for line in (tmp_path / "test.tags").read_text().splitlines()]
    gold = (tmp_path / "test.gold").read_text().splitlines()
    result, repaired, _ = score_predictions([t.split() for t in trees], [w.split() for w in words], gold, tags)
    assert result.all.fmeasure == 100.0 and repaired == 0  # the gold linearization scores perfectly
    assert right_branching_baseline([w.split() for w in words], gold, tags).all.fmeasure < 60


def test_prepare_target_words_and_score_gold(tmp_path, ptb_files):
    """--target-words: the same trees with each word in its slot; scoring reads them as XX."""
    xx, words_dir = tmp_path / "xx", tmp_path / "words"
    for out, extra in [(xx, []), (words_dir, ["--target-words"])]:
        proc = prepare(out, "train=1-2", "test=5-6", *extra)
        assert proc.returncode == 0, proc.stderr
    words = [line.split() for line in (words_dir / "test.words").read_text().splitlines()]
    copy = [line.split() for line in (words_dir / "test.tree").read_text().splitlines()]
    placeholder = [line.split() for line in (xx / "test.tree").read_text().splitlines()]
    assert [[t for t in c if t[0] not in "()"] for c in copy] == words  # the words, in order
    assert [[t if t[0] in "()" else "XX" for t in c] for c in copy] == placeholder  # the same brackets
    for name in ("words", "gold", "tags"):
        assert (words_dir / f"test.{name}").read_bytes() == (xx / f"test.{name}").read_bytes()
    from attn_only_tools.parsing.data import score_predictions

    tags = [line.split() for line in (words_dir / "test.tags").read_text().splitlines()]
    gold = (words_dir / "test.gold").read_text().splitlines()
    result, repaired, _ = score_predictions(copy, words, gold, tags)
    assert result.all.fmeasure == 100.0 and repaired == 0


def test_prepare_errors_are_one_line(tmp_path, ptb_files):
    proc = prepare(tmp_path / "a", "train=9000-9001")
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1].startswith("error: no wsj_NNNN.mrg")
    bad = tmp_path / "bank"
    bad.mkdir()
    (bad / "wsj_0001.mrg").write_text("( (S (NP (DT The) (NN cat)) (VP (VBD sat)) )\n")
    proc = subprocess.run(
        [
            str(BIN / "attn-only-prepare-ptb"),
            "--treebank",
            str(bad),
            "--out",
            str(tmp_path / "b"),
            "--split",
            "train=1-1",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and "unbalanced" in last and not (tmp_path / "b").exists()


@pytest.mark.parametrize("content", ["", "\n  \n"])
def test_an_empty_treebank_file_is_refused(tmp_path, ptb_files, content):
    """An empty .mrg (cut short in copying) contributed no trees to its split, without a word."""
    bank = tmp_path / "bank"
    bank.mkdir()
    for source in sorted(ptb_files)[:3]:
        (bank / source.name).write_bytes(source.read_bytes())
    empty = bank / sorted(ptb_files)[1].name
    empty.write_text(content)
    proc = subprocess.run(
        [
            str(BIN / "attn-only-prepare-ptb"),
            "--treebank",
            str(bank),
            "--out",
            str(tmp_path / "b"),
        ]
        + ["--split", "train=1-1", "valid=2-2", "test=3-3"],
        capture_output=True,
        text=True,
    )
    last = proc.stderr.strip().splitlines()[-1]  # after fairseq's import-time INFO line
    kind = "empty" if not content else "whitespace only"
    assert proc.returncode == 1 and last.startswith(f"error: {empty}: holds no trees ({kind}): a treebank"), last
    assert not (tmp_path / "b").exists()


def test_out_follows_the_shared_rule(tmp_path):
    """An existing --out is written into only with --force; an --out that is, holds or lies
    inside --treebank is refused, --force or not, before anything is written."""
    bank = tmp_path / "bank"
    bank.mkdir()
    for n in (1, 2, 3):
        (bank / f"wsj_000{n}.mrg").write_text("( (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)) )\n")

    def run(out, *extra):
        return subprocess.run(
            [str(BIN / "attn-only-prepare-ptb"), "--treebank", str(bank), "--out", str(out)]
            + ["--split", "train=1-1", "valid=2-2", "test=3-3", *extra],
            capture_output=True,
            text=True,
        )

    assert run(tmp_path / "text").returncode == 0  # the control
    before = (tmp_path / "text" / "test.gold").read_text()
    (tmp_path / "text" / "test.gold").write_text("mine\n")
    proc = run(tmp_path / "text")
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == (
        f"error: --out {tmp_path / 'text'} already exists: pass --force to replace it, or choose another --out"
    )
    assert (tmp_path / "text" / "test.gold").read_text() == "mine\n"
    assert run(tmp_path / "text", "--force").returncode == 0
    assert (tmp_path / "text" / "test.gold").read_text() == before
    for out, problem in [
        (bank, "is the input"),
        (bank / "text", "lies inside the input"),
        (tmp_path, "holds the input"),
    ]:
        proc = run(out, "--force")
        assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == (
            f"error: --out {out} {problem} {bank}: writing it would destroy or change that input, --force or not; "
            "give --out a path outside every input"
        ), proc.stderr[-2000:]
    assert sorted(os.listdir(bank)) == ["wsj_0001.mrg", "wsj_0002.mrg", "wsj_0003.mrg"]


def test_a_folder_made_otherwise_is_refused_before_any_work(tmp_path):
    """WORK's data prepared with other settings, or its checkpoints trained with other flags, are refused
    in one line before the treebank is read (pipeline.sh's refuse_other_settings, shared with table3.sh)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RELPOS", "SUBWORDS", "CHECKPOINTS", "TRAIN_FLAGS")}
    env.update(WSJ=str(tmp_path / "no-treebank"), SMALL="1", WORK=str(tmp_path), SPLIT="train=1-2 valid=3-3 test=4-4")
    for name in ("PREPARE_FLAGS", "PREPROCESS_FLAGS"):
        env.pop(name, None)
    (tmp_path / "data.settings").write_text("split: standard | prepare_ptb.py:  | fairseq-preprocess: \n")
    recipe = ["bash", str(ROOT / "examples" / "wsj_parsing.sh")]
    proc = subprocess.run(recipe, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        f"error: {tmp_path} holds data prepared otherwise (split: standard | prepare_ptb.py:  | fairseq-preprocess: ), "
        "not as now (split: train=1-2 valid=3-3 test=4-4 | prepare_ptb.py: --target-words | fairseq-preprocess: "
        f"--nwordstgt 2000): give another WORK, or remove {tmp_path} to start over"
    ], proc.stderr[-2000:]
    (tmp_path / "data.settings").unlink()
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "checkpoint_last.pt").write_bytes(b"")
    (tmp_path / "train.settings").write_text("fairseq-train: --d-model 1024\n")
    proc = subprocess.run(recipe, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        f"error: {tmp_path}/checkpoints holds a model trained otherwise (fairseq-train: --d-model 1024), not as now "
        "(fairseq-train: --d-model 128 --d-ff 512 --heads 4 --dropout 0.1 --attention-dropout 0.1 --max-tokens 4096 "
        "--warmup-updates 400 --lr-multiplier 0.5 --cpu --relative-positions 16): give another WORK, or remove "
        f"{tmp_path}/checkpoints to train again"
    ], proc.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints", "train.settings"]


@pytest.mark.parametrize(
    "setting, logged",
    [
        ({}, "'relative_positions': 16"),  # SMALL=1's chosen K
        # RELPOS= : off; fairseq's search; the decoding SMALL=1 does not choose (one run for the three)
        ({"RELPOS": "", "BEAM_STOP": "fairseq", "CHECKPOINTS": OTHER_CHECKPOINTS}, "'relative_positions': None"),
        ({"SUBWORDS": "300"}, "'relative_positions': 16"),  # sentencepiece pieces as the source
    ],
    ids=["small", "relpos-off-fairseq-search-checkpoints-" + OTHER_CHECKPOINTS, "subwords"],
)
def test_recipe_end_to_end_tiny(tmp_path, ptb_files, setting, logged):
    env = dict(
        {k: v for k, v in os.environ.items() if k not in ("RELPOS", "SUBWORDS", "CHECKPOINTS", "BEAM_STOP")},
        **setting,
        WSJ=str(PTB_SAMPLE),
        SPLIT="train=1-20 valid=21-22 test=170-170",
        SMALL="1",
        UPDATES="4",
        SAVE_EVERY="1",
        WORK=str(tmp_path),
    )
    proc = subprocess.run(
        ["bash", str(ROOT / "examples" / "wsj_parsing.sh")], capture_output=True, text=True, env=env, timeout=1200
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "EVALB (COLLINS.prm) on valid" in (tmp_path / "f1.valid.txt").read_text()  # the split to select on
    report = (tmp_path / "f1.test.txt").read_text()
    assert "EVALB (COLLINS.prm) on test, 8 sentences" in report and "right-branching baseline: F1" in report
    assert "; 0 outputs repaired" in report  # --constrain-trees: even a 4-update model writes trees
    assert "--beam 21" in proc.stderr  # SMALL=1 decodes at section 6.3's beam
    assert logged in (tmp_path / "train.log").read_text()
    for split in ("valid", "test"):  # the paper's search unless BEAM_STOP says otherwise
        stop = setting.get("BEAM_STOP", "paper")
        assert f"'beam_stop': '{stop}'" in (tmp_path / f"generate.{split}.err").read_text()
    models = [line for line in (tmp_path / "generate.test.err").read_text().splitlines() if "loading model(s)" in line]
    decoded = models[0].split("loading model(s) from ")[1].strip().split(":")  # fairseq-generate --path a:b:c
    average = [str(tmp_path / "checkpoints" / "checkpoint_avg.pt")]
    # 4 updates in one epoch, one checkpoint each (the last is update 4's): the 4 that the average also took
    ensemble = [str(tmp_path / "checkpoints" / f"checkpoint_1_{u}.pt") for u in (1, 2, 3, 4)]
    averaged = "averaging the last 5 checkpoints: " + " ".join(Path(p).name for p in ensemble)
    assert averaged + "\n" in proc.stderr
    assert decoded == (ensemble if setting.get("CHECKPOINTS", SMALL_CHECKPOINTS) == "ensemble" else average)
    assert len((tmp_path / "test.pred").read_text().splitlines()) == 8  # every sentence gets a tree
    pcfg = (tmp_path / "pcfg.txt").read_text()  # the treebank PCFG's line, printed beside it
    assert pcfg.startswith("EVALB (COLLINS.prm) on test, 8 sentences") and "treebank PCFG (v=2, h=2, rare 3" in pcfg
    assert pcfg in proc.stdout and len((tmp_path / "test.pcfg").read_text().splitlines()) == 8
    pieces = [line.split()[0] for line in (tmp_path / "data-bin" / "dict.words.txt").read_text().splitlines()]
    assert any(p.startswith("\u2581") for p in pieces) == ("SUBWORDS" in setting)
    if "SUBWORDS" in setting:  # every piece of the model in the dictionary: none of valid's is <unk>
        assert pieces == (tmp_path / "pieces" / "dict.words.txt").read_text().split()[::2]
    if not setting:  # resuming with another model: one line before any work, the checkpoints untouched
        last = tmp_path / "checkpoints" / "checkpoint_last.pt"
        stamp = last.stat().st_mtime_ns
        again = subprocess.run(
            ["bash", str(ROOT / "examples" / "wsj_parsing.sh")],
            capture_output=True,
            text=True,
            env=dict(env, RELPOS=""),
            timeout=600,
        )
        assert again.returncode == 1 and again.stderr.strip().splitlines() == [
            f"error: {tmp_path}/checkpoints holds a model trained otherwise "
            f"({(tmp_path / 'train.settings').read_text().strip()}), not as now (fairseq-train: --d-model 128 "
            "--d-ff 512 --heads 4 --dropout 0.1 --attention-dropout 0.1 --max-tokens 4096 --warmup-updates 400 "
            f"--lr-multiplier 0.5 --cpu): give another WORK, or remove {tmp_path}/checkpoints to train again"
        ], again.stderr[-2000:]
        assert "--relative-positions 16" in (tmp_path / "train.settings").read_text()
        assert last.stat().st_mtime_ns == stamp


def test_split_ranges_that_overlap_or_repeat_are_refused(tmp_path):
    """--split train=1-159 test=150-179 would put trees 150-159 in both training and test data."""

    from attn_only_tools.parsing.data import parse_ranges

    assert parse_ranges(["train=1-159", "valid=160-169", "test=170-179"]) == {
        "train": (1, 159),
        "valid": (160, 169),
        "test": (170, 179),
    }
    for spec, message in [
        (
            ["train=1-159", "test=150-179"],
            "the train and test splits overlap (train=1-159 and test=150-179 share "
            "files 150-159), so the same trees would be in both: give ranges that "
            "do not share files",
        ),
        (["valid=5-5", "train=1-9"], "the valid and train splits overlap (valid=5-5 and train=1-9 share files 5-5)"),
        (["test=1-2", "test=3-4"], "the test split is given twice (test=1-2 and test=3-4): give each split once"),
        (["train=9-1"], "bad split 'train=9-1': the range ends before it starts; write it as train=1-9"),
    ]:
        with pytest.raises(ValueError) as refused:
            parse_ranges(spec)
        assert str(refused.value).startswith(message), refused.value
    bank, out = tmp_path / "bank", tmp_path / "out"
    bank.mkdir()
    proc = subprocess.run(
        [
            str(BIN / "attn-only-prepare-ptb"),
            "--treebank",
            str(bank),
            "--out",
            str(out),
            "--split",
            "train=1-159",
            "test=150-179",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1:] == [  # after fairseq's import chatter
        "error: the train and test splits overlap (train=1-159 and test=150-179 share files 150-159), so the same "
        "trees would be in both: give ranges that do not share files"
    ]
    assert not out.exists()


@pytest.mark.parametrize(
    "checkpoints, work, problem, split",
    [
        ("mean", "work", "CHECKPOINTS=mean: give 'average'", None),
        ("ensemble", "a:b", "contains ':', which fairseq-generate --path reads as a list", None),
        ("average", "a:b", "contains ':', which fairseq-generate --path reads as a list", None),  # the average too
        ("average", "work", "SPLIT=train=1-159 valid=160-169 names no test=: give", "train=1-159 valid=160-169"),
    ],
)
def test_recipe_refuses_a_bad_checkpoints_setting_before_any_work(tmp_path, checkpoints, work, problem, split):
    """CHECKPOINTS names how the last 5 checkpoints are decoded, WORK holds them (fairseq-generate --path
    splits on ':', whichever is decoded), SPLIT names the three splits (without test=, fairseq-preprocess
    failed after the data steps and left a half-written data-bin): anything else is one line, nothing written."""
    env = dict(os.environ, WSJ=str(PTB_SAMPLE), SMALL="1", WORK=str(tmp_path / work), CHECKPOINTS=checkpoints)
    env.pop("SPLIT", None)
    env.update({"SPLIT": split} if split else {})
    proc = subprocess.run(["bash", str(ROOT / "examples" / "wsj_parsing.sh")], capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1 and problem in proc.stderr, proc.stderr
    assert not (tmp_path / work).exists()
