"""helpers.run starts fairseq's console scripts as children of a process that has imported the
libraries they import, not fairseq itself (helpers.run_forked), instead of as fresh processes: a
forked run must print and exit as a fresh one does. Each case runs the same command both ways
(ATTN_ONLY_TEST_FORK=0 for the fresh one) and compares what a test reads: exit status, hypotheses,
losses, the one-line errors."""

import re
import shutil

import pytest

from helpers import ARCH, PLUGIN, generate, interactive, run, train

pytestmark = pytest.mark.usefixtures("one_thread")

# what differs between two runs of the same command: clock times, speeds, durations, memory
_CLOCK = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| |^W-\d+\t[\d.]+|\b(wps|ups|wall|train_wall|gb_free)[= ][\d.]+|"
    r"[\d.e-]+ seconds|time: [\d.]+|[\d.]+s \(|[\d.]+ sentences/s, [\d.]+ tokens/s"
)


def both_ways(monkeypatch, call):
    """call() forked and fresh: the two CompletedProcesses."""
    forked = call()
    with monkeypatch.context() as fresh:
        fresh.setenv("ATTN_ONLY_TEST_FORK", "0")
        return forked, call()


def same(forked, fresh):
    """The same exit status and the same lines on stdout and stderr but for _CLOCK."""
    assert forked.returncode == fresh.returncode, (forked.stderr[-2000:], fresh.stderr[-2000:])
    for stream in ("stdout", "stderr"):
        lines = [[_CLOCK.sub("", line) for line in getattr(proc, stream).splitlines()] for proc in (forked, fresh)]
        assert lines[0] == lines[1], stream


def test_training_logs_the_same_losses(setup, tmp_path, monkeypatch):
    """fairseq-train with our model, criterion, schedule and optimizer (through --user-dir): the same
    log lines, losses and learning rates at every update, the same checkpoint."""

    def fresh_training():
        shutil.rmtree(tmp_path / "ckpt", ignore_errors=True)  # the same --save-dir both times: the same log lines
        return train(setup / "bin", tmp_path / "ckpt", *ARCH, "--log-interval", 1, max_update=4)

    forked, fresh = both_ways(monkeypatch, fresh_training)
    same(forked, fresh)
    assert "num_updates=4" in forked.stdout


def test_generation_prints_the_same_hypotheses(setup, checkpoint, monkeypatch):
    forked, fresh = both_ways(monkeypatch, lambda: generate(setup, checkpoint, "--nbest", 2))
    same(forked, fresh)
    assert forked.returncode == 0 and "H-0\t" in forked.stdout


def test_errors_and_standard_input_as_a_fresh_process(setup, checkpoint, monkeypatch):
    """Standard input reaches the child; our one-line error hook (installed when fairseq imports the
    plugin) and argparse's usage errors end the child with the same line and status."""
    same(*both_ways(monkeypatch, lambda: interactive(setup, checkpoint, "1 2 3\n4 5\n")))
    hidden = both_ways(monkeypatch, lambda: interactive(setup, checkpoint, "1 2\u200b 3\n"))
    same(*hidden)
    assert hidden[0].returncode == 1 and hidden[0].stderr.strip().splitlines()[-1].startswith("error:")
    usage = both_ways(monkeypatch, lambda: run("fairseq-generate", "--user-dir", PLUGIN, ok=False))
    same(*usage)
    assert usage[0].returncode == 2 and "the following arguments are required: data" in usage[0].stderr
