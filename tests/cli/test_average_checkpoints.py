"""attn-only-average-checkpoints: section 6.1 of Vaswani et al. (2017) averages the last 5 (base)
or 20 (big) checkpoints. Exact means, last-N selection, refusals, atomic output, streaming, and a
real fairseq-train -> average -> fairseq-generate run."""

import gc
import os
import random
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
import torch

from helpers import fake_checkpoint

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = str(ROOT / "attn_only_plugin")
BIN = Path(sys.executable).parent


def test_exact_mean_tied_weights_and_metadata(tmp_path, cli):
    for u, scale in [(10, 1.0), (20, 2.0), (30, 6.0), (40, 100.0)]:
        fake_checkpoint(tmp_path / f"checkpoint_1_{u}.pt", scale)
    proc = cli(
        "average_checkpoints",
        "--inputs",
        tmp_path,
        "--num-update-checkpoints",
        3,
        "--checkpoint-upper-bound",
        30,
        "--output",
        tmp_path / "avg.pt",
    )
    assert proc.returncode == 0, proc.stderr
    assert "checkpoint_1_10.pt" in proc.stderr and "3/3" in proc.stderr and not proc.stdout  # progress on stderr
    avg = torch.load(tmp_path / "avg.pt", weights_only=True)
    m = avg["model"]
    assert torch.equal(m["embed.weight"], torch.arange(6.0).reshape(2, 3) * 3.0)  # (1 + 2 + 6) / 3
    assert torch.equal(m["bias"], torch.tensor([3.0, -6.0], dtype=torch.float64))
    assert m["half"].dtype == torch.float16 and m["half"].item() == 3.0
    assert torch.equal(m["steps"], torch.tensor([1]))  # integers: the first checkpoint's
    assert m["out.weight"].untyped_storage().data_ptr() == m["embed.weight"].untyped_storage().data_ptr()
    assert avg["cfg"]["tag"] == str(tmp_path / "checkpoint_1_10.pt") and avg["optimizer_history"][0]["num_updates"] == 1
    assert avg["last_optimizer_state"] is None and avg["extra_state"] == {"epoch": 1}
    assert sorted(os.listdir(tmp_path)) == ["avg.pt"] + [f"checkpoint_1_{u}.pt" for u in (10, 20, 30, 40)]


def test_last_n_by_update_and_epoch(tmp_path, script):
    mod = script("average_checkpoints")
    for name in [
        "checkpoint1.pt",
        "checkpoint2.pt",
        "checkpoint3.pt",
        "checkpoint10.pt",
        "checkpoint_last.pt",
        "checkpoint_best.pt",
        "checkpoint_1_5.pt",
        "checkpoint_1_100.pt",
        "checkpoint_2_1000.pt",
        "checkpoint_3_20.pt",
        "checkpoint.best_loss_1.2.pt",
    ]:
        (tmp_path / name).write_bytes(b"")
    names = lambda paths: [p.name for p in paths]  # noqa: E731
    assert names(mod.last_n_checkpoints(tmp_path, 2, by_update=False)) == ["checkpoint3.pt", "checkpoint10.pt"]
    assert names(mod.last_n_checkpoints(tmp_path, 2, False, upper_bound=3)) == ["checkpoint2.pt", "checkpoint3.pt"]
    assert names(mod.last_n_checkpoints(tmp_path, 3, by_update=True)) == [
        "checkpoint_3_20.pt",
        "checkpoint_1_100.pt",
        "checkpoint_2_1000.pt",
    ]
    assert names(mod.last_n_checkpoints(tmp_path, 2, True, upper_bound=999)) == [
        "checkpoint_3_20.pt",
        "checkpoint_1_100.pt",
    ]
    with pytest.raises(mod.PluginError, match=r"has 4 named checkpoint_<epoch>_<update>.pt"):
        mod.last_n_checkpoints(tmp_path, 5, by_update=True)


def test_streams_one_checkpoint_at_a_time(tmp_path, script, monkeypatch):
    mod = script("average_checkpoints")
    paths = [tmp_path / f"c{i}.pt" for i in range(5)]
    for i, p in enumerate(paths):
        fake_checkpoint(p, i + 1.0)
    loaded, real_load = [], mod.load_checkpoint

    def tracking_load(path):
        gc.collect()
        alive = [i for i, ref in enumerate(loaded[1:], start=1) if ref() is not None]
        assert not alive, f"checkpoints {alive} still in memory while loading {path}"
        state = real_load(path)
        loaded.append(weakref.ref(state["model"]["bias"]))
        return state

    monkeypatch.setattr(mod, "load_checkpoint", tracking_load)
    avg = mod.average_checkpoints(paths)
    assert len(loaded) == 5 and avg["model"]["half"].item() == 3.0  # mean of 1..5


