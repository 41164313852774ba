"""Resuming after a kill: fairseq-train killed with SIGKILL at random updates and restarted with the
same command ends with bit-identical parameters to a run that was never interrupted, and a kill
while a checkpoint is written never leaves checkpoint_last.pt unreadable.

What makes the resumed run identical: dropout draws from torch's global generator, which fairseq
reseeds with seed + num_updates before every update (Trainer._set_seed), and our modules use no
other randomness; model, Adam moments, update count and the data iterator's position (epoch and
batches consumed, mid-epoch too) are in the checkpoint; the noam rate is a function of the update
count. What did not: the batches themselves, repaired by fairseq_fixes item 3 (tested below both on
its own and through a kill in epoch 2 or later).
"""

import os
import random
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch
from fairseq.data import FairseqDataset

from helpers import BIN, ENV, ROOT, TIMEOUT, UPDATE_LOGGED, load, num_updates, run, toy_data, train_args

MAX_UPDATE = 30
EPOCH = 13  # updates per epoch: 200 sentences in batches of 16


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return toy_data(tmp_path_factory.mktemp("resume"))


def command(data, save_dir):
    """Dropout on (residual 0.3, attention 0.1) so that the random state matters; a checkpoint
    every 5 updates, and one at the end of each epoch."""
    return [
        BIN / "fairseq-train",
        *train_args(data, save_dir, MAX_UPDATE, 0.3, "--attention-dropout", 0.1, "--save-interval-updates", 5),
    ]


def kill_points(seed=7):
    """Two kills, both mid-epoch: one in epoch 1 after the first checkpoint, one in a later epoch
    (where resuming used to change the batches)."""
    rng = random.Random(seed)
    return rng.randint(6, EPOCH - 1), rng.randint(EPOCH + 3, MAX_UPDATE - 4)


def train_until_killed(cmd, kill_at: int) -> str:
    """Start fairseq-train, SIGKILL it as soon as it logs update kill_at; returns its log."""
    proc = subprocess.Popen(
        [str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=ENV
    )
    log = []
    try:
        for line in proc.stdout:
            log.append(line)
            logged = UPDATE_LOGGED.search(line)
            if logged and int(logged.group(1)) >= kill_at:
                break
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=TIMEOUT)
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL, f"ended with {proc.returncode} before update {kill_at}:\n" + "".join(
        log[-30:]
    )
    return "".join(log)


def resumed_from(log: str, state: dict) -> bool:
    """fairseq's line for loading checkpoint_last.pt names the epoch and update count it resumes at."""
    epoch = state["extra_state"]["train_iterator"]["epoch"]
    return (
        re.search(rf"Loaded checkpoint \S+checkpoint_last\.pt \(epoch {epoch} @ {num_updates(state)} updates\)", log)
        is not None
    )


def assert_same_parameters(a: dict, b: dict):
    assert a.keys() == b.keys()
    differ = [name for name in a if not torch.equal(a[name], b[name])]
    assert not differ, f"{len(differ)} of {len(a)} tensors differ, e.g. {differ[:3]}"


def test_killed_twice_resumes_bit_identically(data, tmp_path):
    """Kill at two random updates, rerun the same command each time; the final model equals the
    uninterrupted run's exactly. Each kill must leave a loadable checkpoint_last.pt behind, each
    rerun must really resume from it, the second one mid-epoch in epoch >= 2."""
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    run(*command(data, straight))
    saved = None
    for kill_at in kill_points():
        log = train_until_killed(command(data, killed), kill_at)
        assert saved is None or resumed_from(log, saved), log[-3000:]
        saved = load(killed / "checkpoint_last.pt")
        assert 5 <= num_updates(saved) < kill_at
    position = saved["extra_state"]["train_iterator"]
    assert position["epoch"] >= 2 and position["iterations_in_epoch"] > 0, position
    final = run(*command(data, killed)).stdout
    assert resumed_from(final, saved), final[-3000:]
    expected, got = load(straight / "checkpoint_last.pt"), load(killed / "checkpoint_last.pt")
    assert num_updates(expected) == num_updates(got) == MAX_UPDATE
    assert_same_parameters(expected["model"], got["model"])
    run(*command(data, killed))  # a rerun of the finished command trains nothing (fairseq_fixes item 6)
    again = load(killed / "checkpoint_last.pt")
    assert num_updates(again) == MAX_UPDATE
    assert_same_parameters(got["model"], again["model"])


