"""Nothing saved is lost to a mistaken command, with the real
fairseq CLIs on the digit-reversal task and the d_model 32 model of helpers.py:

- a save dir holding checkpoints but no checkpoint_last.pt, or an explicit --restore-file that does not
  exist or is a folder: refused in one line, every file of the save dir left byte-identical, and the
  commands the errors name really resume (save_dir.py);
- a second training into a save dir that one is writing to: refused in one line, checkpoints
  untouched; once the first is killed with SIGKILL, the same command trains (the lock is gone);
- Ctrl-C during fairseq-generate --results-path: one line `error: interrupted ...`, exit 1, no partial
  generate-<subset>.txt, an earlier one left as it was (results_file.py).
"""

import os
import signal
import subprocess
import time

import pytest

from helpers import (
    BIN,
    ENV,
    PLUGIN,
    ROOT,
    TIMEOUT,
    UPDATE_LOGGED,
    load,
    num_updates,
    one_line_error,
    reversal_data,
    snapshot,
    train_args,
)

LOCK = ".train.lock"


def fairseq(tool: str, *args):
    """Run a fairseq CLI to its end (one OpenMP thread); returns the CompletedProcess, failed or not."""
    return subprocess.run(
        [str(BIN / tool), *map(str, args)], capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=TIMEOUT
    )


def train(data, save_dir, max_update, *extra):
    """fairseq-train on the toy model, a checkpoint every 2 updates (checkpoint_1_2.pt, ...)."""
    return fairseq("fairseq-train", *train_args(data, save_dir, max_update, 0.0, "--save-interval-updates", 2, *extra))


def ctrl_c_able(cmd, **extra) -> subprocess.Popen:
    """Start cmd in its own process group, its output piped, as a terminal's foreground job: a
    terminal's Ctrl-C reaches a foreground process, whose SIGINT is never ignored; a test run as a
    background job of a non-interactive shell inherits SIGINT ignored, which Python then keeps."""
    return subprocess.Popen(
        [str(c) for c in cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=ENV,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        **extra,
    )


def checkpoints(save_dir) -> dict:
    """snapshot() of the save dir without the lock file (which a refused run may create)."""
    return {name: digest for name, digest in snapshot(save_dir).items() if name != LOCK}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """2000 training sentences (so that generating all of them takes seconds), valid and test 100."""
    return reversal_data(tmp_path_factory.mktemp("save_dir"), 2000)


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory):
    """A save dir after 4 updates: checkpoint_1_2.pt, checkpoint_1_4.pt, checkpoint_best.pt, checkpoint_last.pt."""
    save = tmp_path_factory.mktemp("trained") / "ckpt"
    proc = train(data, save, 4)
    assert proc.returncode == 0, proc.stderr[-3000:]
    written = set(os.listdir(save))
    assert {"checkpoint_1_2.pt", "checkpoint_1_4.pt", "checkpoint_best.pt", "checkpoint_last.pt"} <= written
    return save


def copy_of(trained, tmp_path, without_last: bool = False):
    """A copy of the trained save dir (optionally without checkpoint_last.pt), as a user's copy of a folder."""
    save = tmp_path / "ckpt"
    save.mkdir()
    for name in os.listdir(trained):
        if name.endswith(".pt") and not (without_last and name == "checkpoint_last.pt"):
            (save / name).write_bytes((trained / name).read_bytes())
    return save