def _refusal_case(tmp_path, case):
    fake_checkpoint(tmp_path / "a.pt", 1.0)
    pair = ["--inputs", tmp_path / "a.pt", tmp_path / "b.pt"]
    if case == "shape":
        fake_checkpoint(tmp_path / "b.pt", 2.0, shape=(3, 3))
        return pair, f"{tmp_path / 'b.pt'} does not match {tmp_path / 'a.pt'}: embed.weight has shape (3, 3)"
    if case == "keys":
        fake_checkpoint(tmp_path / "b.pt", 2.0, extra={"decoder.layers.9.weight": torch.ones(1)})
        return pair, f"parameter decoder.layers.9.weight is only in {tmp_path / 'b.pt'}"
    if case == "missing_key":
        torch.save({"model": {"bias": torch.ones(2)}}, tmp_path / "b.pt")
        return pair, f"{tmp_path / 'b.pt'} does not match {tmp_path / 'a.pt'}: parameter embed.weight is only in"
    if case == "none":
        (tmp_path / "a.pt").rename(tmp_path / "checkpoint_last.pt")
        return ["--inputs", tmp_path, "--num-update-checkpoints", 5], "has 0 named checkpoint_<epoch>_<update>.pt"
    if case == "zero":
        return ["--inputs", tmp_path, "--num-epoch-checkpoints", 0], "must be >= 1, not 0"
    if case == "folder":
        return ["--inputs", tmp_path], "is a folder: add --num-update-checkpoints N"
    if case in ("nan", "inf"):  # a checkpoint from after the training diverged
        value = float(case)
        fake_checkpoint(tmp_path / "b.pt", 2.0, extra={"bias": torch.tensor([1.0, value], dtype=torch.float64)})
        return pair, (
            f"{tmp_path / 'b.pt'} holds non-finite weights: bias has 1 NaN/inf of its 2 values, which "
            "would make the average NaN/inf: leave it out of --inputs"
        )
    if case == "unsafe":  # a pickle that would run code: the safe loader refuses it
        torch.save({"model": {"x": torch.ones(1)}, "evil": Path("x")}, tmp_path / "b.pt")
        return pair, f"refused to load untrusted checkpoint {tmp_path / 'b.pt'}: it holds pathlib"
    (tmp_path / "b.pt").write_bytes((tmp_path / "a.pt").read_bytes()[:100])  # truncated
    return pair, f"cannot read checkpoint {tmp_path / 'b.pt'}: it is corrupt or truncated"


@pytest.mark.parametrize(
    "case", ["shape", "keys", "missing_key", "none", "zero", "folder", "nan", "inf", "unsafe", "truncated"]
)
def test_refusals_are_one_line_and_leave_output_alone(tmp_path, cli, case):
    args, expect = _refusal_case(tmp_path, case)
    out = tmp_path / "out" / "avg.pt"
    out.parent.mkdir()
    out.write_text("previous result")
    proc = cli("average_checkpoints", *args, "--output", out, "--force")  # reach the refusal under test
    errors = [line for line in proc.stderr.splitlines() if not line.startswith("[average]")]
    assert proc.returncode == 1 and len(errors) == 1, proc.stderr  # progress lines, then one error line
    assert errors[0].startswith("error: ") and expect in errors[0], errors[0]
    assert out.read_text() == "previous result" and os.listdir(out.parent) == ["avg.pt"]


