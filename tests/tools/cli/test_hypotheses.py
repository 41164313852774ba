"""attn-only-hypotheses: a fairseq-generate log's best hypotheses in sentence order (section 6.1's
BLEU is computed on them), as fairseq's docs get them with grep '^H-' | sort -t- -k2 -n | cut -f3."""

import pytest

from attn_only_tools import generate_log
from attn_only_tools.cli.hypotheses import hypotheses
from attn_only_tools.guards.errors import PluginError

# batches finish out of order; --nbest 2 prints two H- lines for sentence 1, the best first
LOG = """INFO | fairseq_cli.generate | loading model
S-2\tdrei .
T-2\tdrei .
H-2\t-0.3\tdrei .
D-2\t-0.3\tDrei.
S-0\teins
H-0\t-0.1\teins
D-0\t-0.1\tEins
S-1\tzwei
H-1\t-0.2\tzwei
D-1\t-0.2\tZwei
H-1\t-0.9\tzwo
D-1\t-0.9\tZwo
Generate test with beam=4: BLEU4 = 1.00
"""


def test_sentence_order_best_first():
    sentences = generate_log.parse(LOG.splitlines())
    assert hypotheses(sentences) == ["eins", "zwei", "drei ."]
    assert hypotheses(sentences, detokenized=True) == ["Eins", "Zwei", "Drei."]


def test_what_grep_sort_cut_gives():
    """The same lines as fairseq's docs' shell pipeline, computed here in Python."""
    rows = sorted((line for line in LOG.splitlines() if line.startswith("H-")), key=lambda r: int(r.split("\t")[0][2:]))
    shell = [row.split("\t")[2] for row in rows]  # sort -n is stable: nbest keep their order
    assert hypotheses(generate_log.parse(LOG.splitlines())) == [shell[0], shell[1], shell[3]]


@pytest.mark.parametrize(
    "log, message",
    [
        ("", "holds no H- lines"),
        ("S-0\ta\nH-0\t-1\ta\nS-2\tc\nH-2\t-1\tc\n", "sentence ids are not 0..1 (1 missing, the first 1)"),
        ("S-0\ta\nS-1\tb\nH-1\t-1\tb\n", "sentence 0 has no H- line"),
    ],
)
def test_incomplete_logs_refused(log, message):
    with pytest.raises(PluginError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        hypotheses(generate_log.parse(log.splitlines()), where="gen.log")


def test_the_command(cli, tmp_path):
    log, out = tmp_path / "generate.log", tmp_path / "hyp.de"
    log.write_text(LOG, encoding="utf-8")
    proc = cli("hypotheses", log, "--output", out)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert out.read_text(encoding="utf-8") == "eins\nzwei\ndrei .\n"
    again = cli("hypotheses", log, "--output", out, "--detokenized")  # an existing output needs --force
    assert again.returncode == 1 and again.stderr.startswith("error: --output") and "--force" in again.stderr
    cli("hypotheses", log, "--output", out, "--detokenized", "--force")
    assert out.read_text(encoding="utf-8") == "Eins\nZwei\nDrei.\n"
    itself = cli("hypotheses", log, "--output", log, "--force")  # an output never replaces its input
    assert itself.returncode == 1 and "is the input" in itself.stderr and log.read_text(encoding="utf-8") == LOG
    (tmp_path / "cut.log").write_text("S-0\ta\nH-0\t-1\ta\nS-2\tc\nH-2\t-1\tc\n", encoding="utf-8")
    cut = cli("hypotheses", tmp_path / "cut.log", "--output", tmp_path / "new.txt")
    assert cut.returncode == 1 and len(cut.stderr.splitlines()) == 1 and "decode the whole split" in cut.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.log", "generate.log", "hyp.de"]  # nothing half-written
