"""Bad input: every case ends with one line `error: <problem>: <what to do>`, a non-zero
exit (or a PluginError in the Python API), no partial output file, and nothing saved before
overwritten. One module-scoped tiny model (d_model 32, 2 + 2 layers, 3 updates, learned positions
so that it also converts to fairseq's transformer) and its data-bin serve every case.

Cases covered elsewhere (docs/reliability.md names them): d_model not divisible by h and an
unknown --arch (test_end_to_end.py::test_bad_input_one_line_errors), an input longer than the
positions at fairseq-generate (test_end_to_end.py::test_input_longer_than_positions), averaging zero
checkpoints or checkpoints of different shapes/names and a truncated one
(tests/cli/test_average_checkpoints.py::test_refusals_are_one_line_and_leave_output_alone), a
treebank with unbalanced brackets (parsing/test_ptb.py, parsing/test_pipeline.py), a checkpoint
whose pickle would run code (test_untrusted_checkpoints.py)."""

import os
import re
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

import attn_only_plugin
from attn_only_tools import generate_log
from attn_only_tools.guards.errors import PluginError
from helpers import ARCH, BIN, PLUGIN, generate, interactive, one_line_error, run, snapshot, tool, train

pytestmark = pytest.mark.usefixtures("one_thread")


def load_script(name):
    """The module of the command NAME (attn_only_tools.cli.NAME or attn_only_plugin.cli.NAME)."""
    return tool(name)


# 1. missing or empty data directory -----------------------------------------------------------


def test_missing_or_empty_data_directory(setup, checkpoint, tmp_path):
    proc = train(tmp_path / "nowhere", tmp_path / "save", *ARCH, ok=False)
    one_line_error(proc, f"data directory {tmp_path / 'nowhere'} does not exist", "fairseq-preprocess")
    assert snapshot(tmp_path / "save") == {}
    (tmp_path / "empty").mkdir()
    proc = generate(setup, checkpoint, data=tmp_path / "empty")
    one_line_error(proc, "holds no fairseq-preprocess output (no dict.*.txt)", "run fairseq-preprocess")
    assert not proc.stdout.count("H-")


def test_data_directory_checks_in_process(setup, tmp_path):
    from attn_only_plugin.guards.input_checks import check_data_dir

    dicts_only = tmp_path / "deploy"
    dicts_only.mkdir()
    for name in ("dict.src.txt", "dict.tgt.txt"):
        shutil.copy(setup / "bin" / name, dicts_only)
    with pytest.raises(PluginError, match="cannot tell the language pair .* pass --source-lang and --target-lang"):
        check_data_dir(str(dicts_only))
    check_data_dir(str(dicts_only), "src", "tgt")  # fine with the pair named
    with pytest.raises(
        PluginError,
        match=r"no dict\.de\.txt in .*\(it has dict\.src\.txt, dict\.tgt\.txt\): "
        "check --source-lang",
    ):
        check_data_dir(str(dicts_only), "de", "tgt")
    with pytest.raises(PluginError, match="data directory .* does not exist"):
        attn_only_plugin.load(setup / "ckpt", data=tmp_path / "nowhere")
    with pytest.raises(PluginError, match="no dict"):  # data defaults to the checkpoint folder
        attn_only_plugin.load(setup / "ckpt")


def test_missing_checkpoint_and_split_name_the_fix(setup, checkpoint, tmp_path):
    one_line_error(
        generate(setup, tmp_path / "nope.pt"),
        f"Model file not found: {tmp_path / 'nope.pt'}",
        "give --path a checkpoint that exists",
    )
    from attn_only_tools.guards.errors import _find_plugin_error  # fairseq's message for a missing split

    err, fix = _find_plugin_error(FileNotFoundError(f"Dataset not found: test7 ({setup / 'bin'})"))
    assert err is not None and "--gen-subset" in fix


# 2. dictionaries that do not match the checkpoint ----------------------------------------------


def test_dictionaries_do_not_match_checkpoint(setup, checkpoint, tmp_path):
    other = tmp_path / "bin"
    shutil.copytree(setup / "bin", other)
    for name in ("dict.src.txt", "dict.tgt.txt"):  # 20 more entries: a dictionary of another corpus
        with open(other / name, "a") as f:
            f.writelines(f"extra{i} 1\n" for i in range(20))
    expected = "the source dictionary does not match the checkpoint"
    one_line_error(generate(setup, checkpoint, data=other), expected, "use the data directory (dict.*.txt)")
    with pytest.raises(PluginError, match=expected):
        attn_only_plugin.load(setup / "ckpt", data=other)