def test_output_that_is_an_input_is_refused(tmp_path, script, capsys, monkeypatch):
    """--output naming one of the inputs, however written (the same path, relative, a symlink to it,
    a hard link of it, a folder's checkpoint): one line, every input left as it was."""
    mod = script("average_checkpoints")
    for u, scale in [(10, 1.0), (20, 2.0)]:
        fake_checkpoint(tmp_path / f"checkpoint_1_{u}.pt", scale)
    first, second = tmp_path / "checkpoint_1_10.pt", tmp_path / "checkpoint_1_20.pt"
    (tmp_path / "link.pt").symlink_to(second)
    os.link(second, tmp_path / "hard.pt")
    before = {p.name: p.read_bytes() for p in (first, second)}
    monkeypatch.chdir(tmp_path)
    pair = ["--inputs", first, second]
    newest = ["--inputs", ".", "--num-update-checkpoints", 2]
    for args, output, clash in [
        (pair, second, second),
        (pair, "checkpoint_1_20.pt", second),
        (pair, tmp_path / "link.pt", second),
        (pair, tmp_path / "hard.pt", second),
        (newest, "checkpoint_1_10.pt", "checkpoint_1_10.pt"),
    ]:
        assert mod.main([*map(str, args), "--output", str(output), "--force"]) == 1  # --force or not
        err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("[average]")]
        assert err == [
            f"error: --output {output} is the input {clash}: writing it would destroy or change that "
            "input, --force or not; give --output a path outside every input"
        ], err
    assert {p.name: p.read_bytes() for p in (first, second)} == before
    assert mod.main([*map(str, pair), "--output", "checkpoint_avg.pt"]) == 0  # the control
    assert torch.load(tmp_path / "checkpoint_avg.pt", weights_only=True)["model"]["half"].item() == 1.5


def test_no_checkpoints_in_library(script):
    mod = script("average_checkpoints")
    with pytest.raises(mod.PluginError, match="no checkpoints to average"):
        mod.average_checkpoints([])


