"""benchmarks/cli_train.py, fairseq-train's own speed for ours, its levers and the built-in: its
synthetic data-bin, how it reads fairseq's log (tokens/s by epoch, losses against ours's), its
command lines, and its CPU smoke mode through the real fairseq-train. (Speeds are never asserted.)"""

import json

import pytest


def test_the_data_bin_is_what_fairseq_reads_sources_of_10_to_30_words_targets_near_them(tmp_path):
    from fairseq.data import Dictionary, data_utils

    from benchmark_parts.data_bin import make_data

    make_data(tmp_path, vocab=50, pairs=300)
    d = Dictionary.load(str(tmp_path / "dict.src.txt"))
    assert len(d) == 50 and (tmp_path / "dict.tgt.txt").read_text() == (tmp_path / "dict.src.txt").read_text()
    sides = {s: data_utils.load_indexed_dataset(str(tmp_path / f"train.src-tgt.{s}"), d) for s in ("src", "tgt")}
    assert len(sides["src"]) == len(sides["tgt"]) == 300
    for source, target in zip(sides["src"], sides["tgt"], strict=True):
        n, m = len(source) - 1, len(target) - 1  # without </s>
        assert source[-1] == target[-1] == d.eos() and 10 <= n <= 30 and abs(m - n) <= n // 4 + 1
        assert int(source[:-1].min()) >= d.nspecial and int(target[:-1].min()) >= d.nspecial
    lengths = [len(s) - 1 for s in sides["src"]]
    assert min(lengths) == 10 and max(lengths) == 30  # the whole range drawn
    assert len(data_utils.load_indexed_dataset(str(tmp_path / "valid.src-tgt.src"), d)) == 16


LOG = """\
00:00:00 | INFO | fairseq_cli.train | Start iterating over samples
00:00:01 | INFO | train_inner | {"epoch": 1, "update": 0.4, "loss": "10.5", "wps": "100", "ups": "1", "wpb": "400", "num_updates": "4"}
00:00:02 | INFO | train_inner | {"epoch": 1, "update": 0.8, "loss": "10.0", "wps": "1000", "ups": "2", "wpb": "500", "num_updates": "8"}
00:00:03 | INFO | train_inner | {"epoch": 1, "update": 1.0, "loss": "9.0", "wps": "2000", "ups": "4", "wpb": "500", "num_updates": "10"}
00:00:03 | INFO | train | {"epoch": 1, "train_loss": "9.9", "train_wps": "900", "train_num_updates": "10"}
00:00:04 | INFO | train_inner | {"epoch": 2, "update": 1.4, "loss": "8.0", "wps": "10", "ups": "1", "wpb": "300", "num_updates": "14", "gb_free": "3.5"}
00:00:05 | INFO | train_inner | {"epoch": 2, "update": 1.8, "loss": "7.0", "wps": "3000", "ups": "2", "wpb": "600", "num_updates": "18", "gb_free": "2.5"}
"""  # noqa: E501


def test_tokens_per_s_per_epoch_leave_out_its_first_interval(script):
    """Epoch 1's first interval holds the start and epoch 2's the boundary: neither is counted.
    Epoch 1: 2 000 tokens in 2 s (updates 4-8, 500 a batch at 1 000 a second) and 1 000 in 0.5 s
    (8-10): 3 000 / 2.5 s;
    epoch 2: only updates 14-18, 2 400 tokens at 3 000 tokens/s."""
    cli = script("cli_train")
    records = cli.intervals(LOG)
    assert [r["n"] for r in records] == [4, 4, 2, 4, 4] and records[0]["loss"] == 10.5
    s = cli.summary(records, gpu_gb=80.0)
    assert s["tokens_per_s_epoch_1"] == pytest.approx(3000 / 2.5)
    assert s["tokens_per_s_later"] == pytest.approx(3000)
    assert (s["updates"], s["epochs"], s["last_loss"], s["peak_gb"]) == (18, 2, 7.0, 77.5)
    assert cli.summary(records)["peak_gb"] is None  # no GPU named in the log
    line = "INFO | fairseq.utils | rank   0: capabilities =  9.0  ; total memory = 139.812 GB ; name = NVIDIA H200"
    assert cli.gpu_gb(LOG + line) == 139.812 and cli.gpu_gb(LOG) is None
    assert cli.summary([]) == dict(
        tokens_per_s_epoch_1=None, tokens_per_s_later=None, updates=0, epochs=0, last_loss=None, peak_gb=None
    )


