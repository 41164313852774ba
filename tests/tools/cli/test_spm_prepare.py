"""attn-only-spm-prepare under the shared rule for outputs (atomic.check_output):
`--data raw --out raw` wrote the segmented text over the raw corpus."""

import hashlib


def corpus(root):
    raw = root / "raw"
    raw.mkdir()
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            (raw / f"{split}.{lang}").write_text("".join(f"sentence {i} in {lang}\n" for i in range(50)))
    return raw


def digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_output_may_not_be_or_lie_inside_the_corpus_and_is_replaced_only_with_force(cli, tmp_path):
    raw = corpus(tmp_path)
    before = digests(raw)
    (tmp_path / "link").symlink_to(raw)
    for out, problem in [
        (raw, "is the input"),
        (tmp_path / "link", "is the input"),
        (raw / "spm", "lies inside the input"),
        (tmp_path, "holds the input"),
    ]:
        proc = cli("spm_prepare", "--data", raw, "--vocab-size", 100, "--out", out, "--force")
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stderr.startswith(f"error: --out {out} {problem} {raw}: writing it would destroy"), proc.stderr
    assert digests(raw) == before and not (raw / "spm").exists()
    out = tmp_path / "spm"
    assert cli("spm_prepare", "--data", raw, "--vocab-size", 100, "--out", out).returncode == 0
    written = digests(out)
    proc = cli("spm_prepare", "--data", raw, "--vocab-size", 100, "--out", out)
    assert (
        proc.returncode == 1
        and proc.stderr == f"error: --out {out} already exists: pass --force to replace it, or choose another --out\n"
    )
    assert digests(out) == written
    assert cli("spm_prepare", "--data", raw, "--vocab-size", 100, "--out", out, "--force").returncode == 0


def test_byte_order_mark_nul_line_counts_and_one_language(cli, tmp_path):
    """A byte order mark that starts a file is an encoding mark, stripped (not a
    piece of the first sentence, not a refusal); NUL is refused by line; sides of different lengths
    and --src = --tgt are one line each, nothing written."""
    raw = corpus(tmp_path)
    (raw / "train.en").write_bytes(b"\xef\xbb\xbf" + (raw / "train.en").read_bytes())
    out = tmp_path / "spm"
    proc = cli("spm_prepare", "--data", raw, "--vocab-size", 100, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert not (out / "train.en").read_text(encoding="utf-8").startswith(("\ufeff", "\u2581\ufeff"))
    (raw / "valid.de").write_text("ein\x00 Satz\n" * 50)
    proc = cli("spm_prepare", "--data", raw, "--vocab-size", 100, "--out", tmp_path / "o2")
    assert proc.returncode == 1 and "line 1 holds an invisible character, U+0000 NULL at column 4" in proc.stderr
    (raw / "valid.de").write_text("ein Satz\n" * 49)
    proc = cli("spm_prepare", "--data", raw, "--vocab-size", 100, "--out", tmp_path / "o2")
    assert proc.returncode == 1 and proc.stderr == (
        f"error: {raw / 'valid.en'} has 50 lines but {raw / 'valid.de'} has 49: a parallel corpus has one sentence "
        "per line on both sides, in the same order; align the files first\n"
    )
    proc = cli(
        "spm_prepare", "--data", raw, "--src", "en", "--tgt", "en", "--vocab-size", 100, "--out", tmp_path / "o2"
    )
    assert proc.returncode == 1 and proc.stderr.startswith("error: --src and --tgt are both 'en'")
    assert not (tmp_path / "o2").exists()