def test_save_dir_without_checkpoint_last_is_refused(data, trained, tmp_path):
    """fairseq took this for a first launch, trained from update 1 and overwrote checkpoint_best.pt and
    the interval checkpoints. The --reset-* flags, which act on a checkpoint being loaded, do not make
    it start over; --no-save (nothing written) runs; an explicit --restore-file of one that is there
    resumes from it, as in fairseq."""
    save = copy_of(trained, tmp_path, without_last=True)
    before = checkpoints(save)
    for extra in [(), ("--reset-optimizer", "--reset-dataloader", "--reset-lr-scheduler", "--reset-meters")]:
        one_line_error(
            train(data, save, 8, *extra),
            f"{save} holds checkpoints (",
            "but no checkpoint_last.pt",
            "overwrite them",
            "to resume, pass --restore-file",
            f"or copy it to {save / 'checkpoint_last.pt'}",
            "to start over, give a new --save-dir",
        )
        assert checkpoints(save) == before
    (save / "checkpoint_last.pt").mkdir()  # fairseq: 'No existing checkpoint found', and trains from update 1
    one_line_error(train(data, save, 8), f"{save / 'checkpoint_last.pt'} is not a file: move it away")
    (save / "checkpoint_last.pt").rmdir()
    unsaved = train(data, save, 2, "--no-save")
    assert unsaved.returncode == 0 and checkpoints(save) == before, unsaved.stderr[-3000:]
    resumed = train(data, save, 6, "--restore-file", save / "checkpoint_1_4.pt")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Loaded checkpoint {save / 'checkpoint_1_4.pt'} (epoch 1 @ 4 updates)" in resumed.stdout
    assert num_updates(load(save / "checkpoint_last.pt")) == 6


def test_finetune_from_model_starts_only_a_save_dir_without_checkpoints(data, trained, tmp_path):
    """--finetune-from-model names the model to start from, as --continue-once does, and starts at
    update 0: in a save dir holding another run's checkpoints (but no checkpoint_last.pt) fairseq
    overwrote them (checkpoint_1_2.pt, checkpoint_best.pt). Refused there; in an empty one it runs."""
    other = copy_of(trained, tmp_path, without_last=True)
    before = checkpoints(other)
    one_line_error(
        train(data, other, 2, "--finetune-from-model", trained / "checkpoint_1_2.pt"),
        f"--finetune-from-model starts training again at update 0 from {trained / 'checkpoint_1_2.pt'}",
        f"would overwrite those in {other} (",
        "give it a new, empty --save-dir",
    )
    assert checkpoints(other) == before
    save = tmp_path / "tuned"
    tuned = train(data, save, 2, "--finetune-from-model", trained / "checkpoint_1_2.pt")
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    assert f"loading pretrained model from {trained / 'checkpoint_1_2.pt'}" in tuned.stdout
    assert num_updates(load(save / "checkpoint_last.pt")) == 2


def test_restore_file_that_is_not_a_file_is_refused(data, trained, tmp_path):
    """fairseq logged 'No existing checkpoint found', trained from update 1 and overwrote the save dir,
    checkpoint_last.pt included. A relative name is read from the current folder (fairseq's rule):
    the error points at the file of that name in --save-dir."""
    save = copy_of(trained, tmp_path)
    before = checkpoints(save)
    missing = tmp_path / "nope.pt"
    one_line_error(
        train(data, save, 8, "--restore-file", missing),
        f"--restore-file {missing} does not exist",
        "give an existing checkpoint",
    )
    one_line_error(
        train(data, save, 8, "--restore-file", "checkpoint_1_2.pt"),
        "--restore-file checkpoint_1_2.pt does not exist",
        "not from --save-dir",
        f"did you mean --restore-file {save / 'checkpoint_1_2.pt'}?",
    )
    one_line_error(
        train(data, save, 8, "--restore-file", save),
        f"--restore-file {save} is a folder, not a checkpoint",
        f"e.g. --restore-file {save / 'checkpoint_last.pt'}",
    )
    assert checkpoints(save) == before