def test_losses_are_compared_at_the_updates_both_logged(script):
    cli = script("cli_train")
    reference = cli.intervals(LOG)
    other = [dict(r, loss=r["loss"] * 1.01) for r in reference[:3]] + [dict(num_updates=99.0, loss=1.0)]
    assert cli.loss_difference(other, reference) == pytest.approx(0.01)
    assert cli.loss_difference([dict(num_updates=99.0, loss=1.0)], reference) is None


def test_each_model_runs_its_recipe_and_the_levers_only_add_their_flags(script):
    cli = script("cli_train")
    ours, levers, builtin = (cli.command(n, "big", "cuda", "data") for n in ("ours", "ours_levers", "builtin"))
    assert ours[1:4] == ["-m", "fairseq_cli.train", "data"] and levers[: len(ours)] == ours
    assert levers[len(ours) :] == ["--varlen-attention", "--fused-softmax-loss", "--compile-layers"]
    for cmd in (ours, builtin):  # the same batches, seed and updates
        assert cmd[cmd.index("--max-tokens") + 1] == "29000" and cmd[cmd.index("--seed") + 1] == "1"
    assert "transformer_big" in ours and "paper_adam" in ours and "--user-dir" in ours
    assert "transformer_vaswani_wmt_en_de_big" in builtin and "--share-all-embeddings" in builtin
    assert "--user-dir" in builtin and "inverse_sqrt" in builtin and "label_smoothed_cross_entropy" in builtin
    assert cli.limit("ours_levers", "cuda") == cli.limit("ours_compile", "cuda") > cli.limit("ours", "cuda")


def test_a_run_that_the_budget_cannot_hold_is_skipped_and_said(script, tmp_path):
    r = script("cli_train").run("ours", "tiny", "cpu", tmp_path, tmp_path, 10, [])
    assert r["status"] == "skipped: 10 s of the budget left, the run's limit is 300 s" and "intervals" not in r


@pytest.mark.parametrize(
    "args, error",
    [
        (["--budget-s", "0"], "error: --budget-s must be > 0, got 0.0"),
        (["--dropout", "1.5"], "error: --dropout must be in [0, 1), got 1.5"),
        (
            ["--precision", "fp16"],
            "error: --precision fp16 needs a GPU (fairseq-train --fp16): on a CPU give bf16 or fp32",
        ),  # noqa: E501
    ],
)
def test_bad_settings_are_one_line_errors(script, tmp_path, args, error):
    with pytest.raises(SystemExit) as e:
        script("cli_train").main(["--device", "cpu", "--out", str(tmp_path / "out.json"), *args])
    assert str(e.value) == error and not (tmp_path / "out.json").exists()


def test_smoke_mode_trains_through_fairseq_train_and_tables_every_run(cli, tmp_path):
    """The built-in, ours, and ours with --varlen-attention and with --fused-softmax-loss through
    the real fairseq-train at the tiny shape, in bf16 as the GPU's fp16 (fairseq's FP16Optimizer:
    half-precision weights, float32 master weights; on a CPU the packed attention keeps the padded
    path, the loss is eager), without dropout, whose draws packing changes: the levers' losses are
    ours's to bf16 rounding. (--compile-layers inside fairseq-train: tests/test_speed_levers.py.)"""
    out = tmp_path / "cli.json"
    runs = ["builtin", "ours", "ours_varlen", "ours_fused_loss"]
    args = ["--device", "cpu", "--preset", "tiny", "--dropout", "0", "--precision", "bf16", "--runs", *runs]
    proc = cli("cli_train", *args, "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(out.read_text())
    assert list(r["runs"]) == runs and all(run["status"] == "ok" for run in r["runs"].values())
    for name, run in r["runs"].items():
        assert run["updates"] == 20 and run["epochs"] >= 2 and run["tokens_per_s_epoch_1"] > 0
        assert run["tokens_per_s_later"] > 0 and "--bf16 --dropout 0.0" in run["command"]
        assert f"| {name} | {run['what']} | " in r["table"] and f"| {name} |" in proc.stdout
    assert "loss_vs_ours" not in r["runs"]["builtin"] and "loss_vs_ours" not in r["runs"]["ours"]
    assert r["runs"]["ours_varlen"]["loss_vs_ours"] < 2e-3 and r["runs"]["ours_fused_loss"]["loss_vs_ours"] < 2e-3
    assert "[cli_train] a data-bin of 400 random sentence pairs" in proc.stderr and r["precision"] == "bf16"
