"""attn-only-convert-checkpoint: fairseq's transformer <-> ours, same hypotheses both ways."""

import pytest

from attn_only_tools import generate_log
from attn_only_tools.guards.errors import PluginError
from helpers import PLUGIN, reversal_data, run  # noqa: E402

BUILTIN = [
    "--arch",
    "transformer",
    "--encoder-layers",
    2,
    "--decoder-layers",
    2,
    "--encoder-embed-dim",
    32,
    "--decoder-embed-dim",
    32,
    "--encoder-ffn-embed-dim",
    64,
    "--decoder-ffn-embed-dim",
    64,
    "--encoder-attention-heads",
    4,
    "--decoder-attention-heads",
    4,
    "--share-all-embeddings",
    "--criterion",
    "label_smoothed_cross_entropy",
    "--optimizer",
    "adam",
    "--lr",
    "1e-3",
    "--max-tokens",
    2000,
    "--cpu",
    "--seed",
    1,
    "--no-epoch-checkpoints",
]


def hypotheses(data, path):
    # --user-dir also lets torch's safe loader read fairseq's own checkpoint (argparse.Namespace)
    out = run(
        "fairseq-generate",
        data / "bin",
        "--user-dir",
        PLUGIN,
        "--path",
        path,
        "--beam",
        4,
        "--lenpen",
        0.6,
        "--batch-size",
        50,
        "--cpu",
    ).stdout
    return {i: (s.hypothesis, s.score) for i, s in generate_log.parse(out.splitlines()).items()}


def same(a, b):
    """Identical hypotheses; scores equal up to float rounding (fused vs unfused kernels)."""
    return a.keys() == b.keys() and all(a[k][0] == b[k][0] and abs(a[k][1] - b[k][1]) < 1e-4 for k in a)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("convert")
    reversal_data(root, 500)
    return root


def test_round_trip_same_hypotheses(data, tmp_path, cli):
    run(
        "fairseq-train",
        data / "bin",
        *BUILTIN,
        "--encoder-learned-pos",
        "--decoder-learned-pos",
        "--max-update",
        20,
        "--save-dir",
        tmp_path,
    )
    original = hypotheses(data, tmp_path / "checkpoint_last.pt")
    assert len(original) == 100
    proc = cli("convert_checkpoint", "--to", "ours", tmp_path / "checkpoint_last.pt", tmp_path / "ours.pt")
    assert proc.returncode == 0, proc.stderr
    assert same(hypotheses(data, tmp_path / "ours.pt"), original)
    proc = cli("convert_checkpoint", "--to", "fairseq", tmp_path / "ours.pt", tmp_path / "back.pt")
    assert proc.returncode == 0, proc.stderr
    assert same(hypotheses(data, tmp_path / "back.pt"), original)


def test_sinusoidal_fairseq_model_is_refused(data, tmp_path, cli):
    run("fairseq-train", data / "bin", *BUILTIN, "--max-update", 1, "--save-dir", tmp_path)
    proc = cli("convert_checkpoint", "--to", "ours", tmp_path / "checkpoint_last.pt", tmp_path / "x.pt")
    assert proc.returncode == 1 and not (tmp_path / "x.pt").exists()
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and "sinusoidal" in last
    proc = cli("convert_checkpoint", "--to", "fairseq", tmp_path / "checkpoint_last.pt", tmp_path / "x.pt")
    assert proc.returncode == 1 and "not attn_only_transformer" in proc.stderr


def test_output_that_is_the_input_is_refused(tmp_path, script, monkeypatch):
    """IN IN, and IN named again relatively, through a symlink or a hard link: refused before the
    checkpoint is read, the input left as it was."""
    import os
    import re

    convert = script("convert_checkpoint")
    ckpt = tmp_path / "model.pt"
    ckpt.write_bytes(b"the only copy of a checkpoint")
    (tmp_path / "link.pt").symlink_to(ckpt)
    os.link(ckpt, tmp_path / "hard.pt")
    monkeypatch.chdir(tmp_path)
    for out in (ckpt, "model.pt", tmp_path / "link.pt", "hard.pt"):
        message = (
            f"OUTPUT {out} is the input {ckpt}: writing it would destroy or change that input, "
            "--force or not; give OUTPUT a path outside every input"
        )
        with pytest.raises(PluginError, match=f"^{re.escape(message)}$"):
            convert.main(["--to", "fairseq", str(ckpt), str(out), "--force"])
    assert ckpt.read_bytes() == b"the only copy of a checkpoint"
    assert sorted(os.listdir(tmp_path)) == ["hard.pt", "link.pt", "model.pt"]


def test_output_named_as_a_trainings_checkpoint_is_refused(tmp_path, script):
    """A conversion written as SAVE/checkpoint_last.pt (or a name the training replaces) would be taken
    for the run's own checkpoint: refused by name before the input is read, nothing written."""
    convert = script("convert_checkpoint")
    ckpt = tmp_path / "model.pt"
    ckpt.write_bytes(b"not read: the name is refused first")
    for name in ("checkpoint_last.pt", "checkpoint_best.pt", "checkpoint_1_40.pt", "checkpoint7.pt"):
        with pytest.raises(PluginError, match=f"^OUTPUT {tmp_path / name}: {name} is a name fairseq-train"):
            convert.main(["--to", "fairseq", str(ckpt), str(tmp_path / name), "--force"])
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]


def test_model_without_positions_is_refused(script):
    """A model trained with --learned-pos --no-absolute-positions stores no position table; fairseq's
    transformer with --encoder/decoder-learned-pos would load it without one: refused in one line."""
    from attn_only_tools.guards.errors import PluginError

    convert = script("convert_checkpoint")
    m = dict(_name="attn_only_transformer", learned_pos=True, no_absolute_positions=True, d_model=32, heads=4)
    with pytest.raises(PluginError, match="^this model uses --no-absolute-positions, .*: it does not convert$"):
        convert.ours_model_cfg_to_fairseq(m)
    convert.ours_model_cfg_to_fairseq(dict(m, no_absolute_positions=False))  # the same model with its table converts
