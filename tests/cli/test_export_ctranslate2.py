"""attn-only-export-ctranslate2 and attn-only-translate-ctranslate2 on a tiny random-weight
checkpoint (no training): the folder written atomically, refused when it exists unless --force;
translation of a file, stdin and fairseq-generate's S-/H-/D- lines; bad input
as one-line errors with nothing half-written."""

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import attn_only_plugin  # noqa: E402
from attn_only_plugin.export import CTRANSLATE2_VERSION  # noqa: E402
from attn_only_tools.guards.errors import PluginError  # noqa: E402
from helpers import build_model  # noqa: E402

pytest.importorskip("ctranslate2")
DIGITS = [str(i) for i in range(10)]
POSITIONS = 16  # the tiny model's source and target positions


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """A checkpoint of ours as fairseq-train lays it out (cfg.model, cfg.task, model) and its data
    folder (dict.src.txt, dict.tgt.txt: one joined dictionary of digits)."""
    from fairseq.data import Dictionary

    root = tmp_path_factory.mktemp("ckpt")
    d = Dictionary()
    for w in DIGITS:
        d.add_symbol(w)
    (root / "bin").mkdir()
    for lang in ("src", "tgt"):
        d.save(str(root / "bin" / f"dict.{lang}.txt"))
    model = build_model(d, max_source_positions=POSITIONS, max_target_positions=POSITIONS)
    cfg = dict(dataclasses.asdict(model.cfg), _name="transformer_base")
    torch.save(
        {
            "model": model.state_dict(),
            "args": None,
            "cfg": {"model": cfg, "task": {"_name": "translation", "source_lang": "src", "target_lang": "tgt"}},
        },
        root / "checkpoint.pt",
    )
    return root


def export(*args):
    from attn_only_plugin.cli import export_ctranslate2

    return export_ctranslate2.main([str(a) for a in args])


def run_script(name, *args, stdin=None, prelude=""):
    """attn-only-NAME ARGS (python -m attn_only_plugin.cli.NAME), optionally after `prelude` Python
    lines in the same process."""
    code = (
        f"{prelude}\nimport runpy, sys\nsys.argv = {[name] + [str(a) for a in args]!r}\n"
        f"runpy.run_module('attn_only_plugin.cli.{name}', run_name='__main__')"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=300,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
    )


def leftovers(folder: Path) -> list:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith((".tmp", ".old")))


def test_export_writes_the_folder_atomically_and_refuses_an_existing_one(ckpt, tmp_path):
    out = tmp_path / "ct2"
    export(ckpt / "checkpoint.pt", "--data", ckpt / "bin", "--out", out)
    assert {"model.bin", "config.json", "attn_only_plugin.json"} <= {p.name for p in out.iterdir()}
    assert leftovers(tmp_path) == []
    before = (out / "model.bin").read_bytes()
    with pytest.raises(PluginError, match=f"{out} already exists: pass --force to replace it"):
        export(ckpt / "checkpoint.pt", "--data", ckpt / "bin", "--out", out, "--quantization", "int8")
    assert (out / "model.bin").read_bytes() == before
    export(ckpt / "checkpoint.pt", "--data", ckpt / "bin", "--out", out, "--quantization", "int8", "--force")
    assert (out / "model.bin").read_bytes() != before and leftovers(tmp_path) == []
    assert attn_only_plugin.load_ctranslate2(out).info["quantization"] == "int8"