# 3. a checkpoint of another architecture ------------------------------------------------------


def _fairseq_layout(checkpoint, out):
    """Our checkpoint with fairseq `transformer` weights (and our config): another architecture."""
    from attn_only_plugin.export.fairseq import ours_to_fairseq

    state = torch.load(checkpoint, weights_only=True)
    state["model"] = ours_to_fairseq(state["model"], 1, 8, 8, 4)
    torch.save(state, out)
    return out


def test_checkpoint_of_another_architecture(setup, checkpoint, tmp_path, capsys):
    other = _fairseq_layout(checkpoint, tmp_path / "other.pt")
    one_line_error(
        generate(setup, other),
        "checkpoint does not fit this model: missing encoder.embed.tokens.weight",
        "another architecture? fairseq-train: use its own --arch",
        "fairseq-generate, -interactive, -validate and the API: give a checkpoint of this model",
    )
    # averaging it with ours: refused, the output path left alone
    out = tmp_path / "avg.pt"
    assert load_script("average_checkpoints").main(["--inputs", str(checkpoint), str(other), "--output", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"error: {other} does not match {checkpoint}: parameter") and "different architecture" in err
    assert not out.exists()
    # converting ours as if it were fairseq's, and fairseq's as if it were ours
    convert = load_script("convert_checkpoint")
    with pytest.raises(
        PluginError,
        match="model is 'attn_only_transformer', not fairseq's transformer: --to ours "
        "converts fairseq transformer checkpoints",
    ):
        convert.main(["--to", "ours", str(checkpoint), str(out)])
    assert convert.main(["--to", "fairseq", str(checkpoint), str(tmp_path / "fs.pt")]) is None
    with pytest.raises(PluginError, match="not attn_only_transformer: --to fairseq converts our checkpoints"):
        convert.main(["--to", "fairseq", str(tmp_path / "fs.pt"), str(out)])
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["fs.pt", "other.pt"]


# 4. truncated or corrupt checkpoint -----------------------------------------------------------


def test_truncated_or_corrupt_checkpoint(setup, checkpoint, tmp_path):
    (tmp_path / "cut").mkdir()
    truncated = tmp_path / "cut" / "checkpoint_last.pt"
    truncated.write_bytes(checkpoint.read_bytes()[:5000])
    one_line_error(
        generate(setup, truncated),
        f"cannot read checkpoint {truncated}: it is corrupt or truncated (its zip archive is incomplete)",
        "copy it again",
    )
    with pytest.raises(PluginError, match="corrupt or truncated"):
        attn_only_plugin.load(tmp_path / "cut", data=setup / "bin")
    garbage = tmp_path / "cut" / "garbage.pt"
    garbage.write_text("not a checkpoint\n")
    with pytest.raises(PluginError, match=r"corrupt or truncated \(not a valid pickle"):
        attn_only_plugin.load(tmp_path / "cut", checkpoint_file="garbage.pt", data=setup / "bin")
    with pytest.raises(PluginError, match="it is corrupt or truncated"):
        load_script("convert_checkpoint").main(["--to", "fairseq", str(truncated), str(tmp_path / "x.pt")])
    assert not (tmp_path / "x.pt").exists()


# 6. longer than the positions table: the Python API (the CLIs: test_end_to_end.py) ----------------


def test_python_api_sentence_longer_than_positions(setup):
    mt = attn_only_plugin.load(setup / "ckpt", data=setup / "bin")
    with pytest.raises(
        PluginError,
        match="sentence 1 is 1101 tokens long .*more than the model's 1024 source positions: split or shorten it",
    ):
        mt.translate(["1 2", " ".join(["3"] * 1100)])


def test_python_api_arguments_are_checked(setup):
    """Beam 0, -2, 2.5 or "4", a negative max_len_b, device="CPU" and unknown
    keyword arguments were passed on (ignored, or silently turned into something): one line each."""
    with pytest.raises(PluginError, match=r"^device='CPU': give 'cpu', 'cuda' or 'cuda:N' \(lower case\)$"):
        attn_only_plugin.load(setup / "ckpt", data=setup / "bin", device="CPU")
    with pytest.raises(PluginError, match="^load\\(\\) got unknown keyword argument beem: check the spelling"):
        attn_only_plugin.load(setup / "ckpt", data=setup / "bin", beem=5)
    mt = attn_only_plugin.load(setup / "ckpt", data=setup / "bin", max_source_positions=1024)  # a known override
    for kwargs, message in [
        (dict(beam=0), "beam=0: give a whole number >= 1"),
        (dict(beam=-2), "beam=-2"),
        (dict(beam=2.5), "beam=2.5: give a whole number"),
        (dict(beam="4"), "beam='4'"),
        (dict(beam=True), "beam=True"),
        (dict(max_len_b=-5), "max_len_b=-5: give a whole number >= 0"),
        (dict(lenpen=float("nan")), "lenpen=nan: give a number >= 0.0"),
        (dict(max_len_a=-1), "max_len_a=-1"),
        (dict(nbestt=2), "translate\\(\\) got unknown keyword argument nbestt"),
    ]:
        with pytest.raises(PluginError, match=f"^{message}"):
            mt.translate("1 2", **kwargs)
    assert isinstance(mt.translate("1 2", beam=2, max_len_b=3, nbest=1), str)  # the control, a fairseq option too


# 7. empty and whitespace-only input; 8. text that is not UTF-8 -------------------------------------


def test_interactive_empty_line(setup, checkpoint):
    proc = interactive(setup, checkpoint, "1 2 3\n   \n4 5\n")
    one_line_error(proc, "input line 2 is empty or whitespace only", "remove empty lines")
    # streaming: the lines before the bad one were translated and printed, none after it
    assert [line.split("\t")[0] for line in proc.stdout.splitlines() if line.startswith("H-")] == ["H-0"]


def test_interactive_not_utf8(setup, checkpoint, tmp_path):
    (tmp_path / "in.txt").write_bytes(b"1 2\n3 \xe9 4\n")
    proc = interactive(setup, checkpoint, None, "--input", tmp_path / "in.txt")
    one_line_error(proc, "input line 2 is not UTF-8 text (byte 0xe9 at byte 2)", "iconv")


def test_interactive_reader_in_process(tmp_path):
    from attn_only_plugin.guards.input_checks import read_input_lines

    (tmp_path / "ok.txt").write_text("a b\n  c  \n")
    assert list(read_input_lines(str(tmp_path / "ok.txt"), 1)) == [["a b"], ["c"]]
    (tmp_path / "empty.txt").write_text("a\n\n")
    with pytest.raises(PluginError, match="input line 2 is empty"):
        list(read_input_lines(str(tmp_path / "empty.txt"), 10))
    # a byte order mark that starts the input is an encoding mark (it was refused as
    # an invisible character); inside the text, or on a later line, it is still refused
    (tmp_path / "bom.txt").write_bytes("\ufeffa b\nc\n".encode("utf-8"))
    assert list(read_input_lines(str(tmp_path / "bom.txt"), 10)) == [["a b", "c"]]
    (tmp_path / "bom2.txt").write_bytes("a b\n\ufeffc\n".encode("utf-8"))
    with pytest.raises(PluginError, match="input line 2 holds an invisible character, U\\+FEFF"):
        list(read_input_lines(str(tmp_path / "bom2.txt"), 10))
    (tmp_path / "nul.txt").write_bytes(b"a\x00b\n")
    with pytest.raises(PluginError, match="input line 1 holds an invisible character, U\\+0000 NULL at column 2"):
        list(read_input_lines(str(tmp_path / "nul.txt"), 10))


def test_interactive_reader_text_stdin(monkeypatch):
    """A text sys.stdin (io.StringIO, as fairseq's tests and in-process callers of
    fairseq_cli.interactive give it; it has no .buffer) gives str lines: read as text, with the
    same one-line errors (a byte a surrogateescape decoder kept is reported as that byte)."""
    import io

    from attn_only_plugin.guards.input_checks import read_input_lines

    monkeypatch.setattr(sys, "stdin", io.StringIO("a b\n  c  \n"))
    assert list(read_input_lines("-", 10)) == [["a b", "c"]]
    for text, message in [
        ("1\n3 \udce9 4\n", "input line 2 is not UTF-8 text \\(byte 0xe9 at byte 2\\)"),
        ("1\n\ud800\n", "input line 2 is not valid text \\(a lone surrogate, U\\+D800"),
        ("1\n\u200b2\n", "input line 2 holds an invisible character, U\\+200B"),
        ("1\n \n", "input line 2 is empty"),
    ]:
        monkeypatch.setattr(sys, "stdin", io.StringIO(text))
        with pytest.raises(PluginError, match=message):
            list(read_input_lines("-", 10))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"1\n3 \xe9 4\n")))  # binary: read via .buffer
    with pytest.raises(PluginError, match="input line 2 is not UTF-8 text \\(byte 0xe9 at byte 2\\)"):
        list(read_input_lines("-", 10))


