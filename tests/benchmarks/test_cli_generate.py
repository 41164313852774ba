"""benchmarks/cli_generate.py, fairseq-generate itself on one trained model, ours against the built-in
on the same weights: its copy-task data, its command lines, how it reads fairseq-generate's output,
and its CPU smoke mode through the real fairseq-train, attn-only-convert-checkpoint and
fairseq-generate. (Speeds are never asserted.)"""

import json

import pytest

OUTPUT = """\
S-1\tw3 w4 w5
T-1\tw3 w4 w5
H-1\t-0.2\tw3 w4 w5
D-1\t-0.2\tw3 w4 w5
P-1\t-0.1 -0.1 -0.1 -0.1
S-0\tw7 w8
T-0\tw7 w8
H-0\t-0.5\tw7 w8 w8 w8
D-0\t-0.5\tw7 w8 w8 w8
P-0\t-0.1 -0.1 -0.1 -0.1 -0.1
00:00:00 | INFO | fairseq_cli.generate | NOTE: hypothesis and token scores are output in base 2
00:00:00 | INFO | fairseq_cli.generate | Translated 2 sentences (9 tokens) in 0.1s (20.00 sentences/s, 90.00 tokens/s)
"""  # noqa: E501


def test_the_copy_task_data_bin_has_each_target_equal_to_its_source_from_the_first_words(tmp_path):
    from fairseq.data import data_utils

    from benchmark_parts.data_bin import make_data

    d = make_data(tmp_path, vocab=100, pairs=50, kind="copy", words=20, test=8)
    for split, n in (("train", 50), ("valid", 16), ("test", 8)):
        src, tgt = (data_utils.load_indexed_dataset(str(tmp_path / f"{split}.src-tgt.{s}"), d) for s in ("src", "tgt"))
        assert len(src) == len(tgt) == n
        for s, t in zip(src, tgt, strict=True):
            assert s.tolist() == t.tolist() and 10 <= len(s) - 1 <= 30 and s[-1] == d.eos()
            assert d.nspecial <= int(s[:-1].min()) and int(s[:-1].max()) < d.nspecial + 20
    with pytest.raises(ValueError, match="kind must be random or copy"):
        make_data(tmp_path, vocab=100, pairs=5, kind="reverse")


def test_its_reading_of_fairseq_generate_gives_the_speed_hypotheses_and_what_was_learnt(script):
    gen = script("cli_generate")
    got = gen.read_generation(OUTPUT)
    assert got["sentences_per_s"] == 20.0
    assert got["hypotheses"] == {1: "w3 w4 w5", 0: "w7 w8 w8 w8"} and got["references"] == {1: "w3 w4 w5", 0: "w7 w8"}
    assert gen.learnt(got["hypotheses"], got["references"]) == dict(length_ratio=7 / 5, exact=1, sentences=2)
    assert gen.read_generation("no such line")["sentences_per_s"] is None


def test_the_model_is_trained_as_both_sides_express_it_and_each_run_adds_only_its_flags(script, tmp_path):
    gen = script("cli_generate")
    (_, train), (_, convert) = gen.prepare("big", "cuda", tmp_path)
    assert train[1:3] == ["-m", "fairseq_cli.train"] and "transformer_vaswani_wmt_en_de_big" in train
    for flag in ("--encoder-learned-pos", "--decoder-learned-pos", "--share-all-embeddings", "--fp16", "--user-dir"):
        assert flag in train
    assert convert[1:] == [
        "-m",
        "attn_only_plugin.cli.convert_checkpoint",
        "--to",
        "ours",
        str(tmp_path / "checkpoints" / "checkpoint_last.pt"),
        str(tmp_path / "ours.pt"),
    ]
    builtin, ours, graph = (gen.commands(n, "big", "cuda", tmp_path) for n in ("builtin", "ours", "ours_graph"))
    assert builtin[builtin.index("--path") + 1].endswith("checkpoint_last.pt")
    assert ours[ours.index("--path") + 1] == str(tmp_path / "ours.pt") and ours[6:] == builtin[6:]
    assert graph[: len(ours)] == ours and "--cuda-graph-search" in graph and "--batched-search" in graph
    assert "{'static_decoding_cache': True}" in graph and "translation_paper" in graph
    for cmd in (builtin, graph):  # section 6.1's search, batches of one shape
        for flag, value in (("--beam", "4"), ("--lenpen", "0.6"), ("--batch-size", "128")):
            assert cmd[cmd.index(flag) + 1] == value
        assert "--required-seq-len-multiple" in cmd and "--fp16" in cmd


def test_a_budget_too_short_to_train_is_one_line_and_no_run(script, tmp_path, capsys):
    out = tmp_path / "gen.json"
    with pytest.raises(SystemExit) as e:
        script("cli_generate").main(["--device", "cpu", "--preset", "tiny", "--budget-s", "5", "--out", str(out)])
    assert str(e.value) == f"error: 1 of 1 steps and runs did not finish (train): see {out}"
    r = json.loads(out.read_text())
    assert r["steps"]["train"]["status"].startswith("skipped: ") and r["runs"] == {}


def test_smoke_mode_trains_converts_and_generates_through_fairseq_s_commands(cli, tmp_path):
    """The tiny model trained on the copy task by fairseq-train (learnt its lengths: its hypotheses
    end near the references' length, not at the cap), converted to ours, then fairseq-generate with
    the built-in, ours with fairseq's search and ours with --cuda-graph-search (eager on a CPU):
    on the same weights in fp32 every best hypothesis is the built-in's."""
    out = tmp_path / "gen.json"
    runs = ["builtin", "ours", "ours_graph"]
    proc = cli("cli_generate", "--device", "cpu", "--preset", "tiny", "--runs", *runs, "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(out.read_text())
    assert list(r["runs"]) == runs and all(run["status"] == "ok" for run in r["runs"].values())
    assert r["steps"]["train"]["status"] == r["steps"]["convert"]["status"] == "ok"
    assert "num_updates 300" in r["steps"]["train"]["last_log"]
    for name, run in r["runs"].items():
        assert run["identical"] == run["sentences"] == 32 and len(run["sentences_per_s"]) == 1
        assert f"| {name} | {run['what']} | **" in r["table"]
    assert 0.7 < r["model"]["length_ratio"] < 1.5  # a random model's: ~3 (the cap, source + 50)
    assert "[cli_generate] a data-bin of 2000 copied sentence pairs" in proc.stderr