def test_force_never_deletes_an_input_or_a_folder_that_is_not_an_export(ckpt, tmp_path):
    """--out X --force deleted whatever X was: the input checkpoint (it became a
    CTranslate2 folder), the save dir, the data-bin, a folder above the checkpoint. Every case is one
    line now, checked before the model is read, and every input is left as it was."""
    from helpers import snapshot

    save = tmp_path / "run" / "checkpoints"
    save.mkdir(parents=True)
    (save / "checkpoint_last.pt").write_bytes((ckpt / "checkpoint.pt").read_bytes())
    data = tmp_path / "run" / "bin"
    shutil.copytree(ckpt / "bin", data)
    (tmp_path / "link").symlink_to(save)
    before = snapshot(tmp_path / "run")
    for out, problem in [
        (save / "checkpoint_last.pt", "is the input"),
        (save, "holds the input"),
        (data, "is the input"),
        (tmp_path / "run", "holds the input"),
        (tmp_path / "link", "holds the input"),
        (data / "ct2", "lies inside the input"),
    ]:
        with pytest.raises(PluginError, match=f"^--out {out} {problem} .*--force or not; give --out a path outside"):
            export(save / "checkpoint_last.pt", "--data", data, "--out", out, "--force")
    assert snapshot(tmp_path / "run") == before and leftovers(tmp_path) == [] and leftovers(save) == []
    other = tmp_path / "notes"  # not an input, but not an earlier export either
    other.mkdir()
    (other / "todo.txt").write_text("mine")
    with pytest.raises(PluginError, match="has no list of the files an export wrote .*replaces only what an export"):
        export(save / "checkpoint_last.pt", "--data", data, "--out", other, "--force")
    assert (other / "todo.txt").read_text() == "mine"
    earlier = tmp_path / "ct2"  # an earlier export, with a file of the user's put into it since
    export(save / "checkpoint_last.pt", "--data", data, "--out", earlier)
    (earlier / "todo.txt").write_text("mine")
    with pytest.raises(PluginError, match=r"holds files the export did not write \(todo.txt\), which --force"):
        export(save / "checkpoint_last.pt", "--data", data, "--out", earlier, "--force")
    assert (earlier / "todo.txt").read_text() == "mine" and (earlier / "model.bin").is_file()


def test_an_export_that_fails_while_writing_leaves_nothing(ckpt, tmp_path, monkeypatch):
    from ctranslate2.specs import TransformerSpec

    def save_half(self, folder):
        (Path(folder) / "model.bin").write_bytes(b"half")
        raise OSError(28, "No space left on device")

    export(ckpt / "checkpoint.pt", "--data", ckpt / "bin", "--out", tmp_path / "old")
    before = (tmp_path / "old" / "model.bin").read_bytes()
    monkeypatch.setattr(TransformerSpec, "save", save_half)
    for out, flags in ((tmp_path / "new", []), (tmp_path / "old", ["--force"])):
        with pytest.raises(OSError, match="No space left"):
            export(ckpt / "checkpoint.pt", "--data", ckpt / "bin", "--out", out, *flags)
    assert not (tmp_path / "new").exists() and leftovers(tmp_path) == []
    assert (tmp_path / "old" / "model.bin").read_bytes() == before  # --force replaces only once complete