def test_python_api_empty_bytes_and_not_unicode(setup):
    mt = attn_only_plugin.load(setup / "ckpt", data=setup / "bin")
    for bad, message in [
        ("", "sentence 0 is empty or whitespace only: remove it"),
        ("   ", "sentence 0 is empty or whitespace only"),
        (["1 2", "\t"], "sentence 1 is empty or whitespace only"),
        (b"1 2", "sentences is bytes, not str: decode it first"),
        (["1 2", b"3"], "sentence 1 is bytes, not str"),
        (["1 2", None], "sentence 1 is NoneType, not str"),
        (b"1 \xe9".decode("utf-8", "surrogateescape"), "sentence 0 is not valid Unicode text"),
    ]:
        with pytest.raises(PluginError, match=message):
            mt.translate(bad)
    with pytest.raises(PluginError, match="the sentence is empty"):
        mt.attention("  ")
    assert isinstance(mt.translate("1 2 3"), str)  # the control


def test_python_api_batch_that_is_not_a_list_and_empty_target(setup):
    """translate({"a": ...}) used to translate the dict's keys, translate(123) ended in a TypeError
    traceback, attention(..., target="") was accepted."""
    mt = attn_only_plugin.load(setup / "ckpt", data=setup / "bin")
    for bad, message in [
        (
            {"1 2": "x"},
            "sentences is a dict, not a list: it would translate its keys; pass a list of "
            "strings, e.g. list(d.values())",
        ),
        ({"1 2", "3 4"}, "sentences is a set, whose order is arbitrary: pass a list of strings"),
        (123, "sentences is int, not str: pass a string or a list of strings"),
        (None, "sentences is NoneType, not str"),
    ]:
        with pytest.raises(PluginError, match=f"^{re.escape(message)}"):
            mt.translate(bad)
    for target, message in [
        ("", "the target is empty or whitespace only: remove it"),
        (" \t", "the target is empty or whitespace only"),
        (b"1", "the target is bytes, not str"),
        (12, "the target is int, not str"),
    ]:
        with pytest.raises(PluginError, match=f"^{re.escape(message)}"):
            mt.attention("1 2", target=target)
    assert mt.translate(("1 2", "3 4")) == mt.translate(["1 2", "3 4"])  # the controls: any sequence of strings
    assert mt.attention("1 2", target="2 1")["cross"].shape[-2:] == (3, 3)


