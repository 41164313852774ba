"""A crafted checkpoint whose pickle would run code (os.system via __reduce__) is refused by every
loader we own or patch: fairseq-generate, fairseq-interactive, fairseq-validate, resuming
fairseq-train, averaging, the converter and the Python API. Each case checks the refusal is one
`error:` line naming the file, and that the payload never ran (its marker file does not exist)."""

import os
import subprocess
from pathlib import Path

import pytest
import torch

from helpers import BIN, PLUGIN, ROOT, TINY, command, reversal_data, train


class _Payload:
    """Unpickling this calls os.system: what an attacker would put into a checkpoint."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A real tiny checkpoint, and the same checkpoint with the payload added."""
    root = tmp_path_factory.mktemp("untrusted")
    reversal_data(root, 300)
    train(root / "bin", root / "good", "--arch", "transformer_base", *TINY, max_update=2)
    state = torch.load(root / "good" / "checkpoint_last.pt", weights_only=True)
    state["extra_state"]["hook"] = _Payload(root / "pwned")
    (root / "evil").mkdir()
    torch.save(state, root / "evil" / "checkpoint_last.pt")
    return root


def _refused(proc, setup, path):
    """Non-zero exit, one `error:` line naming the checkpoint, and the payload never ran."""
    assert proc.returncode != 0, proc.stdout[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(path) in errors[0] and "untrusted" in errors[0], proc.stderr[-3000:]
    assert not (setup / "pwned").exists(), "the checkpoint's payload ran"


def _run(tool, *args, stdin=None):
    return subprocess.run(
        [str(BIN / tool), *map(str, args)],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=ROOT,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
        timeout=600,
    )


@pytest.mark.parametrize("tool", ["fairseq-generate", "fairseq-interactive", "fairseq-validate"])
def test_fairseq_clis_refuse(setup, tool):
    evil = setup / "evil" / "checkpoint_last.pt"
    args = [setup / "bin", "--user-dir", PLUGIN, "--path", evil, "--cpu"]
    if tool == "fairseq-validate":
        args += ["--task", "translation", "--valid-subset", "valid", "--max-tokens", "1000"]
    proc = _run(tool, *args, stdin="1 2 3\n")
    _refused(proc, setup, evil)


def test_resume_refuses(setup):
    """fairseq-train resumes from checkpoint_last.pt in --save-dir: a planted one is refused."""
    evil = setup / "evil" / "checkpoint_last.pt"
    proc = train(setup / "bin", setup / "evil", "--arch", "transformer_base", *TINY, max_update=4, ok=False)
    _refused(proc, setup, evil)


@pytest.mark.parametrize("script", ["average_checkpoints", "convert_checkpoint"])
def test_scripts_refuse(setup, script, tmp_path):
    evil = setup / "evil" / "checkpoint_last.pt"
    out = tmp_path / "out.pt"
    if script == "average_checkpoints":
        args = ["--inputs", setup / "good" / "checkpoint_last.pt", evil, "--output", out]
    else:
        args = [evil, out, "--to", "fairseq"]
    proc = subprocess.run(
        [*command(script), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    _refused(proc, setup, evil)
    assert not out.exists()


def test_python_api_refuses(setup):
    import attn_only_plugin
    from attn_only_tools.guards.errors import PluginError

    with pytest.raises(PluginError, match="untrusted") as err:
        attn_only_plugin.load(setup / "evil", data=setup / "bin")
    assert "checkpoint_last.pt" in str(err.value)
    assert not (setup / "pwned").exists()


def test_trusted_checkpoint_still_loads(setup):
    """The control: the same checkpoint without the payload loads through the same path."""
    import attn_only_plugin

    mt = attn_only_plugin.load(setup / "good", data=setup / "bin")
    assert isinstance(mt.translate("1 2 3"), str)


@pytest.mark.filterwarnings("ignore:Detected pickle protocol:UserWarning")  # torch's, on the plain pickle given
def test_a_file_of_another_kind_is_named_not_called_corrupt(tmp_path):
    """A CTranslate2 model.bin, a numpy array, a plain pickle or an empty file given
    as a checkpoint was 'corrupt or truncated'; the error now says what the file is. A torch file
    that really is cut short keeps that message."""
    import pickle
    import re

    import numpy as np

    from attn_only_plugin.guards.safe_load import load_checkpoint
    from attn_only_tools.guards.errors import PluginError

    ct2 = tmp_path / "ct2"
    ct2.mkdir()
    (ct2 / "config.json").write_text("{}")
    (ct2 / "model.bin").write_bytes(b"\x06\x00\x00\x00TransformerSpec")
    np.save(tmp_path / "array.npy", np.zeros(3))
    (tmp_path / "plain.pkl").write_bytes(pickle.dumps({"model": [1, 2]}))
    (tmp_path / "empty.pt").write_bytes(b"")
    torch.save({"model": {"w": torch.ones(100)}}, tmp_path / "good.pt")
    (tmp_path / "cut.pt").write_bytes((tmp_path / "good.pt").read_bytes()[:200])
    for path, kind in [
        (ct2 / "model.bin", "a CTranslate2 model"),
        (tmp_path / "array.npy", "a numpy array file"),
        (tmp_path / "plain.pkl", "a plain Python pickle"),
        (tmp_path / "empty.pt", "an empty file"),
    ]:
        with pytest.raises(PluginError, match=f"^{re.escape(str(path))} is not a checkpoint but {kind}"):
            load_checkpoint(path)
    with pytest.raises(PluginError, match="it is corrupt or truncated"):
        load_checkpoint(tmp_path / "cut.pt")


def test_an_object_array_is_refused_as_untrusted_not_called_corrupt(tmp_path):
    """A torch checkpoint holding a numpy array of Python objects (each unpickled in turn: code could
    run) was 'corrupt or truncated'; torch's safe loader refuses its dtype, and the error says so."""
    import numpy as np

    from attn_only_plugin.guards.safe_load import load_checkpoint
    from attn_only_tools.guards.errors import PluginError

    path = tmp_path / "objects.pt"
    torch.save({"model": {"w": torch.ones(2)}, "extra": np.array([1, "a"], dtype=object)}, path)
    with pytest.raises(
        PluginError, match=f"^refused to load untrusted checkpoint {path}: it holds numpy.dtypes.ObjectDType"
    ):
        load_checkpoint(path)
