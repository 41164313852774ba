"""benchmarks/compare_quality.py on a tiny digit-reversal data-bin: both models and both recipes train
through the real fairseq-train, translate through fairseq-generate, and land in one table and JSON;
a second call reuses the finished runs; bad values are refused in one line before anything runs."""

import argparse
import json
from pathlib import Path

from helpers import toy_data  # noqa: E402

TINY = [
    "--updates",
    "3",
    "--layers",
    "1",
    "--d-model",
    "16",
    "--d-ff",
    "32",
    "--heads",
    "2",
    "--max-tokens",
    "400",
    "--warmup",
    "2",
    "--progress-every",
    "0",
]


def digit_bin(root: Path) -> Path:
    """The digit-reversal data-bin of helpers.toy_data, with a test split to translate."""
    return toy_data(root, n_train=60, n_test=6)


def test_two_models_two_seeds_one_table_and_reuse(cli, tmp_path):
    data, work, out = digit_bin(tmp_path), tmp_path / "work", tmp_path / "quality.json"
    args = ["--data-bin", data, "--work", work, "--seeds", "1", "2", "--recipes", "own", *TINY, "--out", out]
    proc = cli("compare_quality", *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert list(rows) == ["own/ours", "own/builtin"]
    for row in rows.values():
        assert row["seeds"] == [1, 2] and all(p > 1 for p in row["valid_ppl"]) and len(row["bleu"]) == 2
        assert abs(row["valid_ppl_mean"] - sum(row["valid_ppl"]) / 2) < 1e-9
    # each model on its own recipe
    assert "paper_adam" in (work / "own-ours-seed1" / "command.txt").read_text()
    assert "'adam'" in (work / "own-builtin-seed1" / "command.txt").read_text()
    assert "| own/ours |" in proc.stdout and "mean (sd)" in proc.stdout
    assert "[quality] start own/ours/seed 1" in proc.stderr and "[quality] done own/builtin/seed 2" in proc.stderr
    again = cli("compare_quality", *args, "--force")  # finished runs are reused, the table is the same
    assert again.returncode == 0 and "4 of 4 runs already done" in again.stderr
    assert "[quality] start" not in again.stderr and again.stdout == proc.stdout
    assert cli("compare_quality", *args).stderr.startswith(f"error: --out {out} already exists: pass --force")
    # other settings into the same --work reported the old result as the new one
    for changed, says in [(["--updates", "4"], "fairseq-train flags"), (["--d-model", "32"], "fairseq-train flags")]:
        proc = cli("compare_quality", *args[:-1], tmp_path / "other.json", *changed)
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
        assert f"error: {work / 'own-ours-seed1'} holds a run made with other settings ({says}" in proc.stderr
        assert "give another --work, or remove" in proc.stderr and not (tmp_path / "other.json").exists()
    with open(data / "dict.src.txt", "a") as f:  # the same data-bin path, other data
        f.write("extra 1\n")
    proc = cli("compare_quality", *args, "--force")
    assert proc.returncode == 1 and "(data-bin files differ)" in proc.stderr, proc.stderr


def test_alike_recipe_differs_only_in_the_model(script, tmp_path):
    """Configured alike, the two fairseq-train commands differ only in the model's flags."""
    q = script("_quality_runs")  # compare_quality.py's runs and their commands
    a = argparse.Namespace(
        data_bin=tmp_path,
        user_dir="P",
        arch="transformer_base",
        ours_extra="",
        builtin_extra="",
        dropout=0.1,
        warmup=400,
        max_tokens=2048,
        updates=10,
        **q.SIZES,
    )
    ours, builtin = (q.train_command(a, m, "alike", 1, tmp_path) for m in ("ours", "builtin"))
    model_flags = {
        "ours": q.model_args("ours", {k: str(v) for k, v in q.SIZES.items()}, "transformer_base"),
        "builtin": q.model_args("builtin", {k: str(v) for k, v in q.SIZES.items()}, "transformer_base"),
    }
    assert [x for x in ours if x not in model_flags["ours"]] == [x for x in builtin if x not in model_flags["builtin"]]
    assert "--share-all-embeddings" in builtin and "label_smoothed_cross_entropy" in ours and "adam" in ours


def test_bad_values_refused_in_one_line(cli, tmp_path):
    data = digit_bin(tmp_path)
    for bad, says in [
        (["--updates", "0"], "--updates must be >= 1"),
        (["--seeds", "1", "1"], "--seeds must be distinct"),
        (["--jobs", "0"], "--jobs must be >= 1"),
    ]:
        proc = cli("compare_quality", "--data-bin", data, "--work", tmp_path / "w", *TINY, *bad)
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1  # one line, nothing started
        assert proc.stderr.startswith("error: ") and says in proc.stderr, proc.stderr
    proc = cli("compare_quality", "--data-bin", tmp_path, "--work", tmp_path / "w", *TINY)
    assert proc.returncode == 1 and "has no dict.*.txt" in proc.stderr
    assert not (tmp_path / "w").exists()  # nothing started


def test_a_failing_training_ends_the_comparison_in_one_line(cli, tmp_path):
    data = digit_bin(tmp_path)
    proc = cli(
        "compare_quality",
        "--data-bin",
        data,
        "--work",
        tmp_path / "w",
        *TINY,
        "--models",
        "ours",
        "--ours-extra",
        "--heads 3",
        "--jobs",
        "1",  # one run at a time: with 2 side by side, either seed may fail first
    )
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and last.startswith("error: alike/ours/seed 1: fairseq-train exited 1: d_model=16")
    assert "not divisible by h=3" in last and "train.log" in last