def test_prepare_scripts_refuse_non_utf8(tmp_path):
    data = tmp_path / "raw"
    data.mkdir()
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            (data / f"{split}.{lang}").write_text("ein Satz\n" * 5, encoding="utf-8")
    (data / "valid.de").write_bytes(b"ein Satz\nGr\xfc\xdfe\n")  # latin-1
    proc = subprocess.run(
        [
            str(BIN / "attn-only-spm-prepare"),
            "--data",
            str(data),
            "--vocab-size",
            "100",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        f"error: {data / 'valid.de'} line 2 is not UTF-8 text (byte 0xfc at byte 2): convert the corpus to UTF-8 "
        "first, e.g. iconv -f latin1 -t utf-8"
    ]
    assert not (tmp_path / "out").exists()
    from attn_only_tools.parsing.ptb import read_trees

    (tmp_path / "wsj_0001.mrg").write_bytes(b"( (S (NN a)) )\n( (S (NN caf\xe9)) )\n")
    with pytest.raises(ValueError, match=r"wsj_0001.mrg: line 2: not UTF-8 text \(byte 0xe9\): convert"):
        read_trees(tmp_path / "wsj_0001.mrg")
    with pytest.raises(PluginError, match="not UTF-8 text .*convert it to UTF-8"):
        load_script("sacrebleu_detok").read_lines(data / "valid.de")


# 9. sentencepiece model missing or not matching the dictionary ----------------------------------


@pytest.fixture(scope="module")
def spm_models(setup):
    """A sentencepiece model of digits (fits the digit dictionary) and one of words (does not)."""
    import sentencepiece as spm

    out = setup / "spm"
    out.mkdir()
    texts = {
        "digits": "3 1 4 1 5 9 2 6 5 3 5 8 9 7 9 3 2 3 8 4 6 2 6 4 3 3 8 3 2 7 9 5 0 2 8 8\n" * 20,
        "words": "alpha beta gamma delta epsilon zeta theta kappa lambda\n" * 20,
    }
    for name, text in texts.items():
        (out / f"{name}.txt").write_text(text)
        spm.SentencePieceTrainer.train(
            input=str(out / f"{name}.txt"),
            model_prefix=str(out / name),
            vocab_size=20,
            model_type="bpe",
            bos_id=-1,
            eos_id=-1,
            pad_id=-1,
            unk_id=0,
            minloglevel=2,
        )
    return out


def test_sentencepiece_model_missing_or_not_matching(setup, checkpoint, spm_models, tmp_path):
    words = spm_models / "words.model"
    proc = interactive(setup, checkpoint, "1 2\n", "--bpe", "sentencepiece", "--sentencepiece-model", words)
    one_line_error(
        proc,
        f"sentencepiece model {words} does not match the source dictionary: 10 of the dictionary's 10 entries",
        "give the spm.model that prepared this data",
    )
    assert "H-" not in proc.stdout
    with pytest.raises(PluginError, match="does not match the source dictionary in"):
        attn_only_plugin.load(setup / "ckpt", data=setup / "bin", spm_model=words)
    with pytest.raises(PluginError, match="no sentencepiece model at"):
        attn_only_plugin.load(setup / "ckpt", data=setup / "bin", spm_model=tmp_path / "nope.model")
    from fairseq.data.encoders.sentencepiece_bpe import SentencepieceBPE  # --sentencepiece-model in the CLIs

    with pytest.raises(PluginError, match="no sentencepiece model at .*give --sentencepiece-model the spm.model"):
        SentencepieceBPE(
            SimpleNamespace(
                sentencepiece_model=str(tmp_path / "nope.model"),
                sentencepiece_enable_sampling=False,
                sentencepiece_alpha=None,
            )
        )
    mt = attn_only_plugin.load(setup / "ckpt", data=setup / "bin", spm_model=spm_models / "digits.model")
    assert isinstance(mt.translate("1 2 3"), str)  # the control: a model whose pieces cover the dictionary


# 11. warm-up <= 0, 12. label smoothing outside [0, 1) --------------------------------------------


def test_warmup_not_positive_leaves_checkpoints_alone(setup, tmp_path):
    save = tmp_path / "ckpt"
    shutil.copytree(setup / "ckpt", save)
    before = snapshot(save)
    one_line_error(
        train(setup / "bin", save, *ARCH, "--warmup-updates", -5, max_update=6, ok=False),
        "--warmup-updates must be > 0, got -5",
    )
    assert snapshot(save) == before


def test_label_smoothing_and_warmup_ranges_in_process():
    from attn_only_plugin.criterions.label_smoothed_ce import LabelSmoothedCrossEntropy
    from attn_only_plugin.lr_scheduler.noam import NoamSchedule
    from helpers import make_dictionary

    task = SimpleNamespace(target_dictionary=make_dictionary())
    for eps in (1.0, -0.1, 1.5):
        with pytest.raises(PluginError, match=r"--label-smoothing must be in \[0, 1\), got"):
            LabelSmoothedCrossEntropy(task, label_smoothing=eps)
    LabelSmoothedCrossEntropy(task, label_smoothing=0.0)
    for warmup in (0, -4000):
        with pytest.raises(PluginError, match=f"--warmup-updates must be > 0, got {warmup}"):
            NoamSchedule(SimpleNamespace(warmup_updates=warmup, lr_multiplier=1.0, d_model=32), optimizer=None)


def test_resume_with_another_optimizer_or_bad_betas(setup, tmp_path):
    """The setup's checkpoint was trained with paper_adam: resuming it with fairseq's adam is
    refused in one line naming --reset-optimizer, and leaves the checkpoints alone; bad betas too."""
    save = tmp_path / "ckpt"
    shutil.copytree(setup / "ckpt", save)
    before = snapshot(save)
    proc = run(
        "fairseq-train",
        setup / "bin",
        "--user-dir",
        PLUGIN,
        *ARCH,
        "--criterion",
        "paper_label_smoothed_ce",
        "--lr-scheduler",
        "noam",
        "--optimizer",
        "adam",
        "--max-tokens",
        2000,
        "--max-update",
        6,
        "--save-dir",
        save,
        "--cpu",
        ok=False,
    )
    one_line_error(proc, "Optimizer does not match", "--reset-optimizer")
    one_line_error(
        train(setup / "bin", save, *ARCH, "--adam-betas", "(0.9, 1.5)", max_update=6, ok=False),
        "--adam-betas must be two numbers in [0, 1)",
        "'(0.9, 1.5)'",
    )
    assert snapshot(save) == before


# 13. NaN/inf loss -------------------------------------------------------------------------------


def test_nan_loss_stops_naming_the_update(setup, tmp_path):
    """A learning rate of ~1e29 sends the weights to inf on the first resumed update and the loss
    to NaN on the next: fairseq raises FloatingPointError; we name the update and leave the
    checkpoints as they were (fairseq itself writes crash.pt)."""
    save = tmp_path / "ckpt"
    shutil.copytree(setup / "ckpt", save)
    before = snapshot(save)
    proc = train(setup / "bin", save, *ARCH, "--lr-multiplier", "1e30", max_update=10, ok=False)
    last = one_line_error(proc, "the loss or gradients are NaN/inf", "lower the learning rate")
    update = int(last.split("training stopped at update ")[1].split(":")[0])
    assert 4 <= update <= 10, last
    after = snapshot(save)
    assert {k: v for k, v in after.items() if k != "crash.pt"} == before


def test_checkpoint_with_non_finite_weights_is_refused_by_name(setup, checkpoint, tmp_path):
    """A checkpoint holding NaN (or inf) weights, e.g. an average of diverged ones: resuming from it,
    fine-tuning from it, decoding with it and the Python API each end in one line naming the file
    and the tensor (not 'lower --lr and run again', which would load the same weights); every
    checkpoint is left as it was."""
    save = tmp_path / "ckpt"
    shutil.copytree(setup / "ckpt", save)
    state = torch.load(save / "checkpoint_last.pt", weights_only=False)
    name = [k for k, v in state["model"].items() if v.is_floating_point()][-1]
    state["model"][name].view(-1)[:3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    torch.save(state, save / "checkpoint_last.pt")
    checkpoints = lambda: {k: v for k, v in snapshot(save).items() if k.endswith(".pt")}  # noqa: E731
    before = checkpoints()
    expected = (
        f"checkpoint {save / 'checkpoint_last.pt'} holds non-finite weights: {name} has 3 NaN/inf of its "
        f"{state['model'][name].numel()} values",
        "use an earlier checkpoint of that run (fairseq-train --restore-file checkpoint_E_U.pt",
    )
    one_line_error(train(setup / "bin", save, *ARCH, max_update=6, ok=False), *expected)
    one_line_error(
        train(
            setup / "bin",
            tmp_path / "new",
            *ARCH,
            "--finetune-from-model",
            save / "checkpoint_last.pt",
            max_update=6,
            ok=False,
        ),
        *expected,
    )
    one_line_error(generate(setup, save / "checkpoint_last.pt"), *expected)
    assert checkpoints() == before and not list((tmp_path / "new").glob("*.pt"))
    with pytest.raises(PluginError, match=re.escape(expected[0])):
        attn_only_plugin.load(save, data=setup / "bin")


def test_checkpoint_storing_d_k_0_is_refused_and_loads_with_the_override(setup, checkpoint, tmp_path):
    """--d-k 0 once meant d_model / h while the checkpoint stored 0 (now refused at fairseq-train,
    tests/models): such a checkpoint is refused in one line that names the override that loads it."""
    state = torch.load(checkpoint, weights_only=False)
    state["cfg"]["model"]["d_k"] = 0
    torch.save(state, tmp_path / "old.pt")
    one_line_error(
        generate(setup, tmp_path / "old.pt"),
        "--d-k must be >= 1, got 0: leave it out for d_model / h = 8",
        "load it with --model-overrides \"{'d_k': None}\"",
    )
    proc = generate(setup, tmp_path / "old.pt", "--model-overrides", "{'d_k': None}")
    assert proc.returncode == 0 and proc.stdout.count("H-") == 100, proc.stderr[-2000:]


def test_fp16_minimum_loss_scale_names_the_update():
    """fp16 overflow is skipped by fairseq's loss scaler; only when the scale falls below
    --min-loss-scale does it raise FloatingPointError (GPU only: checked here on a stand-in trainer)."""
    from attn_only_plugin.guards.input_checks import _checked_train_step

    def exploding(self, samples):
        raise FloatingPointError(
            "Minimum loss scale reached (0.0001). Your loss is probably exploding. Try "
            "lowering the learning rate, using gradient clipping or increasing the batch size."
        )

    trainer = SimpleNamespace(get_num_updates=lambda: 41, cfg=SimpleNamespace())
    with pytest.raises(
        PluginError,
        match=r"training stopped at update 42: Minimum loss scale reached \(0.0001\). "
        "Your loss is probably exploding. Try lowering the learning rate",
    ):
        _checked_train_step(exploding)(trainer, [])
    with pytest.raises(KeyError):  # anything else passes through untouched
        _checked_train_step(lambda self, samples: {}["x"])(trainer, [])


def test_nan_gradients_with_weights_gone_non_finite_name_the_weight():
    """When the weights themselves are no longer finite at the failing update (a step that overflowed
    them, then saved), the message names the weight and says to resume from before, not from the
    same weights; with finite weights it is the plain 'run again' (test_nan_loss_stops_naming_the_update)."""
    from attn_only_plugin.guards.input_checks import _checked_train_step

    def nan_gradients(self, samples):
        raise FloatingPointError("gradients are Nan/Inf")

    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 2))
    trainer = SimpleNamespace(
        get_num_updates=lambda: 6, model=model, cfg=SimpleNamespace(checkpoint=SimpleNamespace(save_dir="ckpt"))
    )
    with pytest.raises(PluginError) as finite:
        _checked_train_step(nan_gradients)(trainer, [])
    assert "and run again (it resumes from checkpoint_last.pt" in str(finite.value)
    with torch.no_grad():
        model[1].weight[0, :2] = float("inf")
    with pytest.raises(
        PluginError,
        match=re.escape(
            "training stopped at update 7: the loss or gradients are NaN/inf, and so is the weight 1.weight (2 of 6 "
            "values); lower the learning rate (--lr, --lr-multiplier), raise --warmup-updates or set --clip-norm, and "
            "run again from a checkpoint saved before the weights diverged (checkpoint_last.pt is left as it was; if "
            "it was saved after, fairseq-train refuses it by name: give --restore-file an earlier checkpoint_E_U.pt; "
            f"the failing state is in {os.path.join('ckpt', 'crash.pt')})"
        ),
    ):
        _checked_train_step(nan_gradients)(trainer, [])


