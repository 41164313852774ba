"""The recipes in examples/: the quickstart end to end on a tiny slice; the paper recipes'
argument handling (their training needs WMT14 data and GPUs)."""

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def bash(script, env=None, *args):
    return subprocess.run(
        ["bash", str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, **(env or {})),
        timeout=1200,
    )


def test_quickstart_pipeline_on_a_tiny_slice(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    sizes = {"train": 600, "valid": 40, "test": 30}
    for split, n in sizes.items():
        for lang in ("en", "de"):
            lines = (EXAMPLES / "data" / "libreoffice_en_de" / f"{split}.{lang}").read_text().splitlines()[:n]
            (corpus / f"{split}.{lang}").write_text("\n".join(lines) + "\n")
    work = tmp_path / "work"
    # OMP_WAIT_POLICY: CTranslate2's OpenMP threads wait without spinning, which on cores shared with
    # other test runs would stall every step (speed only; the quickstart itself runs on quiet cores)
    proc = bash(
        "quickstart.sh", dict(CORPUS=str(corpus), WORK=str(work), UPDATES="10", VOCAB="400", OMP_WAIT_POLICY="PASSIVE")
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "BLEU" in (work / "bleu.txt").read_text() and "BLEU" in (work / "baseline.txt").read_text()
    assert len((work / "hyp.de").read_text().splitlines()) == sizes["test"]  # every test sentence
    table = (work / "speed.txt").read_text().splitlines()  # the CTranslate2 step
    assert [row.split(" | ")[0] for row in table[2:]] == [
        "| fairseq-generate",
        "| CTranslate2 float32",
        "| CTranslate2 int8",
        "| transformers MarianMTModel, generate()",
    ], table
    assert all(row.endswith(f" of {sizes['test']} |") for row in table[3:]), table
    for q in ("ct2-float32", "ct2-int8", "hf"):
        assert len((work / f"hyp-{q}.de").read_text().splitlines()) == sizes["test"]
        assert "BLEU" in (work / f"bleu-{q}.txt").read_text()
    assert (work / "hf" / "config.json").is_file() and "BLEU" in (work / "hf" / "README.md").read_text()
    png = (work / "loss.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (600, 400)
    import attn_only_plugin  # noqa: F401

    avg = torch.load(work / "checkpoints" / "checkpoint_avg.pt", weights_only=True)
    assert avg["cfg"]["model"]["d_model"] == 128


def test_paper_recipes_stop_without_data(tmp_path):
    for script, var in [
        ("wmt14_en_de_base.sh", "WMT14_EN_DE"),
        ("wmt14_en_de_big.sh", "WMT14_EN_DE"),
        ("wmt14_en_fr_big.sh", "WMT14_EN_FR"),
        ("table3.sh", "WMT14_EN_DE"),
    ]:
        args = ["B1"] if script == "table3.sh" else []
        proc = bash(script, {var: str(tmp_path / "missing"), "WORK": str(tmp_path / "w")}, *args)
        assert proc.returncode == 1, script
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("error: missing") and "train.en" in last, (script, last)


def test_table3_rows():
    out = bash("table3.sh", None, "--list").stdout.splitlines()
    rows = {line.split()[0]: line for line in out}
    assert len(rows) == 19 and "flags: --d-k 16" in rows["B1"] and "BLEU 25.1" in rows["B1"]
    assert "--heads 1 --d-k 512 --d-v 512" in rows["A1"] and "--learned-pos" in rows["E"]
    assert bash("table3.sh", None, "Z9").returncode == 1


def test_ten_minute_checkpoint_intervals():
    """Section 5.2/6.1: checkpoints every 10 minutes. fairseq saves by update count, so the
    recipes save every (steps / minutes of training) x 10 updates: base 100k steps in 12 h,
    big 300k steps in 3.5 days."""
    base = (EXAMPLES / "wmt14_en_de_base.sh").read_text()
    big = (EXAMPLES / "wmt14_en_de_big.sh").read_text()
    assert f"transformer_base 100000 {round(100_000 / (12 * 60) * 10)} 5" in base  # 1389, keep 5
    assert f"transformer_big 300000 {round(300_000 / (3.5 * 24 * 60) * 10)} 20" in big  # 595, keep 20
    assert 'average "$WORK/checkpoints" 5' in base and 'average "$WORK/checkpoints" 20' in big


def test_update_freq_reaches_25k_tokens():
    """Section 5.1: ~25,000 source tokens per step for any number of GPUs."""
    for gpus, max_tokens, expected in [(1, 4096, 7), (8, 4096, 1), (4, 3584, 2), (2, 25000, 1)]:
        out = subprocess.run(
            ["bash", "-c", f'source "{EXAMPLES}/pipeline.sh"; update_freq {gpus} {max_tokens}'],
            capture_output=True,
            text=True,
        ).stdout.strip()
        assert int(out) == expected


@pytest.mark.parametrize(
    "written, last_is_newest, expected",
    [
        (7, True, ["checkpoint_1_3", "checkpoint_1_4", "checkpoint_1_5", "checkpoint_1_6", "checkpoint_1_7"]),
        (7, False, ["checkpoint_1_4", "checkpoint_1_5", "checkpoint_1_6", "checkpoint_1_7", "checkpoint_last"]),
        (2, True, ["checkpoint_1_1", "checkpoint_1_2"]),  # fewer than N: all of them, never none
        (2, False, ["checkpoint_1_1", "checkpoint_1_2", "checkpoint_last"]),
        (0, False, ["checkpoint_last"]),
    ],
)
def test_average_picks_the_last_n(tmp_path, written, last_is_newest, expected):
    for i in range(1, written + 1):
        (tmp_path / f"checkpoint_1_{i}.pt").write_text(str(i))
    (tmp_path / "checkpoint_last.pt").write_text(str(written) if last_is_newest else "newer")
    # average's averaging replaced by an echo of its arguments; --list-last is the real command's rule
    fake = tmp_path / "bin"
    fake.mkdir()
    real = Path(sys.executable).parent / "attn-only-average-checkpoints"
    (fake / "attn-only-average-checkpoints").write_text(
        f'#!/usr/bin/env bash\n[ "$1" = --list-last ] && exec "{real}" "$@"\necho "$@"\n'
    )
    (fake / "attn-only-average-checkpoints").chmod(0o755)
    script = f'source "{ROOT}/examples/pipeline.sh"; BIN="{fake}"; average "{tmp_path}" 5'
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert [Path(p).stem for p in out[out.index("--inputs") + 1 : out.index("--output")]] == expected
    listed = f'source "{ROOT}/examples/pipeline.sh"; last_checkpoints "{tmp_path}" 5'  # what an ensemble decodes
    out = subprocess.run(["bash", "-c", listed], capture_output=True, text=True, check=True).stdout
    assert [Path(p).stem for p in out.splitlines()] == expected


def test_quality_recipe_on_a_tiny_slice(tmp_path):
    """examples/quality.sh from a corpus folder to the table: pooled, split, segmented, trained."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split, n in {"train": 300, "valid": 20, "test": 20}.items():
        for lang in ("en", "de"):
            lines = (EXAMPLES / "data" / "libreoffice_en_de" / f"{split}.{lang}").read_text().splitlines()[:n]
            (corpus / f"{split}.{lang}").write_text("\n".join(lines) + "\n")
    work = tmp_path / "work"
    proc = bash(
        "quality.sh",
        dict(CORPUS=str(corpus), WORK=str(work), UPDATES="2", SEEDS="1", VOCAB="300", TEST="10", VALID="10"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lengths = [len((work / "raw" / f"{s}.en").read_text().splitlines()) for s in ("test", "valid", "train")]
    assert lengths == [10, 10, 320]
    assert "| alike/ours |" in (work / "quality.txt").read_text()
    assert (work / "runs" / "alike-builtin-seed1" / "result.json").exists()


def test_attention_variants_refuses_an_unknown_variant():
    """examples/attention_variants.sh checks its VARIANTS before installing or training anything."""
    proc = bash("attention_variants.sh", {"VARIANTS": "full window5"})
    assert proc.returncode == 1 and proc.stderr.strip().startswith("error: unknown variant window5: choose from")
    assert "relative8_only" in proc.stderr and not proc.stdout


# recipe, the variable set wrong, what the one line says; every data variable points at a missing folder, so
# that a recipe that went on would stop on it with another message
BAD_VARIABLES = [
    ("wsj_parsing.sh", "UPDATES", "0", "a whole number >= 1"),  # fairseq's --max-update 0: no limit
    ("wsj_parsing.sh", "SAVE_EVERY", "-5", "a whole number >= 1"),
    ("wsj_parsing.sh", "BEAM", "abc", "a whole number >= 1"),
    ("wsj_parsing.sh", "BEAM", "0", "a whole number >= 1"),
    ("wsj_parsing.sh", "MAX_LEN_A", "-1", "a number >= 0"),
    ("wsj_parsing.sh", "MAX_LEN_B", "1.5", "a whole number >= 0"),
    ("wsj_parsing.sh", "SEED", "x", "a whole number >= 0"),
    ("wsj_parsing.sh", "SMALL", "yes", "0 or 1"),  # anything but 1 silently meant the full-size model
    ("wsj_parsing.sh", "RELPOS", "0", "a whole number >= 1"),
    ("wsj_parsing.sh", "SUBWORDS", "8k", "a whole number >= 1"),
    ("wsj_parsing.sh", "BEAM_STOP", "best", "one of fairseq, paper"),
    ("quickstart.sh", "UPDATES", "0", "a whole number >= 1"),
    ("quickstart.sh", "VOCAB", "4k", "a whole number >= 1"),
    ("attention_variants.sh", "SEEDS", "1 two", "whole numbers >= 0 separated by spaces"),
    ("attention_variants.sh", "UPDATES", "010", "a whole number >= 1"),  # bash would read it as octal 8
    ("quality.sh", "RECIPES", "alike mine", "one or more of alike, own"),
    ("quality.sh", "TEST", "0", "a whole number >= 1"),
    ("table3.sh", "GPUS", "eight", "a whole number >= 0"),
    ("wmt14_en_de_base.sh", "MAX_TOKENS", "0", "a whole number >= 1"),
    ("wmt14_en_fr_big.sh", "GPUS", "-1", "a whole number >= 0"),
]


@pytest.mark.parametrize(
    "script, name, value, want", BAD_VARIABLES, ids=[f"{s[:-3]}-{n}={v}" for s, n, v, _ in BAD_VARIABLES]
)
def test_recipes_check_their_variables_before_any_work(tmp_path, script, name, value, want):
    """Every recipe variable is checked before anything is installed, prepared or trained: one line
    naming the variable and what to give, exit status 1, no WORK folder."""
    missing = str(tmp_path / "missing")
    data = {"WSJ": missing, "CORPUS": missing, "WMT14_EN_DE": missing, "WMT14_EN_FR": missing}
    proc = bash(
        script, {**data, "WORK": str(tmp_path / "work"), name: value}, *(["B1"] if script == "table3.sh" else [])
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proc.stderr.startswith(f"error: {name}={value}: give {want}"), proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1 and not proc.stdout
    assert not (tmp_path / "work").exists()
