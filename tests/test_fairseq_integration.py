"""Checkpoints load with torch's safe unpickler: fairseq's types allowed, code refused."""

import argparse
import os

import numpy as np
import pytest
import torch

import attn_only_plugin  # noqa: F401  (installs the allow-list)


class Payload:
    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_fairseq_types_load(tmp_path):
    path = tmp_path / "legacy.pt"
    torch.save(
        {
            "args": argparse.Namespace(arch="transformer_base", lr=[0.1]),
            "extra_state": {"val_loss": np.float64(1.5), "n": np.int64(3)},
            "model": {"w": torch.ones(2)},
        },
        path,
    )
    state = torch.load(path, weights_only=True)
    assert state["args"].arch == "transformer_base" and state["extra_state"]["val_loss"] == 1.5


def test_code_in_checkpoint_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    payload = Payload()
    payload.marker = marker
    path = tmp_path / "evil.pt"
    torch.save({"model": {"w": torch.ones(1)}, "x": payload}, path)
    from fairseq import checkpoint_utils

    with pytest.raises(Exception, match="(?i)weights only load failed|unsupported global|refused to load untrusted"):
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert not marker.exists()


def test_final_partial_batch_is_kept():
    """fairseq-fixed drops the last batch when not a multiple of 8; the plugin restores it."""
    import numpy as np
    from fairseq.data import data_utils

    batches = data_utils.batch_by_size(np.arange(100), lambda i: 5, max_sentences=50, required_batch_size_multiple=8)
    assert sum(len(b) for b in batches) == 100


def test_prefetch_thread_is_stopped_before_exit():
    """A run stopped mid-epoch leaves fairseq's prefetch thread receiving batches from a DataLoader
    worker; the plugin's exit hook ends it so interpreter shutdown cannot abort the process."""
    import gc
    import multiprocessing
    import threading

    import torch.utils.data
    from fairseq.data import iterators

    from attn_only_plugin.fairseq_fixes import stop_prefetch_threads

    children_before = multiprocessing.active_children()
    dataset = [torch.full((3,), i) for i in range(200)]
    epochs = iterators.EpochBatchIterator(
        dataset=_ListDataset(dataset),
        collate_fn=torch.stack,
        batch_sampler=[[i, i + 1] for i in range(0, 200, 2)],
        num_workers=1,
        buffer_size=4,
    )
    itr = epochs.next_epoch_itr(shuffle=False)
    assert torch.equal(next(itr), torch.stack(dataset[:2]))  # mid-epoch, as after --max-update

    def consumers():
        return [t for t in threading.enumerate() if isinstance(t, iterators.BackgroundConsumer) and t.is_alive()]

    assert consumers(), "fairseq should have started its prefetch thread"
    assert stop_prefetch_threads(timeout=30) >= 1
    assert not consumers()
    # The DataLoader's iterator sits in a reference cycle: freed by the collector here, not at
    # the test worker's exit, where joining its loader process is interrupted.
    del itr, epochs
    gc.collect()
    assert not [p for p in multiprocessing.active_children() if p not in children_before]


class _ListDataset(torch.utils.data.Dataset):
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]