def test_translate_a_file_stdin_and_fairseq_lines(ckpt, tmp_path):
    out = tmp_path / "ct2"
    export(ckpt / "checkpoint.pt", "--data", ckpt / "bin", "--out", out)
    mt = attn_only_plugin.load_ctranslate2(out, compute_type="float32")
    lines = ["1 2 3", "4 5 6 7 8", "9"]
    expected = mt.translate(lines)
    assert mt.translate(lines[0]) == expected[0] and all(isinstance(e, str) for e in expected)
    (tmp_path / "in.txt").write_text("".join(line + "\n" for line in lines))
    proc = run_script(
        "translate_ctranslate2",
        out,
        "--input",
        tmp_path / "in.txt",
        "--output",
        tmp_path / "hyp.txt",
        "--batch-size",
        2,
        "--compute-type",
        "float32",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "hyp.txt").read_text().splitlines() == expected
    assert "3/3" in proc.stderr and "sentences/s" in proc.stderr  # the progress bar and the speed
    proc = run_script(
        "translate_ctranslate2",
        out,
        "--fairseq-format",
        "--quiet",
        "--compute-type",
        "float32",
        stdin="".join(line + "\n" for line in lines),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    assert [r[0] for r in rows] == ["S-0", "H-0", "D-0", "S-1", "H-1", "D-1", "S-2", "H-2", "D-2"]
    assert [r[1] for r in rows if r[0].startswith("S-")] == lines
    assert [r[2] for r in rows if r[0].startswith("D-")] == expected
    assert all(float(r[1]) <= 0 for r in rows if r[0].startswith("H-"))  # log2 P / |Y|^alpha


def test_translation_output_follows_the_shared_rule(ckpt, tmp_path):
    """--output may not be the input, nor lie inside the model folder, --force or not; an
    existing --output is replaced only with --force."""
    model = tmp_path / "ct2"
    export(ckpt / "checkpoint.pt", "--data", ckpt / "bin", "--out", model)
    (tmp_path / "in.txt").write_text("1 2 3\n4 5\n")
    args = ["translate_ctranslate2", model, "--input", tmp_path / "in.txt", "--quiet"]
    for output, clash, problem in [
        (tmp_path / "in.txt", tmp_path / "in.txt", "is the input"),
        (model / "hyp.txt", model, "lies inside the input"),
    ]:
        one_line_error(
            run_script(*args, "--output", output, "--force"),
            f"--output {output} {problem} {clash}: writing it would destroy or change that input, --force or not",
        )
    assert (tmp_path / "in.txt").read_text() == "1 2 3\n4 5\n" and not (model / "hyp.txt").exists()
    (tmp_path / "hyp.txt").write_text("mine\n")
    one_line_error(
        run_script(*args, "--output", tmp_path / "hyp.txt"),
        f"--output {tmp_path / 'hyp.txt'} already exists: pass --force to replace it, or choose another --output",
    )
    assert (tmp_path / "hyp.txt").read_text() == "mine\n"
    proc = run_script(*args, "--output", tmp_path / "hyp.txt", "--force")
    assert proc.returncode == 0 and len((tmp_path / "hyp.txt").read_text().splitlines()) == 2, proc.stderr[-2000:]


# Ctrl-C: one line, exit 130, nothing half-written --------------------------------

# A real SIGINT, sent by the process to itself at a chosen point (a terminal's Ctrl-C reaches the
# same handler); SIGINT's handler is restored first, as a test run in the background inherits it ignored.
CTRL_C = (
    "import os, signal\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "def ctrl_c(): os.kill(os.getpid(), signal.SIGINT)\n"
)
INTERRUPTED = "error: interrupted (Ctrl-C): what was being written was not kept, earlier outputs are as they were"


def interrupted(proc):
    assert proc.returncode == 130 and "Traceback" not in proc.stderr, (proc.returncode, proc.stderr[-3000:])
    assert proc.stderr.strip().splitlines()[-1].startswith(INTERRUPTED), proc.stderr[-2000:]


def test_ctrl_c_in_the_export_is_one_line_and_leaves_no_folder(ckpt, tmp_path):
    """Ctrl-C once model.bin is in the temporary folder: no --out, no temporary folder, and with
    --force the earlier export is left as it was."""
    after_save = (
        CTRL_C + "import ctranslate2.specs.model_spec as ms\n_save = ms.ModelSpec.save\n"
        "def save(self, *a, **k):\n    _save(self, *a, **k)\n    ctrl_c()\n"
        "ms.ModelSpec.save = save\n"
    )
    args = ["export_ctranslate2", ckpt / "checkpoint.pt", "--data", ckpt / "bin", "--out", tmp_path / "ct2"]
    interrupted(run_script(*args, prelude=after_save))
    assert os.listdir(tmp_path) == []
    export(ckpt / "checkpoint.pt", "--data", ckpt / "bin", "--out", tmp_path / "ct2")
    before = {p.name: p.read_bytes() for p in (tmp_path / "ct2").iterdir()}
    interrupted(run_script(*args, "--force", prelude=after_save))
    assert os.listdir(tmp_path) == ["ct2"] and {p.name: p.read_bytes() for p in (tmp_path / "ct2").iterdir()} == before


def test_ctrl_c_in_translation_is_one_line_and_writes_no_output(ckpt, tmp_path):
    """Ctrl-C after the first batch of attn-only-translate-ctranslate2: one line, no --output."""
    model = tmp_path / "ct2"
    export(ckpt / "checkpoint.pt", "--data", ckpt / "bin", "--out", model)
    (tmp_path / "in.txt").write_text("1 2 3\n4 5\n6\n")
    after_first_batch = (
        CTRL_C + "import tqdm\n_update = tqdm.tqdm.update\n"
        "def update(self, n=1):\n    _update(self, n)\n    ctrl_c()\n"
        "tqdm.tqdm.update = update\n"
    )
    args = ["translate_ctranslate2", model, "--input", tmp_path / "in.txt", "--batch-size", 1]
    interrupted(run_script(*args, "--output", tmp_path / "hyp.txt", prelude=after_first_batch))
    assert sorted(os.listdir(tmp_path)) == ["ct2", "in.txt"]


# Bad input: one line, nothing written ------------------------------------------


def one_line_error(proc, text):
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith("INFO:")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], proc.stderr[-2000:]


