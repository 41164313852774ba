"""benchmarks/table1.py: Table 1 measured. Speeds are never asserted; the points, the plot and the
refusals are."""

import struct


def test_points_and_plot(script, tmp_path):
    table1 = script("table1")
    rows = [
        dict(table1.measure_one(kind, window, n, 1, 1), label=f"{kind} {window}")
        for kind, window in [("full", 0), ("masked", 2), ("restricted", 2), ("ffn", 0)]
        for n in (8, 16)
    ]
    assert all(r["seconds"] > 0 and r["peak_bytes"] >= 0 and r["n"] in (8, 16) for r in rows)
    table1.plot(rows, tmp_path / "t.png")
    png = (tmp_path / "t.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (1200, 500)


def test_curves_name_the_windows(script):
    kinds = [(kind, r) for kind, r, _ in script("table1").curves([16, 64])]
    assert kinds == [("full", 0), ("masked", 16), ("restricted", 16), ("restricted", 64), ("ffn", 0)]


def test_counts_that_measure_nothing_are_refused(cli, tmp_path):
    for args, message in [
        (["--windows", "0"], "error: --windows must all be >= 1, got 0"),
        (["--lengths", "64", "-1"], "error: --lengths must all be >= 1, got -1"),
        (["--repeats", "0"], "error: --repeats and --threads must be >= 1, got 0 and 1"),
    ]:
        proc = cli("table1", *args, "--out", tmp_path / "x.png")
        assert proc.returncode == 1 and proc.stderr.strip() == message, proc.stderr
        assert not (tmp_path / "x.png").exists()