class _Sized(FairseqDataset):
    """Examples with only a few distinct lengths, ordered like LanguagePairDataset.ordered_indices:
    a random permutation (numpy's global generator), then a stable sort by length. Which sentences
    share a batch therefore depends on the numpy seed the batches are built under."""

    def __init__(self, n=64):
        self.sizes = np.arange(n) % 3 + 2

    def __len__(self):
        return len(self.sizes)

    def __getitem__(self, i):
        return i

    def num_tokens(self, i):
        return self.sizes[i]

    def ordered_indices(self):
        order = np.random.permutation(len(self))
        return order[np.argsort(self.sizes[order], kind="mergesort")]

    def collater(self, samples):
        return samples


def _epoch_batches(created_in: int, epoch: int):
    """Batches of `epoch` from an iterator that the task created in epoch `created_in` (a fresh run
    creates it in epoch 1 and goes on through the epochs; a resumed run creates it where it resumes)."""
    from fairseq.tasks import FairseqTask

    itr = FairseqTask(cfg=None).get_batch_iterator(_Sized(), max_sentences=4, seed=3, epoch=created_in)
    for _ in range(created_in, epoch):
        for _ in itr.next_epoch_itr(shuffle=True):
            pass
    assert itr.next_epoch_idx == epoch
    return [list(b) for b in itr.next_epoch_itr(shuffle=True)]


def test_batches_do_not_depend_on_the_epoch_training_started_in():
    """fairseq_fixes item 3: the batches of epoch 3 are the same whether the iterator was created in
    epoch 1 (uninterrupted run) or in epoch 3 (run resumed from a checkpoint of epoch 3)."""
    fresh, resumed = _epoch_batches(1, 3), _epoch_batches(3, 3)
    assert sorted(i for b in fresh for i in b) == list(range(64))
    assert fresh == resumed


CHILD = """
import resource, signal, sys
import torch
import attn_only_plugin
from fairseq import checkpoint_utils

operation, src, dst, limit, on_limit = sys.argv[1:]
signal.signal(signal.SIGXFSZ, signal.SIG_DFL if on_limit == "kill" else signal.SIG_IGN)
state = torch.load(src, weights_only=True)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(limit), int(limit)))
if operation == "copy":  # how save_checkpoint makes checkpoint_last.pt from checkpoint_E_U.pt
    checkpoint_utils.PathManager.copy(src, dst, overwrite=True)
else:  # how Trainer.save_checkpoint writes a checkpoint
    checkpoint_utils.torch_persistent_save(state, dst)
"""


def _write_interrupted(operation, src, dst, on_limit):
    """Run the write in a child process whose files may not grow past 64 KiB. on_limit "kill": the
    kernel kills it with SIGXFSZ in the middle of the write (as a kill -9 would); "error": the
    write fails with EFBIG and the process exits with the exception."""
    return subprocess.run(
        [sys.executable, "-c", CHILD, operation, str(src), str(dst), str(64 << 10), on_limit],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=ENV,
        timeout=TIMEOUT,
    )


@pytest.mark.parametrize("on_limit", ["kill", "error"])
@pytest.mark.parametrize("operation", ["copy", "save"])
def test_interrupted_checkpoint_write_keeps_previous_checkpoint(tmp_path, operation, on_limit):
    """checkpoint_last.pt is either the previous checkpoint or the new one, never a torn file: it
    still loads with torch.load(weights_only=True) after a write dies halfway. An exception leaves no
    temporary file; after a kill the next write replaces the leftover and none remains."""
    from fairseq import checkpoint_utils

    old, new = {"model": {"w": torch.zeros(10)}}, {"model": {"w": torch.ones(100_000)}}  # 400 kB > 64 KiB
    last, src = tmp_path / "checkpoint_last.pt", tmp_path / "checkpoint_1_10.pt"
    torch.save(old, last)
    torch.save(new, src)
    proc = _write_interrupted(operation, src, last, on_limit)
    assert proc.returncode == (-signal.SIGXFSZ if on_limit == "kill" else 1), proc.stderr[-3000:]
    assert torch.equal(load(last)["model"]["w"], old["model"]["w"])
    if on_limit == "error":
        assert sorted(os.listdir(tmp_path)) == [src.name, last.name]
    if operation == "copy":
        assert checkpoint_utils.PathManager.copy(str(src), str(last), overwrite=True)
    else:
        checkpoint_utils.torch_persistent_save(new, str(last))
    assert torch.equal(load(last)["model"]["w"], new["model"]["w"])
    assert sorted(os.listdir(tmp_path)) == [src.name, last.name]
    assert (last.stat().st_mode & 0o777) == 0o666 & ~_umask()


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask
