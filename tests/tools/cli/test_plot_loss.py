"""attn-only-plot-loss: loss curves from a fairseq-train log, and no PNG written over the log."""

import os

import pytest

from attn_only_tools.guards.errors import PluginError

LOG = (
    "2026-01-01 10:00:00 | INFO | train_inner | epoch 001:     10 / 27 loss=7.512, nll_loss=7.1, ppl=137.2, "
    "wps=1200, num_updates=10, lr=1e-05\n"
    "2026-01-01 10:00:05 | INFO | train_inner | epoch 001:     20 / 27 loss=6.9, nll_loss=6.5, ppl=90.5, "
    "wps=1200, num_updates=20, lr=2e-05\n"
    "2026-01-01 10:00:09 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 6.7 | nll_loss 6.3 | "
    "ppl 78.8 | num_updates 27\n"
)


def test_reads_train_and_valid_lines(tmp_path, script):
    (tmp_path / "train.log").write_text(LOG)
    series = script("plot_loss").read_log(tmp_path / "train.log")
    assert series == {"train_inner": [(10, 7.512), (20, 6.9)], "valid": [(27, 6.7)]}


def test_output_that_is_the_log_is_refused(tmp_path, script, capsys, monkeypatch):
    """LOG LOG, and the log named again through a relative path, a symlink or a hard link: one
    line, the log left as it was, no PNG; another output path is the control."""
    plot_loss = script("plot_loss")
    log = tmp_path / "train.log"
    log.write_text(LOG)
    (tmp_path / "link.png").symlink_to(log)
    os.link(log, tmp_path / "hard.png")
    monkeypatch.chdir(tmp_path)
    for out in (log, "train.log", tmp_path / "link.png", "hard.png"):
        with pytest.raises(PluginError) as stop:
            plot_loss.main([str(log), str(out)])
        # the one line the hook prints after "error: " before it exits with status 1
        assert str(stop.value).splitlines() == [
            f"OUT.png {out} is the input {log}: writing it would destroy or change that input, --force or "
            "not; give OUT.png a path outside every input"
        ]
    assert log.read_text() == LOG and sorted(os.listdir(tmp_path)) == ["hard.png", "link.png", "train.log"]
    plot_loss.main(["train.log", "loss.png"])
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and log.read_text() == LOG
    # an existing plot (the shared rule for outputs): kept unless --force
    capsys.readouterr()
    (tmp_path / "loss.png").write_bytes(b"mine")
    with pytest.raises(PluginError) as stop:
        plot_loss.main(["train.log", "loss.png"])
    assert str(stop.value).splitlines() == [
        "OUT.png loss.png already exists: pass --force to replace it, or choose another OUT.png"
    ]
    assert (tmp_path / "loss.png").read_bytes() == b"mine"
    plot_loss.main(["train.log", "loss.png", "--force"])
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