# 15+. other natural mistakes ---------------------------------------------------------------------


def test_unknown_embedding_sharing_value(setup, tmp_path):
    proc = train(setup / "bin", tmp_path / "save", *ARCH, "--embedding-sharing", "both", ok=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        "argument --embedding-sharing: invalid choice: 'both' (choose from 'all', 'decoder', 'none')"
        in proc.stderr.strip().splitlines()[-1]
    )
    assert not (tmp_path / "save").exists()


def test_convert_output_in_missing_folder(checkpoint, tmp_path):
    with pytest.raises(PluginError, match="the folder of .*missing/out.pt does not exist: create it first"):
        load_script("convert_checkpoint").main(
            ["--to", "fairseq", str(checkpoint), str(tmp_path / "missing" / "out.pt")]
        )
    assert not (tmp_path / "missing").exists()


def test_constrain_trees_on_translation_data(setup, checkpoint):
    proc = generate(setup, checkpoint, "--task", "constituency_parsing", "--constrain-trees")
    one_line_error(proc, "--constrain-trees: the target dictionary has no XX", "attn-only-prepare-ptb")
    proc = generate(
        setup, checkpoint, "--task", "constituency_parsing", "--constrain-trees", "--sampling", "--nbest", 2
    )
    one_line_error(proc, "--constrain-trees works with plain beam search")


