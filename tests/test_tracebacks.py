"""Tracebacks: bad input that used to end in one of fairseq's (or our) tracebacks ends in
one line naming the file or flag and what to do; an error nobody foresaw is one line saying to
rerun with ATTN_ONLY_TRACEBACK=1 (which shows the traceback) and report it.

Each category is run once through the real command line (fairseq-train/-generate/-interactive/
-hydra-train, attn-only-spm-prepare) on test_bad_input.py's tiny data-bin and 3-update model;
variants of one category that only differ in the bad file are checked in-process through the
same fairseq functions the commands call."""

import errno
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

from attn_only_tools.guards.errors import PluginError
from helpers import ARCH, BIN, PLUGIN, ROOT, command, generate, interactive, one_line_error, run, snapshot, train

pytestmark = pytest.mark.usefixtures("one_thread")

REBUILD = "rebuild the data-bin with fairseq-preprocess"
NO_GPU = "this machine has no usable CUDA GPU: drop --fp16/--bf16/--amp and pass --cpu"


def data_copy(setup, tmp_path, name="bin"):
    """A copy of the setup's data-bin to damage."""
    return shutil.copytree(setup / "bin", tmp_path / name)


def test_unexpected_error_is_one_line_with_the_traceback_behind_a_variable(tmp_path):
    """An exception nobody foresaw ends a process that imported the plugin in one line naming its
    type and message and saying how to get the traceback; ATTN_ONLY_TRACEBACK=1 shows it."""
    code = "import attn_only_plugin; print('before'); raise KeyError('boom')"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
    )
    assert proc.stdout == "before\n"
    one_line_error(
        proc, "KeyError: 'boom'", "unexpected: rerun with ATTN_ONLY_TRACEBACK=1 for the traceback and report it"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONWARNINGS="ignore", ATTN_ONLY_TRACEBACK="1"),
    )
    assert proc.returncode == 1 and "Traceback" in proc.stderr and proc.stderr.strip().endswith("KeyError: 'boom'")


def test_ctrl_c_that_cleanup_turns_into_another_error_is_still_an_interruption():
    """Ctrl-C inside a library's half-built state: its cleanup (a `finally`, a `with` exit) fails in
    turn, and the run ends with that AttributeError, the KeyboardInterrupt as its context. That is
    an interruption (exit 130, the interrupted line), not an unexpected error to report; the same
    AttributeError with no Ctrl-C behind it stays unexpected, and a PluginError raised for the Ctrl-C
    (saying what it left, as the guarded writers do) keeps its own line."""
    code = (
        "from attn_only_tools.guards.errors import install_excepthook; install_excepthook()\n"
        "try:\n    raise {}\nfinally:\n    None.invalidate_cache()\n"
    )
    stopped = subprocess.run([sys.executable, "-c", code.format("KeyboardInterrupt")], capture_output=True, text=True)
    assert stopped.returncode == 130 and stopped.stderr.startswith("error: interrupted (Ctrl-C)"), stopped.stderr
    assert len(stopped.stderr.strip().splitlines()) == 1
    failed = subprocess.run([sys.executable, "-c", code.format("KeyError('k')")], capture_output=True, text=True)
    one_line_error(failed, "AttributeError: 'NoneType' object has no attribute 'invalidate_cache'", "unexpected")
    said = code.replace("None.invalidate_cache()", "raise PluginError('interrupted: out.txt was not written')")
    said = said.replace("import install_excepthook", "import PluginError, install_excepthook")
    told = subprocess.run([sys.executable, "-c", said.format("KeyboardInterrupt")], capture_output=True, text=True)
    assert told.returncode == 1 and told.stderr == "error: interrupted: out.txt was not written\n", told.stderr