def test_atomic_write(tmp_path, script, monkeypatch):
    mod = script("average_checkpoints")
    out = tmp_path / "avg.pt"
    out.write_text("previous result")

    def dies_halfway(obj, f):
        f.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(mod.torch, "save", dies_halfway)
    with pytest.raises(KeyboardInterrupt):
        mod.save_atomic({"model": {}}, out)
    assert out.read_text() == "previous result" and os.listdir(tmp_path) == ["avg.pt"]
    monkeypatch.undo()
    mod.save_atomic({"model": {"w": torch.ones(2)}}, out)
    assert torch.equal(torch.load(out, weights_only=True)["model"]["w"], torch.ones(2))
    assert os.listdir(tmp_path) == ["avg.pt"] and (out.stat().st_mode & 0o777) == 0o666 & ~_umask()


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _tool(name, *args):
    proc = subprocess.run(
        [str(BIN / name), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
        timeout=600,
    )
    assert proc.returncode == 0, f"{name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Digit-string reversal, 30 updates of a d_model 32 model, interval checkpoints every 10 updates
    (an epoch is ~27 updates: fairseq writes no checkpoint_E_U.pt when an interval ends an epoch)."""
    root = tmp_path_factory.mktemp("avg_e2e")
    rng = random.Random(0)
    for split, n in [("train", 8000), ("valid", 50), ("test", 20)]:
        rows = [[str(rng.randint(0, 9)) for _ in range(rng.randint(3, 8))] for _ in range(n)]
        (root / f"{split}.src").write_text("".join(" ".join(r) + "\n" for r in rows))
        (root / f"{split}.tgt").write_text("".join(" ".join(reversed(r)) + "\n" for r in rows))
    _tool(
        "fairseq-preprocess",
        "--source-lang",
        "src",
        "--target-lang",
        "tgt",
        "--trainpref",
        root / "train",
        "--validpref",
        root / "valid",
        "--testpref",
        root / "test",
        "--destdir",
        root / "bin",
        "--joined-dictionary",
        "--workers",
        1,
    )
    _tool(
        "fairseq-train",
        root / "bin",
        "--user-dir",
        PLUGIN,
        "--arch",
        "transformer_base",
        "--encoder-layers",
        2,
        "--decoder-layers",
        2,
        "--d-model",
        32,
        "--d-ff",
        64,
        "--heads",
        4,
        "--criterion",
        "paper_label_smoothed_ce",
        "--lr-scheduler",
        "noam",
        "--warmup-updates",
        50,
        "--optimizer",
        "adam",
        "--adam-betas",
        "(0.9, 0.98)",
        "--adam-eps",
        "1e-9",
        "--max-tokens",
        2000,
        "--max-update",
        30,
        "--save-dir",
        root / "ckpt",
        "--cpu",
        "--save-interval-updates",
        10,
        "--keep-interval-updates",
        5,
        "--seed",
        1,
        "--log-format",
        "simple",
    )
    return root


def interval_checkpoints(folder):
    return sorted(folder.glob("checkpoint_*_*.pt"), key=lambda p: int(p.stem.split("_")[-1]))


def test_real_checkpoints_average_and_generate(trained, cli):
    ckpt = trained / "ckpt"
    lasts = interval_checkpoints(ckpt)
    assert [int(p.stem.split("_")[-1]) for p in lasts] == [10, 20, 30], os.listdir(ckpt)
    proc = cli(
        "average_checkpoints", "--inputs", ckpt, "--num-update-checkpoints", 3, "--output", trained / "averaged.pt"
    )
    assert proc.returncode == 0, proc.stderr
    assert all(f"{i}/3 {p}" in proc.stderr for i, p in enumerate(lasts, start=1)), proc.stderr
    models = [torch.load(p, weights_only=True)["model"] for p in lasts]
    avg = torch.load(trained / "averaged.pt", weights_only=True)
    for name, tensor in avg["model"].items():
        if tensor.is_floating_point():
            expected = sum(m[name].double() for m in models) / 3
            assert torch.allclose(tensor.double(), expected, rtol=1e-6, atol=1e-7), name
    shared = {}
    for name, tensor in models[0].items():
        shared.setdefault(tensor.untyped_storage().data_ptr(), []).append(name)
    for names in (n for n in shared.values() if len(n) > 1):  # tied embeddings stay tied
        assert len({avg["model"][n].untyped_storage().data_ptr() for n in names}) == 1, names
    gen = _tool(
        "fairseq-generate",
        trained / "bin",
        "--user-dir",
        PLUGIN,
        "--path",
        trained / "averaged.pt",
        "--beam",
        4,
        "--batch-size",
        20,
        "--cpu",
        "--max-len-a",
        1,
        "--max-len-b",
        20,
    )
    assert sum(line.startswith("H-") for line in gen.stdout.splitlines()) == 20


def test_real_averaged_checkpoint_loads_in_python(trained, cli):
    from fairseq import checkpoint_utils

    import attn_only_plugin  # noqa: F401

    out = trained / "explicit.pt"
    proc = cli("average_checkpoints", "--inputs", *interval_checkpoints(trained / "ckpt")[-2:], "--output", out)
    assert proc.returncode == 0, proc.stderr
    models, cfg = checkpoint_utils.load_model_ensemble([str(out)], arg_overrides={"data": str(trained / "bin")})
    assert len(models) == 1 and cfg.model.d_model == 32
    epoch_last = torch.load(trained / "ckpt" / "checkpoint_last.pt", weights_only=True)["model"]
    assert set(models[0].state_dict()) == set(epoch_last)


@pytest.mark.parametrize(
    "name",
    [
        "checkpoint_last.pt",
        "checkpoint_best.pt",
        "checkpoint3.pt",
        "checkpoint_2_500.pt",
        "checkpoint.best_loss_4.12.pt",
    ],
)
def test_output_named_as_a_trainings_checkpoint_is_refused(tmp_path, cli, name):
    """An average written as SAVE/checkpoint_last.pt was taken for the run's resume point (and the rerun
    advised to --reset-optimizer, which restarted the run over its checkpoints); as checkpoint_best.pt or
    an interval name, the training overwrote it. Refused by name, --force or not, nothing written."""
    fake_checkpoint(tmp_path / "a.pt", 1.0)
    fake_checkpoint(tmp_path / "b.pt", 2.0)
    save = tmp_path / "save"
    save.mkdir()
    (save / name).write_text("the run's own")
    proc = cli(
        "average_checkpoints", "--inputs", tmp_path / "a.pt", tmp_path / "b.pt", "--output", save / name, "--force"
    )
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == (
        f"error: --output {save / name}: {name} is a name fairseq-train resumes from or replaces as it trains, "
        "so in a save dir this file would be taken for the run's own checkpoint or overwritten by it; give "
        f"another name, e.g. {save / 'checkpoint_avg.pt'}"
    ), proc.stderr
    assert os.listdir(save) == [name] and (save / name).read_text() == "the run's own"
    control = cli(
        "average_checkpoints", "--inputs", tmp_path / "a.pt", tmp_path / "b.pt", "--output", save / "checkpoint_avg.pt"
    )
    assert control.returncode == 0, control.stderr


def test_the_same_checkpoint_twice_or_another_architecture_is_refused(tmp_path, cli):
    """A checkpoint named twice (here through a symlink) weighed double; checkpoints of the same shapes but
    another architecture (pre-norm against post-norm: same tensors, another function) were averaged. Both
    one line, nothing written."""
    fake_checkpoint(tmp_path / "a.pt", 1.0)
    fake_checkpoint(tmp_path / "b.pt", 2.0)
    (tmp_path / "again.pt").symlink_to(tmp_path / "a.pt")
    out = tmp_path / "avg.pt"
    proc = cli(
        "average_checkpoints", "--inputs", tmp_path / "a.pt", tmp_path / "b.pt", tmp_path / "again.pt", "--output", out
    )
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == (
        f"error: --inputs gives {tmp_path / 'a.pt'} twice (as {tmp_path / 'a.pt'} and {tmp_path / 'again.pt'}): "
        "the average would weigh it double; name each checkpoint once"
    ), proc.stderr
    state = torch.load(tmp_path / "b.pt", weights_only=True)
    state["cfg"]["model"]["pre_norm"] = True  # the first has no pre_norm recorded: compared only where both say
    torch.save(state, tmp_path / "b.pt")
    state = torch.load(tmp_path / "a.pt", weights_only=True)
    state["cfg"]["model"]["pre_norm"] = False
    torch.save(state, tmp_path / "a.pt")
    proc = cli("average_checkpoints", "--inputs", tmp_path / "a.pt", tmp_path / "b.pt", "--output", out)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == (
        f"error: {tmp_path / 'b.pt'} does not match {tmp_path / 'a.pt'}: it was trained with pre_norm=True, the "
        "first with pre_norm=False (a different architecture, with weights of the same shapes); average "
        "checkpoints of one run"
    ), proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("where", ["folder", "through_a_file"])
def test_an_output_that_cannot_be_written_is_refused_before_averaging(tmp_path, cli, where):
    """An --output that is a folder, or whose path runs through a file, failed only once every checkpoint
    was read and averaged. Now one line before the first is read."""
    fake_checkpoint(tmp_path / "a.pt", 1.0)
    fake_checkpoint(tmp_path / "b.pt", 2.0)
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir.pt").mkdir()
    out = tmp_path / "dir.pt" if where == "folder" else tmp_path / "file" / "sub" / "avg.pt"
    proc = cli("average_checkpoints", "--inputs", tmp_path / "a.pt", tmp_path / "b.pt", "--output", out, "--force")
    problem = (
        "is a folder: give a file path to write"
        if where == "folder"
        else f"{tmp_path / 'file'} is a file, not a folder"
    )
    assert proc.returncode == 1 and problem in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert "[average]" not in proc.stderr  # nothing read


@pytest.mark.parametrize(
    "written, last_is_newest, n, expected",
    [
        (7, True, 5, ["checkpoint_1_3", "checkpoint_1_4", "checkpoint_1_5", "checkpoint_1_6", "checkpoint_1_7"]),
        (7, False, 3, ["checkpoint_1_6", "checkpoint_1_7", "checkpoint_last"]),
        (2, True, 5, ["checkpoint_1_1", "checkpoint_1_2"]),  # fewer than N: all of them, never none
        (2, False, 5, ["checkpoint_1_1", "checkpoint_1_2", "checkpoint_last"]),
        (0, False, 5, ["checkpoint_last"]),
        (10, False, 1, ["checkpoint_last"]),
    ],
)
def test_list_last_is_the_recipes_rule(tmp_path, capsys, written, last_is_newest, n, expected):
    """--list-last N DIR (examples/pipeline.sh's last_checkpoints): by update U, oldest first, with
    checkpoint_last.pt standing in for the newest when it is not a copy of the newest checkpoint_E_U.pt."""
    from attn_only_plugin.cli import average_checkpoints

    for i in range(1, written + 1):
        (tmp_path / f"checkpoint_1_{i}.pt").write_text(str(i))
    (tmp_path / "checkpoint_last.pt").write_text(str(written) if last_is_newest else "newer")
    assert average_checkpoints.main(["--list-last", str(n), str(tmp_path)]) == 0
    assert [Path(p).stem for p in capsys.readouterr().out.splitlines()] == expected
    assert [p.stem for p in average_checkpoints.last_checkpoints(tmp_path, n)] == expected


def test_list_last_refusals(tmp_path, capsys):
    from attn_only_plugin.cli import average_checkpoints

    assert average_checkpoints.main(["--list-last", "2", str(tmp_path)]) == 1
    assert "holds no checkpoint_<epoch>_<update>.pt, no checkpoint_last.pt" in capsys.readouterr().err
    assert average_checkpoints.main(["--list-last", "0", str(tmp_path)]) == 1
    assert "must be >= 1, not 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        average_checkpoints.main(["--list-last", "x", str(tmp_path)])
    with pytest.raises(SystemExit):
        average_checkpoints.main([])  # neither --inputs/--output nor --list-last