def test_ctranslate2_missing(ckpt, tmp_path, monkeypatch):
    hide = "import sys; sys.modules['ctranslate2'] = None  # as if not installed"
    proc = run_script(
        "export_ctranslate2", ckpt / "checkpoint.pt", "--data", ckpt / "bin", "--out", tmp_path / "o", prelude=hide
    )
    one_line_error(
        proc,
        "ctranslate2 is not installed: run `bash scripts/install.sh` "
        f"(or pip install ctranslate2=={CTRANSLATE2_VERSION})",
    )
    assert list(tmp_path.iterdir()) == []
    proc = run_script("translate_ctranslate2", tmp_path / "o", stdin="1 2\n", prelude=hide)
    one_line_error(proc, "ctranslate2 is not installed")
    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    with pytest.raises(PluginError, match="ctranslate2 is not installed"):
        attn_only_plugin.load_ctranslate2(tmp_path)


def test_a_checkpoint_that_is_not_ours(ckpt, tmp_path):
    state = torch.load(ckpt / "checkpoint.pt", weights_only=True)
    state["cfg"]["model"] = {"_name": "transformer", "arch": "transformer"}
    torch.save(state, tmp_path / "builtin.pt")
    with pytest.raises(
        PluginError, match="holds a 'transformer' model, not attn_only_plugin's: .*ct2-fairseq-converter"
    ):
        export(tmp_path / "builtin.pt", "--data", ckpt / "bin", "--out", tmp_path / "o")
    torch.save(torch.zeros(3), tmp_path / "tensor.pt")
    with pytest.raises(PluginError, match="is not a fairseq checkpoint"):
        export(tmp_path / "tensor.pt", "--data", ckpt / "bin", "--out", tmp_path / "o")
    with pytest.raises(PluginError, match="no checkpoint .*nope.pt"):
        export(tmp_path / "nope.pt", "--data", ckpt / "bin", "--out", tmp_path / "o")
    assert not (tmp_path / "o").exists() and leftovers(tmp_path) == []