def test_a_reader_that_goes_away_ends_the_output_quietly():
    """`... | head -1`: the reader closes the pipe; the writer stops without an error line (exit 141,
    128 + SIGPIPE, as a shell reports a process ended by SIGPIPE)."""
    code = "import attn_only_plugin, sys; [print(i, flush=True) for i in range(10**6)]"
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
    )
    assert proc.stdout.readline() == b"0\n"
    proc.stdout.close()  # what `head -1` does after its line
    assert proc.wait(timeout=120) == 141
    stderr = proc.stderr.read().decode()
    assert "error" not in stderr and "Traceback" not in stderr, stderr


# dict.*.txt ------------------------------------------------------------------------------------


def test_malformed_or_duplicate_dictionary_line(setup, checkpoint, tmp_path):
    bad = data_copy(setup, tmp_path, "malformed")
    n = len((bad / "dict.src.txt").read_text().splitlines())
    with open(bad / "dict.src.txt", "a") as f:
        f.write("garbage\n")
    one_line_error(
        generate(setup, checkpoint, data=bad),
        f"dictionary {bad / 'dict.src.txt'} is malformed: line {n + 1} is not '<token> <count>': 'garbage'",
        REBUILD,
    )
    from fairseq.data import Dictionary

    twice = data_copy(setup, tmp_path, "twice")
    lines = (twice / "dict.tgt.txt").read_text().splitlines()
    (twice / "dict.tgt.txt").write_text("\n".join(lines + [lines[2]]) + "\n")
    word = lines[2].split()[0]
    with pytest.raises(PluginError, match=f"line {len(lines) + 1} lists '{word}' a second time; {REBUILD}"):
        Dictionary.load(str(twice / "dict.tgt.txt"))
    Dictionary.load(str(setup / "bin" / "dict.tgt.txt"))  # the control


# .bin/.idx ---------------------------------------------------------------------------------------


def test_empty_bin_names_the_file(setup, checkpoint, tmp_path):
    """fairseq's error was an AttributeError about _bin_buffer_mmap naming no file; fairseq-validate
    too, which without --task failed on a KeyError: None."""
    bad = data_copy(setup, tmp_path)
    (bad / "test.src-tgt.src.bin").write_bytes(b"")
    expected = (
        f"{bad / 'test.src-tgt.src.bin'} holds 0 bytes but {bad / 'test.src-tgt.src.idx'} describes 100 sentences",
        REBUILD,
    )
    one_line_error(generate(setup, checkpoint, data=bad), *expected)
    validate = (
        "fairseq-validate",
        bad,
        "--user-dir",
        PLUGIN,
        "--path",
        checkpoint,
        "--cpu",
        "--max-tokens",
        2000,
        "--valid-subset",
        "test",
    )
    one_line_error(run(*validate, "--task", "translation", ok=False), *expected)
    one_line_error(
        run(*validate, ok=False), "no --task given (fairseq-validate has no default task): add --task translation"
    )


@pytest.mark.parametrize(
    "damage, expected",
    [
        (
            lambda b: (b / "test.src-tgt.src.bin").write_bytes((b / "test.src-tgt.src.bin").read_bytes()[:100]),
            "test.src-tgt.src.bin holds 100 bytes but",
        ),
        (lambda b: (b / "test.src-tgt.src.idx").write_bytes(b""), "test.src-tgt.src.idx is empty"),
        (
            lambda b: (b / "test.src-tgt.src.idx").write_bytes((b / "test.src-tgt.src.idx").read_bytes()[:30]),
            "test.src-tgt.src.idx is truncated: 30 bytes for 100 sentences",
        ),
        (
            lambda b: shutil.copy(b / "valid.src-tgt.src.idx", b / "test.src-tgt.src.idx"),  # same count, other run
            "the .bin is truncated or its .idx comes from another fairseq-preprocess run",
        ),
        (
            lambda b: (b / "test.src-tgt.src.idx").write_bytes(
                (b / "test.src-tgt.src.idx").read_bytes()[:17]
                + b"\x63"
                + (b / "test.src-tgt.src.idx").read_bytes()[18:]
            ),
            "test.src-tgt.src.idx is corrupt (unknown element type 99)",
        ),
    ],
)
def test_truncated_empty_or_mismatched_index(setup, tmp_path, damage, expected):
    from fairseq.data import data_utils

    bad = data_copy(setup, tmp_path)
    assert len(data_utils.load_indexed_dataset(str(bad / "test.src-tgt.src"), None)) == 100  # the control
    damage(bad)
    with pytest.raises(PluginError, match=re.escape(expected)) as caught:
        data_utils.load_indexed_dataset(str(bad / "test.src-tgt.src"), None)
    assert REBUILD in str(caught.value)


