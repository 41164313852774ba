"""benchmarks/compare_search.py: two fairseq-generate logs of one split, compared by hand-made lines
(its run on real logs: tests/tasks/test_paper_search_cli.py)."""

FAIRSEQ = "S-0\ta b\nH-0\t-1.5\tx y\nP-0\t-1 -2\nH-1\t-0.5\tz\nH-2\t-2.0\tu v w\n"
PAPER = "H-2\t-1.0\tu\nH-0\t-1.5\tx y\nH-1\t-0.5\tz\n"


def test_counts_and_means_by_hand(script, tmp_path):
    m = script("compare_search")
    (tmp_path / "a").write_text(FAIRSEQ)
    (tmp_path / "b").write_text(PAPER)
    result = m.compare(m.read_hypotheses(tmp_path / "a"), m.read_hypotheses(tmp_path / "b"))
    assert result == {"sentences": 3, "differ": 1, "mean": (-4.0 / 3, -1.0), "higher": (0, 1)}
    text = m.table(["fairseq", "paper"], result)
    assert "differ on 1 (33.3%)" in text and "| fairseq | -1.3333 | 0 |" in text and "| paper | -1.0000 | 1 |" in text


def test_bad_logs_are_one_line_errors(cli, tmp_path):
    (tmp_path / "a").write_text(FAIRSEQ)
    (tmp_path / "b").write_text(PAPER.replace("H-2\t-1.0\tu\n", ""))  # sentence 2 missing
    (tmp_path / "empty").write_text("S-0\ta\n")
    (tmp_path / "twice").write_text(FAIRSEQ + "H-0\t-3\tq\n")
    (tmp_path / "garbled").write_text("H-0\tx y\n")
    for args, message in [
        (("a", "b"), "decode different sentences"),
        (("a", "empty"), "no H- lines"),
        (("twice", "a"), "sentence 0 twice"),
        (("a", "missing"), "cannot read"),
        (("garbled", "a"), "is not an H-<id> <score> <text> line"),
    ]:
        proc = cli("compare_search", *(tmp_path / name for name in args))
        assert proc.returncode == 1 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, (
            proc.stderr
        )