def start_training(cmd):
    """Start fairseq-train, return it once it has logged an update after its first checkpoint (update 2)."""
    proc = subprocess.Popen(
        [str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=ENV
    )
    log = []
    for line in proc.stdout:
        log.append(line)
        logged = UPDATE_LOGGED.search(line)
        if logged and int(logged.group(1)) >= 3:
            return proc
    proc.wait(timeout=TIMEOUT)
    raise AssertionError(f"fairseq-train ended ({proc.returncode}) before update 3:\n" + "".join(log[-30:]))


def test_second_training_into_one_save_dir_is_refused_until_the_first_is_killed(data, tmp_path):
    """Both runs wrote the same checkpoint_last.pt.tmp and one died mid-run. The first run is paused
    (SIGSTOP) while the second tries, so that its checkpoints stand still; after a SIGKILL of the
    first, whose DataLoader worker lives on for a few seconds, the same command resumes at once."""
    save = tmp_path / "ckpt"
    cmd = [BIN / "fairseq-train", *train_args(data, save, 100000, 0.0, "--save-interval-updates", 2)]
    first = start_training(cmd)
    try:
        os.kill(first.pid, signal.SIGSTOP)
        before = checkpoints(save)
        assert "checkpoint_last.pt" in before
        one_line_error(
            train(data, save, 4),
            f"another training (pid {first.pid}) is writing into {save}",
            f"it holds the lock {save / LOCK}",
            "give this run another --save-dir",
        )
        assert checkpoints(save) == before
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=TIMEOUT)
        first.stdout.close()
    assert first.returncode == -signal.SIGKILL
    saved = num_updates(load(save / "checkpoint_last.pt"))
    again = train(data, save, saved + 2)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"@ {saved} updates)" in again.stdout and num_updates(load(save / "checkpoint_last.pt")) == saved + 2


def generate_args(data, checkpoint, results, subset):
    """fairseq-generate one sentence a batch (each a few milliseconds) into results/generate-SUBSET.txt."""
    return [
        data,
        "--user-dir",
        PLUGIN,
        "--path",
        checkpoint,
        "--cpu",
        "--beam",
        2,
        "--batch-size",
        1,
        "--max-len-a",
        0,
        "--max-len-b",
        5,
        "--gen-subset",
        subset,
        "--results-path",
        results,
    ]