@pytest.mark.parametrize("task", ["translation_paper", "constituency_parsing"])
def test_gnmt_penalty_applies_with_print_alignment_or_is_refused(setup, checkpoint, task):
    """fairseq-generate --lenpen-style gnmt --print-alignment ranked and scored with fairseq's |Y|^alpha
    without a word. Now every hypothesis' score is its summed log-probability / ((5 + |Y|) / 6)^alpha and
    its alignment is printed; with --unnormalized or --score-reference, which would drop the penalty,
    one line."""
    from attn_only_plugin.tasks.translation_paper import gnmt_length_penalty

    gnmt = ["--task", task, "--lenpen", 0.6, "--lenpen-style", "gnmt"]
    proc = generate(setup, checkpoint, *gnmt, "--print-alignment")
    assert proc.returncode == 0, proc.stderr[-3000:]
    sentences = generate_log.parse(proc.stdout.splitlines())
    hypotheses = {i: s.score for i, s in sentences.items() if s.hypotheses}
    positional = {i: s.positional[0] for i, s in sentences.items() if s.positional}
    aligned = [line for line in proc.stdout.splitlines() if line.startswith("A-")]  # the reader skips A- lines
    assert hypotheses and len(aligned) == len(hypotheses) and positional.keys() == hypotheses.keys()
    for i, score in hypotheses.items():  # both printed in base 2, so their ratio is the penalty's
        lp = gnmt_length_penalty(len(positional[i]), 0.6)
        assert score == pytest.approx(sum(positional[i]) / lp, abs=1e-3), (i, score, positional[i])
    for flag in ("--unnormalized", "--score-reference"):
        one_line_error(generate(setup, checkpoint, *gnmt, flag), f"--lenpen-style gnmt has no effect with {flag}")


