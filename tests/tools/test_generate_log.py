"""attn_only_tools.generate_log, the one reader of fairseq-generate's output, on hand-made lines."""

import pytest

from attn_only_tools.generate_log import parse, read
from attn_only_tools.guards.errors import PluginError

LOG = (
    "2026 | INFO | fairseq_cli.generate | loading\n"
    "S-1\t▁b ▁c\nT-1\tB C\nH-1\t-0.25\t▁x\nD-1\t-0.25\tX\nP-1\t-0.5 -0.0\n"
    "S-0\t▁a\nT-0\tA\nH-0\t-1.5\t▁y ▁z\nD-0\t-1.5\tY Z\nH-0\t-2.0\t▁q\nD-0\t-2.0\tQ\n"
    "Generate test with beam=4: BLEU4 = 10.00\n"
)


def test_every_line_kind_by_sentence():
    log = parse(LOG.splitlines())
    assert sorted(log) == [0, 1]
    one = log[1]
    assert (one.source, one.target, one.hypothesis, one.score) == ("▁b ▁c", "B C", "▁x", -0.25)
    assert one.detokenized == [(-0.25, "X")] and one.positional == [[-0.5, -0.0]]
    assert log[0].hypotheses == [(-1.5, "▁y ▁z"), (-2.0, "▁q")]  # --nbest 2: best first, as printed
    assert log[0].hypothesis == "▁y ▁z"


def test_missing_fields_and_other_lines():
    log = parse(["H-3\t-0.5", "S-4", "H-x\t1\tz", "Hello\tworld"])
    assert log[3].hypotheses == [(-0.5, "")] and log[4].source == "" and log[4].hypothesis is None
    assert sorted(log) == [3, 4]


def test_bad_lines_and_files_are_one_line_errors(tmp_path):
    with pytest.raises(PluginError, match=r"is not an H-<id> <score> <text> line"):
        parse(["H-0\tx y"], "gen.txt")
    with pytest.raises(PluginError, match=r"is not a P-<id> <scores> line"):
        parse(["P-0\t-1 z"])
    with pytest.raises(PluginError, match=r"cannot read .*missing.txt: No such file or directory"):
        read(tmp_path / "missing.txt")
    (tmp_path / "gen.txt").write_text(LOG, encoding="utf-8")
    assert read(tmp_path / "gen.txt")[1].target == "B C"