def test_empty_split(tmp_path):
    from fairseq.data import indexed_dataset

    builder = indexed_dataset.make_builder(str(tmp_path / "empty.bin"), "mmap", vocab_size=100)
    builder.finalize(str(tmp_path / "empty.idx"))
    with pytest.raises(PluginError, match="empty.idx/.bin hold no sentences"):
        indexed_dataset.MMapIndexedDataset(str(tmp_path / "empty"))


def test_source_and_target_of_different_sizes(setup, checkpoint, tmp_path):
    bad = data_copy(setup, tmp_path)
    for ext in ("bin", "idx"):  # 300 training targets for 100 test sources
        shutil.copy(bad / f"train.src-tgt.tgt.{ext}", bad / f"test.src-tgt.tgt.{ext}")
    one_line_error(
        generate(setup, checkpoint, data=bad),
        f"source {bad / 'test.src-tgt.src'} holds 100 sentences but target {bad / 'test.src-tgt.tgt'} holds 300",
        "rerun fairseq-preprocess",
    )


# models and checkpoints ------------------------------------------------------------------------


def test_not_a_sentencepiece_model(setup, checkpoint, tmp_path):
    fake = tmp_path / "spm.model"
    fake.write_text("not a model\n")
    proc = interactive(setup, checkpoint, "1 2 3\n", "--bpe", "sentencepiece", "--sentencepiece-model", fake)
    one_line_error(proc, f"{fake} is not a sentencepiece model", "give --sentencepiece-model the spm.model")


def test_checkpoint_that_is_not_a_fairseq_checkpoint(setup, tmp_path):
    torch.save(torch.zeros(3), tmp_path / "tensor.pt")
    one_line_error(
        generate(setup, tmp_path / "tensor.pt"),
        f"{tmp_path / 'tensor.pt'} is not a fairseq checkpoint (a torch.Tensor)",
        "give a checkpoint that fairseq-train wrote",
    )
    from fairseq import checkpoint_utils

    torch.save([1, 2], tmp_path / "list.pt")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "nomodel.pt")
    with pytest.raises(PluginError, match=r"list.pt is not a fairseq checkpoint \(a list\)"):
        checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "list.pt"))
    with pytest.raises(
        PluginError,
        match=r"not a fairseq checkpoint \(a dict without a 'model' state dict \(its "
        r"keys: 'weights'\)\)",
    ):
        checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "nomodel.pt"))


# flags -------------------------------------------------------------------------------------------


def test_decoding_flags(setup, checkpoint):
    """--beam 0 (a ZeroDivisionError in our decoder), --max-tokens below the longest sentence (an
    assertion in fairseq's batching), --alignment-layer beyond the decoder (an IndexError)."""
    one_line_error(generate(setup, checkpoint, "--beam", 0), "--beam must be >= 1, got 0")
    proc = run(
        "fairseq-generate",
        setup / "bin",
        "--user-dir",
        PLUGIN,
        "--path",
        checkpoint,
        "--cpu",
        "--max-tokens",
        3,
        "--max-len-a",
        0,
        "--max-len-b",
        5,
        ok=False,
    )
    one_line_error(proc, "a sentence is longer than --max-tokens 3 tokens: raise --max-tokens")
    one_line_error(
        generate(setup, checkpoint, "--print-alignment", "--model-overrides", "{'alignment_layer': 5}"),
        "--alignment-layer must be a decoder layer, 0 to 1, or -1 for the last, got 5",
    )