def test_check_output_rule(tmp_path):
    """atomic.check_output, the one rule every writing command uses: an output may not be,
    hold or lie inside an input, however the path is written, --force or not; an existing output
    is replaced only with force; inputs that do not exist are left to their own checks."""
    from attn_only_tools.guards.atomic import check_output
    from attn_only_tools.guards.errors import PluginError

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("input")
    (tmp_path / "alias").symlink_to(data)
    os.link(data / "a.txt", tmp_path / "hard.txt")
    for out, inputs, problem in [
        (data, [data], "is the input"),
        (data / "a.txt", [data / "a.txt"], "is the input"),
        (tmp_path / "hard.txt", [data / "a.txt"], "is the input"),
        (tmp_path / "alias" / "a.txt", [data / "a.txt"], "is the input"),
        (tmp_path, [data / "a.txt"], "holds the input"),
        (tmp_path / "alias" / "new", [data], "lies inside the input"),
    ]:
        for force in (False, True):
            with pytest.raises(PluginError, match=f"^--out {re.escape(str(out))} {problem} "):
                check_output(out, [tmp_path / "missing", *inputs], force)
    with pytest.raises(PluginError, match="already exists: pass --force to replace it, or choose another --out$"):
        check_output(tmp_path / "hard.txt", [tmp_path / "missing"])
    check_output(tmp_path / "hard.txt", [tmp_path / "missing"], force=True)
    (tmp_path / "empty").mkdir()  # an empty folder holds nothing to replace: no --force needed
    check_output(tmp_path / "empty", [data])
    (tmp_path / "empty" / "f").write_text("x")
    with pytest.raises(PluginError, match="already exists: pass --force"):
        check_output(tmp_path / "empty", [data])
    check_output(tmp_path / "data2", [data])  # a sibling whose name starts with the input's is not inside it


def test_atomic_output_names_the_users_path(tmp_path):
    """A path that is a folder failed at the end with the hidden temporary file's name
    ('.avg_outdir.XXXX.tmp: Is a directory'); now one line naming the user's path, before writing."""
    from attn_only_tools.guards.atomic import atomic_output

    (tmp_path / "avg_outdir").mkdir()
    with pytest.raises(PluginError, match=f"^{re.escape(str(tmp_path / 'avg_outdir'))} is a folder: give a file path"):
        with atomic_output(tmp_path / "avg_outdir") as f:
            f.write(b"x")
    with pytest.raises(PluginError, match="^the folder of .*nowhere/x.pt does not exist: create it first"):
        with atomic_output(tmp_path / "nowhere" / "x.pt") as f:
            f.write(b"x")
    assert os.listdir(tmp_path) == ["avg_outdir"] and os.listdir(tmp_path / "avg_outdir") == []
