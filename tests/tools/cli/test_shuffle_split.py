"""attn-only-shuffle-split: the three splits pooled, shuffled by seed, split by count; every pair
kept once and aligned; bad input refused in one line with nothing written."""


def corpus(root, n=(6, 2, 2)):
    root.mkdir()
    k = 0
    for split, count in zip(("train", "valid", "test"), n, strict=True):
        lines = [f"s{k + i}" for i in range(count)]
        (root / f"{split}.en").write_text("".join(x + "\n" for x in lines))
        (root / f"{split}.de").write_text("".join(x.replace("s", "t") + "\n" for x in lines))
        k += count
    return root


def test_pairs_pooled_shuffled_and_split_by_count(cli, tmp_path):
    data = corpus(tmp_path / "raw")
    proc = cli("shuffle_split", "--data", data, "--test", 3, "--valid", 2, "--seed", 7, "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    out = {
        (s, lang): (tmp_path / "out" / f"{s}.{lang}").read_text().splitlines()
        for s in ("train", "valid", "test")
        for lang in ("en", "de")
    }
    assert [len(out[s, "en"]) for s in ("test", "valid", "train")] == [3, 2, 5]
    for s in ("train", "valid", "test"):  # still aligned
        assert [x.replace("s", "t") for x in out[s, "en"]] == out[s, "de"]
    everything = sorted(out["train", "en"] + out["valid", "en"] + out["test", "en"])
    assert everything == sorted(f"s{i}" for i in range(10))  # each pair once
    assert out["test", "en"] + out["valid", "en"] + out["train", "en"] != [f"s{i}" for i in range(10)]  # shuffled
    again = cli("shuffle_split", "--data", data, "--test", 3, "--valid", 2, "--seed", 7, "--out", tmp_path / "again")
    assert again.returncode == 0 and (tmp_path / "again" / "test.de").read_text() == "\n".join(out["test", "de"]) + "\n"


def test_bad_input_one_line_nothing_written(cli, tmp_path):
    data = corpus(tmp_path / "raw")
    (data / "valid.de").write_text("t6\n")  # one line short
    for args, says in [
        (["--data", data], "valid.en has 2 lines but .de has 1"),
        (["--data", tmp_path / "none"], "missing"),
        (["--data", corpus(tmp_path / "ok"), "--test", 5, "--valid", 5], "leave training pairs"),
        (["--data", tmp_path / "ok", "--out", tmp_path / "ok"], "is the --data folder"),
    ]:
        proc = cli("shuffle_split", *(args if "--out" in args else [*args, "--out", tmp_path / "out"]))
        assert proc.returncode == 1 and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1
        assert says in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()
    (tmp_path / "ok" / "test.en").write_bytes(b"caf\xe9\ns9\n")
    proc = cli("shuffle_split", "--data", tmp_path / "ok", "--out", tmp_path / "out", "--test", 1, "--valid", 1)
    assert proc.returncode == 1 and "test.en is not UTF-8 text (byte 0xe9 at byte 3)" in proc.stderr