def test_dictionaries_missing_or_not_the_checkpoints(ckpt, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(PluginError, match=r"holds no fairseq-preprocess output \(no dict\.\*\.txt\)"):
        export(ckpt / "checkpoint.pt", "--data", tmp_path / "empty", "--out", tmp_path / "o")
    with pytest.raises(PluginError, match="data directory .* does not exist"):
        export(ckpt / "checkpoint.pt", "--data", tmp_path / "nope", "--out", tmp_path / "o")
    (tmp_path / "a_file").write_text("x")  # a file was reported as "does not exist"
    with pytest.raises(PluginError, match="data directory .*a_file is a file, not a folder: give the --destdir folder"):
        export(ckpt / "checkpoint.pt", "--data", tmp_path / "a_file", "--out", tmp_path / "o")
    bare = tmp_path / "bare"  # dictionaries only, and a checkpoint without its language pair
    shutil.copytree(ckpt / "bin", bare)
    state = torch.load(ckpt / "checkpoint.pt", weights_only=False)
    state["cfg"]["task"] = {"_name": "translation"}
    torch.save(state, tmp_path / "no_pair.pt")
    with pytest.raises(
        PluginError,
        match="cannot tell the language pair .*: the checkpoint records no language pair "
        "either: give the whole data-bin",
    ) as refused:
        export(tmp_path / "no_pair.pt", "--data", bare, "--out", tmp_path / "o")
    assert "--source-lang" not in str(refused.value)  # item 8: the export has no such flag
    (tmp_path / "other").mkdir()
    for lang in ("src", "tgt"):
        (tmp_path / "other" / f"dict.{lang}.txt").write_text("a 5\nb 3\n")
    with pytest.raises(
        PluginError,
        match="the source dictionary does not match the checkpoint: it has 6 entries but "
        "the checkpoint's encoder embeddings 14",
    ):
        export(ckpt / "checkpoint.pt", "--data", tmp_path / "other", "--out", tmp_path / "o")
    assert not (tmp_path / "o").exists() and leftovers(tmp_path) == []


def test_sentencepiece_model_that_does_not_match_the_vocabulary(ckpt, tmp_path):
    import sentencepiece as spm

    export(ckpt / "checkpoint.pt", "--data", ckpt / "bin", "--out", tmp_path / "ct2")
    for name, text in {
        "digits": "3 1 4 1 5 9 2 6 5 3 5 8 9 7 9 3 2 3 8 4 6 2 6 4 3 3 8 3 2 7 9 5 0 2 8 8\n",
        "words": "alpha beta gamma delta epsilon zeta theta kappa lambda\n",
    }.items():
        (tmp_path / f"{name}.txt").write_text(text * 20)
        spm.SentencePieceTrainer.train(
            input=str(tmp_path / f"{name}.txt"),
            model_prefix=str(tmp_path / name),
            vocab_size=20,
            model_type="bpe",
            bos_id=-1,
            eos_id=-1,
            pad_id=-1,
            unk_id=0,
            minloglevel=2,
        )
    with pytest.raises(
        PluginError,
        match=f"sentencepiece model {tmp_path / 'words.model'} does not match the source "
        f"vocabulary of {tmp_path / 'ct2'}: 10 of the dictionary's 10 entries",
    ):
        attn_only_plugin.load_ctranslate2(tmp_path / "ct2", spm_model=tmp_path / "words.model")
    with pytest.raises(PluginError, match="no sentencepiece model at"):
        attn_only_plugin.load_ctranslate2(tmp_path / "ct2", spm_model=tmp_path / "nope.model")
    with pytest.raises(PluginError, match="is not a sentencepiece model"):
        attn_only_plugin.load_ctranslate2(tmp_path / "ct2", spm_model=tmp_path / "words.txt")
    mt = attn_only_plugin.load_ctranslate2(tmp_path / "ct2", spm_model=tmp_path / "digits.model")
    assert isinstance(mt.translate("1 2 3"), str)  # the control: pieces that cover the vocabulary


def test_input_longer_than_the_position_table(ckpt, tmp_path):
    export(ckpt / "checkpoint.pt", "--data", ckpt / "bin", "--out", tmp_path / "ct2")
    mt = attn_only_plugin.load_ctranslate2(tmp_path / "ct2")
    fits, too_long = " ".join(["1"] * (POSITIONS - 1)), " ".join(["1"] * POSITIONS)
    assert isinstance(mt.translate(fits), str)
    with pytest.raises(
        PluginError,
        match=f"sentence 1 is {POSITIONS + 1} tokens long \\(with </s>\\), more than the "
        f"model's {POSITIONS} source positions: split or shorten it",
    ):
        mt.translate([fits, too_long])
    proc = run_script(
        "translate_ctranslate2",
        tmp_path / "ct2",
        "--output",
        tmp_path / "hyp.txt",
        "--batch-size",
        2,
        stdin=f"{fits}\n{fits}\n{too_long}\n",
    )
    one_line_error(proc, f"input line 3 is {POSITIONS + 1} tokens long (with </s>)")
    assert not (tmp_path / "hyp.txt").exists()
    proc = run_script("translate_ctranslate2", tmp_path / "ct2", stdin="1 2\n\n")
    one_line_error(proc, "input line 2 is empty or whitespace only")


def test_model_folder_device_and_compute_type(ckpt, tmp_path):
    with pytest.raises(PluginError, match="no CTranslate2 model in .*: give the --out folder of"):
        attn_only_plugin.load_ctranslate2(tmp_path)
    export(ckpt / "checkpoint.pt", "--data", ckpt / "bin", "--out", tmp_path / "ct2")
    os.remove(tmp_path / "ct2" / "attn_only_plugin.json")
    with pytest.raises(PluginError, match="is a CTranslate2 model but not one attn-only-export-ctranslate2 wrote"):
        attn_only_plugin.load_ctranslate2(tmp_path / "ct2")
    export(ckpt / "checkpoint.pt", "--data", ckpt / "bin", "--out", tmp_path / "ct2", "--force")
    import ctranslate2

    if ctranslate2.get_cuda_device_count() == 0:
        with pytest.raises(
            PluginError,
            match="device='cuda': this machine has no usable CUDA GPU: pass "
            "device='cpu' to load_ctranslate2 "
            "\\(attn-only-translate-ctranslate2: --device cpu\\)$",
        ):
            attn_only_plugin.load_ctranslate2(tmp_path / "ct2", device="cuda")
    with pytest.raises(PluginError, match="CTranslate2 cannot load .* compute_type='int3'"):
        attn_only_plugin.load_ctranslate2(tmp_path / "ct2", compute_type="int3")
    mt = attn_only_plugin.load_ctranslate2(tmp_path / "ct2")
    for bad, message in (
        (b"1 2", "sentences is bytes, not str"),
        ([""], "sentence 0 is empty"),
        ({"a": "1"}, "sentences is a dict"),
        (["1\u200b2"], "invisible character"),
    ):
        with pytest.raises(PluginError, match=message):
            mt.translate(bad)
    with pytest.raises(
        PluginError,
        match="takes beam, lenpen, max_len_a, max_len_b and batch_size, not sampling: use attn_only_plugin.load",
    ):
        mt.translate("1 2", sampling=True)


def test_ctranslate2_api_arguments_are_checked(ckpt, tmp_path):
    """batch_size 0 or negative and negative lengths were silently 1; threads and
    device unchecked. One line each, alike with load()'s translate()."""
    export(ckpt / "checkpoint.pt", "--data", ckpt / "bin", "--out", tmp_path / "ct2")
    for kwargs, message in [
        (dict(device="CPU"), "device='CPU': give 'cpu', 'cuda' or 'cuda:N'"),
        (dict(intra_threads=-1), "intra_threads=-1: give a whole number >= 0"),
        (dict(inter_threads=0), "inter_threads=0: give a whole number >= 1"),
    ]:
        with pytest.raises(PluginError, match=f"^{re.escape(message)}"):
            attn_only_plugin.load_ctranslate2(tmp_path / "ct2", **kwargs)
    mt = attn_only_plugin.load_ctranslate2(tmp_path / "ct2")
    for kwargs, message in [
        (dict(batch_size=0), "batch_size=0: give a whole number >= 1"),
        (dict(batch_size=-3), "batch_size=-3"),
        (dict(beam=0), "beam=0: give a whole number >= 1"),
        (dict(beam="4"), "beam='4'"),
        (dict(max_len_b=-5), "max_len_b=-5: give a whole number >= 0"),
    ]:
        with pytest.raises(PluginError, match=f"^{re.escape(message)}"):
            mt.translate("1 2", **kwargs)
    assert isinstance(mt.translate("1 2", batch_size=1), str)  # the control


def test_translate_checks_its_output_path_before_loading(tmp_path, cli):
    """An --output in a folder that does not exist was found only after the whole input was translated;
    now it is refused before the model is even looked at (here there is none)."""
    (tmp_path / "in.txt").write_text("1 2 3\n")
    out = tmp_path / "missing" / "out.txt"
    proc = cli("translate_ctranslate2", tmp_path / "no_model", "--input", tmp_path / "in.txt", "--output", out)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and last.startswith(f"error: the folder of {out} does not exist: create it first"), last


def test_a_damaged_export_folder_says_to_export_again(ckpt, tmp_path):
    """A JSON file of the export cut short ended in a JSONDecodeError '...; unexpected'; a model.bin cut
    short named CTranslate2's reason only. Both now say to export again."""
    out = tmp_path / "ct2"
    export(ckpt / "checkpoint.pt", "--data", ckpt / "bin", "--out", out)
    info = (out / "attn_only_plugin.json").read_text()
    (out / "attn_only_plugin.json").write_text(info[: len(info) // 2])
    with pytest.raises(PluginError, match=r"attn_only_plugin.json is damaged \(.*\): the export folder was cut short"):
        attn_only_plugin.load_ctranslate2(out)
    (out / "attn_only_plugin.json").write_text(info)
    model = (out / "model.bin").read_bytes()
    (out / "model.bin").write_bytes(model[: len(model) // 2])
    with pytest.raises(
        PluginError, match=r"CTranslate2 cannot load .*damaged or cut short since the export \(export it again"
    ):
        attn_only_plugin.load_ctranslate2(out)