def test_generate_results_file_is_written_whole(data, trained, tmp_path):
    """A run that finishes writes generate-test.txt with all 100 hypotheses and the score line, and
    leaves no incomplete folder beside it."""
    proc = fairseq("fairseq-generate", *generate_args(data, trained / "checkpoint_last.pt", tmp_path, "test"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert os.listdir(tmp_path) == ["generate-test.txt"]
    lines = (tmp_path / "generate-test.txt").read_text().splitlines()
    assert sum(line.startswith("H-") for line in lines) == 100
    assert any(line.startswith("Generate test with beam=2: BLEU") for line in lines)


def test_ctrl_c_during_generate_leaves_no_partial_results(data, trained, tmp_path):
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) once the first hypotheses are in
    the file, long before the 2000 sentences are done: fairseq left them as generate-train.txt."""
    earlier = tmp_path / "generate-train.txt"
    earlier.write_text("the output of an earlier, complete run\n")
    cmd = [BIN / "fairseq-generate", *generate_args(data, trained / "checkpoint_last.pt", tmp_path, "train")]
    proc = ctrl_c_able(cmd)
    deadline = time.monotonic() + TIMEOUT
    while proc.poll() is None and not any("\nH-" in out.read_text() for out in tmp_path.rglob("generate-train.txt")):
        assert time.monotonic() < deadline, "no hypothesis written"
        time.sleep(0.05)
    assert proc.poll() is None, f"fairseq-generate ended ({proc.returncode}) before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=TIMEOUT)
    result = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    assert proc.returncode == 1, (proc.returncode, stderr[-3000:])
    one_line_error(
        result,
        "error: interrupted: fairseq-generate stopped before the end of 'train'",
        f"{earlier} was not written (the earlier one is left as it was)",
        "run it again",
    )
    assert os.listdir(tmp_path) == ["generate-train.txt"]
    assert earlier.read_text() == "the output of an earlier, complete run\n"


def test_checkpoint_without_training_state_is_no_resume_point(data, trained, tmp_path):
    """An average written as SAVE/checkpoint_last.pt (or a conversion written over
    it) was taken as a resume point: "epoch 1 @ 0 updates", and every checkpoint of the run was
    overwritten. Refused in one line, as checkpoint_last.pt or as --restore-file, whatever wrote it (here
    an average copied over it: attn-only-average-checkpoints refuses the name itself). What the refusal advises,
    --reset-optimizer, restarted at update 0 over the run's checkpoints: refused in the run's save dir,
    it runs in a new, empty one, the run's checkpoints left byte-identical."""
    save = copy_of(trained, tmp_path)
    script = BIN / "attn-only-average-checkpoints"
    inputs = [save / "checkpoint_1_2.pt", save / "checkpoint_1_4.pt"]

    def average(output, *extra):
        return subprocess.run(
            [str(script), "--inputs", *map(str, inputs), "--output", str(output), *extra],
            capture_output=True,
            text=True,
            env=ENV,
            timeout=TIMEOUT,
        )

    one_line_error(
        average(save / "checkpoint_last.pt", "--force"),
        f"--output {save / 'checkpoint_last.pt'}: checkpoint_last.pt is a name fairseq-train resumes from",
        f"e.g. {save / 'checkpoint_avg.pt'}",
    )
    assert average(tmp_path / "avg.pt").returncode == 0
    (save / "checkpoint_last.pt").write_bytes((tmp_path / "avg.pt").read_bytes())  # a user's cp over it
    before = checkpoints(save)
    last = save / "checkpoint_last.pt"
    for extra in [(), ("--restore-file", last)]:
        one_line_error(
            train(data, save, 8, *extra),
            f"{last} holds no training state",
            "no resume point",
            f"overwrite the checkpoints in {save}",
            f"give a new, empty --save-dir with --finetune-from-model {last}",
            f"(or --restore-file {last} --reset-optimizer)",
            f"to resume the run, move {last} out of {save}",
        )
        assert checkpoints(save) == before
    one_line_error(
        train(data, save, 6, "--reset-optimizer"),
        f"--reset-optimizer starts training again at update 0 from {last}",
        f"would overwrite those in {save} (",
        "give it a new, empty --save-dir",
    )
    assert checkpoints(save) == before
    meant = train(data, tmp_path / "new", 6, "--restore-file", last, "--reset-optimizer")
    assert meant.returncode == 0, meant.stderr[-3000:]
    assert checkpoints(save) == before and num_updates(load(tmp_path / "new" / "checkpoint_last.pt")) == 6


@pytest.mark.parametrize(
    "flags, start",
    [(("--reset-optimizer",), "at update 0"), (("--reset-dataloader",), "at epoch 1")],
)
def test_a_training_that_starts_over_never_writes_over_a_runs_checkpoints(data, trained, tmp_path, flags, start):
    """--reset-optimizer (update 0) and --reset-dataloader (epoch 1) started the run again inside its own
    save dir, and the new checkpoints took the old ones' names (checkpoint_1_2.pt, checkpoint_best.pt,
    checkpoint_last.pt). Refused wherever the save dir holds checkpoints; the way the message names to
    start over runs in a new folder, and a rerun there resumes the way the message names."""
    save = copy_of(trained, tmp_path)
    before = checkpoints(save)
    for extra in [(), ("--restore-file", save / "checkpoint_1_2.pt")]:
        resume = "leave out " + flags[0] + (" and --restore-file" if extra else "")
        one_line_error(
            train(data, save, 6, *extra, *flags),
            f"{flags[0]} starts training again {start} from ",
            f"would overwrite those in {save} (",
            "give it a new, empty --save-dir",
            f"to resume the run in {save} instead, {resume}",
        )
        assert checkpoints(save) == before
    new = tmp_path / "new"
    started = train(data, new, 4, "--restore-file", save / "checkpoint_1_2.pt", *flags)
    assert started.returncode == 0, started.stderr[-3000:]
    again = train(data, new, 6, "--restore-file", save / "checkpoint_1_2.pt", *flags)  # the same, further
    one_line_error(again, f"would overwrite those in {new} (", "leave out " + flags[0] + " and --restore-file")
    resumed = train(data, new, 6)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert checkpoints(save) == before and num_updates(load(new / "checkpoint_last.pt")) == 6


def test_lock_that_cannot_be_taken_stops_the_training(data, tmp_path):
    """With SAVE/.train.lock a folder the lock was skipped without a word, and two
    trainings into one save dir rewrote each other's checkpoints. Now one line, nothing written."""
    save = tmp_path / "ckpt"
    (save / LOCK).mkdir(parents=True)
    one_line_error(
        train(data, save, 2),
        f"cannot take the training lock {save / LOCK}",
        "a second training",
        "would not be refused",
        "must be a plain file",
    )
    assert checkpoints(save) == {}


def test_ctrl_c_during_training_is_one_line(data, tmp_path):
    """Ctrl-C (SIGINT to the process group, as a terminal sends it, DataLoader
    worker included) in fairseq-train printed a traceback of tens of lines. Now one line, exit 130,
    and the same command resumes from the last checkpoint."""
    save = tmp_path / "ckpt"
    cmd = [str(c) for c in (BIN / "fairseq-train", *train_args(data, save, 100000, 0.0, "--save-interval-updates", 2))]
    proc = ctrl_c_able(cmd)
    deadline = time.monotonic() + TIMEOUT
    while proc.poll() is None and not (save / "checkpoint_last.pt").exists():
        assert time.monotonic() < deadline, "no checkpoint written"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 130, (proc.returncode, stderr[-3000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith("error: interrupted (Ctrl-C): "), stderr[-2000:]
    assert "fairseq-train resumes from its last checkpoint" in stderr


def test_ctrl_c_in_fairseq_interactive_is_one_line(data, trained):
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) while
    fairseq-interactive waits for input printed a traceback. Now one line, exit 130."""
    cmd = [BIN / "fairseq-interactive", data, "--user-dir", PLUGIN, "--path", trained / "checkpoint_last.pt", "--cpu"]
    proc = ctrl_c_able(cmd, stdin=subprocess.PIPE)
    seen = []  # stderr up to the prompt: the model is loaded and the input is being read
    while not seen or ("Type the input sentence" not in seen[-1] and seen[-1] != ""):
        seen.append(proc.stderr.readline())
    assert proc.poll() is None, "".join(seen)[-3000:]
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 130, (proc.returncode, stderr[-3000:])
    assert "Traceback" not in stderr and stderr.strip().splitlines()[-1].startswith("error: interrupted (Ctrl-C): ")


def test_results_path_that_cannot_take_the_file_is_refused_before_translating(data, trained, tmp_path):
    """--results-path DIR whose DIR/generate-test.txt is a folder (or a DIR that is a
    file) was found only after translating the whole set. One line before the model is loaded."""
    (tmp_path / "generate-test.txt").mkdir()
    proc = fairseq("fairseq-generate", *generate_args(data, trained / "checkpoint_last.pt", tmp_path, "test"))
    one_line_error(proc, f"{tmp_path / 'generate-test.txt'} is a folder, so the results cannot be written there")
    assert "H-0" not in proc.stdout and os.listdir(tmp_path) == ["generate-test.txt"]
    (tmp_path / "file").write_text("mine")
    proc = fairseq("fairseq-generate", *generate_args(data, trained / "checkpoint_last.pt", tmp_path / "file", "test"))
    one_line_error(proc, f"--results-path {tmp_path / 'file'} is a file, so the results cannot be written there")
    assert (tmp_path / "file").read_text() == "mine"