def test_training_flags(setup, tmp_path):
    """--heads 0, --update-freq 0, --max-tokens below every sentence, --fp16 without a GPU, a save
    dir whose parent is a file (root writes through chmod, so that is how this one is made)."""
    one_line_error(train(setup / "bin", tmp_path / "a", *ARCH, "--heads", 0, ok=False), "--heads must be >= 1, got 0")
    one_line_error(
        train(setup / "bin", tmp_path / "b", *ARCH, "--update-freq", 0, ok=False),
        "--update-freq must be >= 1 (batches per update), got 0",
    )
    one_line_error(
        train(setup / "bin", tmp_path / "c", *ARCH, "--max-tokens", 3, ok=False),
        "no batch left to train on",
        "raise --max-tokens",
    )
    if not torch.cuda.is_available():
        one_line_error(train(setup / "bin", tmp_path / "d", *ARCH, "--fp16", ok=False), NO_GPU)
        one_line_error(
            train(setup / "bin", tmp_path / "e", *ARCH, "--distributed-world-size", 2, ok=False),
            "--distributed-world-size 2 asks fairseq to start 2 processes, one per GPU, and this machine "
            "has 0: on CPUs launch one process per rank with torchrun",
        )
    (tmp_path / "file").write_text("x")
    one_line_error(
        train(setup / "bin", tmp_path / "file" / "save", *ARCH, ok=False),
        f"--save-dir {tmp_path / 'file' / 'save'} cannot be written (Not a directory",
        "give --save-dir a folder this user can create and write",
    )
    assert snapshot(tmp_path) == {"file": snapshot(tmp_path)["file"]}  # no run wrote anything


def test_failure_of_a_spawned_process_is_read_from_its_traceback():
    """fairseq's distributed training on GPUs spawns a process per GPU; torch re-raises a child's
    failure in the parent as a ProcessRaisedException whose message is the child's traceback. (No
    GPU here to spawn on: the exception is made as torch makes it.)"""
    from torch.multiprocessing.spawn import ProcessRaisedException

    from attn_only_tools.guards.errors import one_line

    child = (
        "\n\n-- Process 1 terminated with the following error:\nTraceback (most recent call last):\n"
        '  File "fairseq_cli/train.py", line 1, in main\n{}\n'
    )
    plugin_error = "attn_only_tools.guards.errors.PluginError: --beam must be >= 1, got 0"
    assert one_line(ProcessRaisedException(child.format(plugin_error), 1, 99)) == "--beam must be >= 1, got 0"
    assert (
        one_line(ProcessRaisedException(child.format("ZeroDivisionError: float division by zero"), 1, 99))
        == "process 1 of the distributed run failed with ZeroDivisionError: float division by zero; unexpected: rerun "
        "with ATTN_ONLY_TRACEBACK=1 for the traceback and report it"
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is there")
def test_cuda_device_without_gpu_in_python_api(setup):
    import attn_only_plugin

    with pytest.raises(PluginError, match=f"device='cuda': {NO_GPU}"):
        attn_only_plugin.load(setup / "ckpt", data=setup / "bin", device="cuda")


def test_full_or_read_only_disk_named():
    """A full or read-only file system cannot be made here without root tricks: the reading of the
    OSError that fairseq raises for it (explain.py) is checked on the exception itself."""
    from attn_only_tools.guards.explain import explain

    assert (
        explain(OSError(errno.ENOSPC, "No space left on device", "/s/checkpoint_last.pt"))
        == "/s/checkpoint_last.pt: No space left on device: the disk is full: free space or write elsewhere"
    )
    assert explain(OSError(errno.EROFS, "Read-only file system", "/s")).endswith(
        "the file system is read-only: write elsewhere"
    )
    # a write to an open file names no path: what happened and what to do still say all (not "unexpected")
    assert explain(OSError(errno.ENOSPC, "No space left on device")) == (
        "writing failed: No space left on device: the disk is full: free space or write elsewhere"
    )
    assert "a file-size limit, see ulimit -f" in explain(OSError(errno.EFBIG, "File too large"))
    assert explain(OSError(errno.ENOENT, "No such file or directory")) is None  # no path: which file? unexpected
    written = RuntimeError("[enforce fail at inline_container.cc:603] . PytorchStreamWriter failed writing file data/0")
    assert explain(written).startswith("writing a file failed (PytorchStreamWriter failed writing file): the disk is")


def test_file_size_limit_is_one_line(tmp_path):
    """A file-size limit reached while a script writes (here attn-only-average-checkpoints's torch.save, with
    SIGXFSZ ignored as a shell's ulimit -f leaves it to the writer to see EFBIG) ended in '...; unexpected'."""
    import resource
    import signal

    from helpers import fake_checkpoint

    fake_checkpoint(tmp_path / "a.pt", 1.0)
    fake_checkpoint(tmp_path / "b.pt", 2.0)

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))

    proc = subprocess.run(
        [
            str(BIN / "attn-only-average-checkpoints"),
            "--inputs",
            tmp_path / "a.pt",
            tmp_path / "b.pt",
        ]
        + ["--output", tmp_path / "avg.pt"],
        capture_output=True,
        text=True,
        preexec_fn=limit,
        timeout=600,
    )
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and "unexpected" not in last and "file-size limit" in last, proc.stderr[-2000:]
    assert not (tmp_path / "avg.pt").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["a.pt", "b.pt"]


def test_user_dir_that_does_not_exist(setup, tmp_path):
    """fairseq imports --user-dir before the plugin can act: its own error, which names the path."""
    proc = run("fairseq-train", setup / "bin", "--user-dir", tmp_path / "nowhere", ok=False)
    assert proc.returncode != 0 and proc.stderr.strip().splitlines()[-1] == f"FileNotFoundError: {tmp_path / 'nowhere'}"


def test_misspelt_hydra_config_keys(setup, tmp_path):
    """A misspelt model key in the YAML is read once the plugin is loaded: one line. A misspelt
    top-level key is refused by hydra before it loads the plugin: hydra's message, naming the key."""
    yaml = (ROOT / "examples" / "hydra" / "transformer_base.yaml").read_text()
    assert "  d_model: 512" in yaml
    (tmp_path / "bad.yaml").write_text(yaml.replace("  d_model: 512", "  d_model: 512\n  alignment_layr: 1", 1))
    common = [
        f"task.data={setup / 'bin'}",
        f"common.user_dir={PLUGIN}",
        "common.cpu=true",
        f"checkpoint.save_dir={tmp_path / 'save'}",
        f"hydra.run.dir={tmp_path / 'hydra'}",
    ]
    proc = run("fairseq-hydra-train", "--config-dir", tmp_path, "--config-name", "bad", *common, ok=False)
    one_line_error(proc, "config: Key 'alignment_layr' not in 'TransformerConfig': check the key's spelling")
    proc = run(
        "fairseq-hydra-train",
        "--config-dir",
        ROOT / "examples" / "hydra",
        "--config-name",
        "transformer_base",
        *common,
        "optimizationn.max_update=3",
        ok=False,
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and "optimizationn" in proc.stderr


# text whose encoding hides characters -------------------------------------------------------------


def test_hidden_characters_in_interactive_input(setup, checkpoint, tmp_path):
    # a byte order mark that starts the input is an encoding mark (stripped, reliability.md row 105); inside text,
    # here the start of line 2, it is an invisible character
    proc = interactive(setup, checkpoint, "1 2 3\n\ufeff4 5\n")
    one_line_error(
        proc,
        "input line 2 holds an invisible character, U+FEFF ZERO WIDTH NO-BREAK SPACE at column 1",
        "remove it first",
    )
    with_bom = interactive(setup, checkpoint, "\ufeff1 2 3\n4 5\n")
    plain = interactive(setup, checkpoint, "1 2 3\n4 5\n")
    hyps = [[line for line in p.stdout.splitlines() if line.startswith(("S-", "H-"))] for p in (with_bom, plain)]
    assert with_bom.returncode == 0 and len(hyps[0]) == 4 and hyps[0] == hyps[1], with_bom.stderr[-2000:]
    from attn_only_plugin.guards.input_checks import read_input_lines

    (tmp_path / "clean").write_text("1 2\n3 4\n")
    assert list(read_input_lines(str(tmp_path / "clean"), 10)) == [["1 2", "3 4"]]  # the control
    (tmp_path / "zwsp").write_text("1 2\n3\u200b 4\n")
    with pytest.raises(
        PluginError, match="input line 2 holds an invisible character, U\\+200B ZERO WIDTH SPACE at column 2"
    ):
        list(read_input_lines(str(tmp_path / "zwsp"), 10))


def test_hidden_characters_in_python_api(setup):
    import attn_only_plugin

    mt = attn_only_plugin.load(setup / "ckpt", data=setup / "bin")
    assert isinstance(mt.translate("1 2 3"), str)  # the control
    with pytest.raises(PluginError, match="sentence 1 holds an invisible character, U\\+2060 WORD JOINER at column 2"):
        mt.translate(["1 2", "3\u2060 4"])


def test_hidden_characters_in_spm_prepare_corpus(tmp_path):
    raw = tmp_path / "raw"  # --out may not lie inside --data (atomic.check_output)
    raw.mkdir()
    for split in ("train", "valid", "test"):
        for lang in ("src", "tgt"):
            (raw / f"{split}.{lang}").write_text("a b c\nd e f\n")
    (raw / "valid.tgt").write_text("a b c\nd e\u00adf\n")
    (raw / "train.src").write_text("a b c\nd e\u200cf\n")  # checked first: a zero-width non-joiner (Persian) passes
    proc = subprocess.run(
        [
            str(a)
            for a in (
                BIN / "attn-only-spm-prepare",
                "--data",
                raw,
                "--src",
                "src",
                "--tgt",
                "tgt",
                "--vocab-size",
                100,
                "--out",
                tmp_path / "out",
            )
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    one_line_error(
        proc,
        f"{raw / 'valid.tgt'} line 2 holds an invisible character, U+00AD SOFT HYPHEN at column 4",
        "remove it first",
    )
    assert not (tmp_path / "out").exists()


def test_scoring_a_folder_is_one_line(tmp_path):
    """attn-only-sacrebleu-detok (and attn-only-bleu-compound-split, which reads through it) given a folder as a
    file: one line instead of an IsADirectoryError traceback."""
    (tmp_path / "hyp").write_text("a b\n")
    proc = subprocess.run(
        [str(BIN / "attn-only-sacrebleu-detok"), str(tmp_path / "hyp"), str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    one_line_error(proc, f"cannot read {tmp_path}: Is a directory: give a readable text file")


@pytest.mark.parametrize("script", ["average_checkpoints", "export_transformers", "translate_ctranslate2"])
def test_ctrl_c_during_the_imports_is_one_line(script, tmp_path):
    """Ctrl-C while a command still imports torch and fairseq (seconds) printed a 40-line traceback: the
    one-line hook is now installed before those imports (the first thing importing attn_only_plugin
    does), so its PluginErrors stay one line too (the control: a refusal after the imports)."""
    import signal
    import time

    proc = subprocess.Popen(
        [*command(script), "--help"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(1.0)  # the hook is in place within milliseconds; torch and fairseq take seconds more
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert "Traceback" not in err, err[-3000:]
    assert proc.returncode == 130 and err.strip().splitlines()[-1].startswith("error: interrupted (Ctrl-C)"), err
    (tmp_path / "in.txt").write_text("1 2\n")
    control = subprocess.run(  # a PluginError raised past main(): the package's hook shows it
        [
            str(BIN / "attn-only-translate-ctranslate2"),
            tmp_path / "none",
            "--input",
            tmp_path / "in.txt",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    last = control.stderr.strip().splitlines()[-1]
    assert control.returncode == 1 and last.startswith(f"error: no CTranslate2 model in {tmp_path / 'none'}"), last
