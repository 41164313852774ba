"""Repairs to fairseq-fixed 0.12.3.1 that the plugin applies when imported.

1. fairseq-fixed's data_utils.batch_by_size drops the last batch whenever its size is not a
   multiple of --required-batch-size-multiple (default 8). Upstream fairseq 0.12.2 keeps it.
   Dropping it silently loses sentences: fairseq-generate on a 100-sentence test set
   translated only 96, and BLEU was computed on those. We restore upstream's behaviour.
2. fairseq prefetches batches in a daemon thread (iterators.BackgroundConsumer). When training
   stops mid-epoch (--max-update), that thread is still receiving batches from the DataLoader
   worker when the interpreter shuts down; Python 3.11 ends daemon threads that wake up during
   finalization with pthread_exit, and if the thread is inside torch's C++ code at that moment
   the process aborts ("terminate called without an active exception", exit -6) after training
   has finished. We stop those threads at exit, before finalization starts.
3. Resuming mid-run must continue exactly as an uninterrupted run would. FairseqTask.get_batch_iterator
   builds its batches once per iterator, ordering the examples under numpy_seed(seed + epoch) where
   epoch is the epoch the iterator is *created* in, and then reuses them for every later epoch. A fresh
   run creates it in epoch 1; a run resumed from a checkpoint of epoch 2 or later creates it in that
   epoch and so trains on differently composed batches (same lengths, other sentences) from then on.
   For datasets whose batches are reused across epochs we always build them as epoch 1 does, then
   move the iterator to the requested epoch: fresh runs are unchanged and resumed runs match them.
   (--update-ordered-indices-seed without --update-epoch-batch-itr still makes the seed depend on the
   start epoch; that combination cannot resume bit-identically.)
4. A checkpoint write killed halfway must never leave a truncated checkpoint_last.pt. fairseq writes the
   first checkpoint file to NAME.tmp and renames it (atomic, but an exception leaves NAME.tmp behind),
   then makes checkpoint_last.pt, checkpoint_best.pt, ... with PathManager.copy, which is shutil.copyfile:
   it truncates the destination and rewrites it in place, so a kill in between leaves a file that no
   longer loads and resuming fails. Both now write NAME.tmp in the destination's folder, fsync it and
   os.replace it over NAME; on an exception NAME.tmp is removed (after a kill, the next write reuses it).
   fairseq's retry loop (three torch.save calls into the same, already half-written file) is dropped.
5. torchrun on a machine without CUDA. fairseq's infer_init_method ignores torchrun's environment unless
   --distributed-world-size > 1 was also given (its default is the number of GPUs, so on a CPU every
   process would silently train alone and all of them would write the same --save-dir), and then sets
   device_id = RANK % torch.cuda.device_count(): ZeroDivisionError. Without CUDA we take world size and
   rank from torchrun's environment (init method env://, one process per rank, device_id 0, unused
   on CPU). With CUDA, and for every other launch, fairseq's own code runs unchanged.
6. Rerunning a finished command must not change its model. fairseq-train checks --max-update only after
   an update, so a run resumed from a checkpoint already at --max-update trains one more update and
   saves it: every rerun of a recipe (which resumes from checkpoint_last.pt) moved the model. Such a
   run now stops before training (fairseq-train and fairseq-hydra-train).
7. A save dir is never overwritten by mistake: one training per --save-dir (a lock the OS releases
   when the run ends, even by SIGKILL), an explicit --restore-file that is not a file is an error, and
   a save dir holding checkpoints but no checkpoint_last.pt is refused instead of trained over from
   update 1 (save_dir.py).
8. fairseq-generate --results-path writes generate-<subset>.txt whole or not at all, and Ctrl-C ends
   in one line (results_file.py).
9. --model-overrides naming a field of our model that a checkpoint's stored config lacks (it was
   saved before the field existed, e.g. encoder_layers_to_keep) was silently ignored: fairseq's
   overwrite_args_by_name sets only keys already present. Such a field of our model is now added.
10. --diverse-beam-groups ended in IndexError for any model: SequenceGenerator hands the search the
   sentences' dataset ids (sample["id"]) as original_batch_idxs, and DiverseBeamSearch indexes its
   per-sentence overlap table, one row per sentence of the batch, with them; an id past the batch
   size is out of bounds. The search now gets each sentence's row in the batch of its first step.
   (Prefix-constrained search uses the ids as ids, so SequenceGenerator itself is left alone.)
11. --no-repeat-ngram-size had no effect without fairseq's CUDA extension (on every CPU, and on GPUs
   without the built extension): the Python fallback takes the n - 1 tokens to match from the end
   of the whole token buffer, which holds padding past the current step, so it never matches. It
   now gets the tokens up to the current step, as the CUDA kernel reads them.
12. fairseq-train --bf16 ended in "'NoneType' object has no attribute 'xla_device'" on every GPU and
   CPU: fairseq's command line makes --bf16 imply --tpu, and a TPU needs torch_xla. Unless --tpu is
   given too, --bf16 now trains on the GPU (or with --cpu on the CPU): the model in bfloat16, fp32
   master weights in fairseq's FP16Optimizer, no loss scaling, as fairseq's trainer does for --bf16.
13. A distributed run's processes exit without destroying their process group: torch asks each process
   to call destroy_process_group() before it exits, fairseq never does, and a group left to the
   interpreter's teardown ends its C++ threads after Python has stopped (a process that aborts there
   fails a finished run). distributed_init now registers that call at exit: the group's threads end
   while Python still runs.
"""

import atexit
import functools
import inspect
import os
import queue
import shutil
import sys
import threading
import time

import numpy as np

from .guards.wrap import record, wrap_once


def batch_by_size(
    indices,
    num_tokens_fn,
    num_tokens_vec=None,
    max_tokens=None,
    max_sentences=None,
    required_batch_size_multiple=1,
    fixed_shapes=None,
):
    """fairseq's batch_by_size, keeping the final partial batch (as upstream 0.12.2 does)."""
    from fairseq.data import data_utils_fast as fast

    if fixed_shapes is not None:
        return _original(
            indices,
            num_tokens_fn,
            num_tokens_vec,
            max_tokens,
            max_sentences,
            required_batch_size_multiple,
            fixed_shapes,
        )
    max_tokens = max_tokens if max_tokens is not None else -1
    max_sentences = max_sentences if max_sentences is not None else -1
    if not isinstance(indices, np.ndarray):
        indices = np.fromiter(indices, dtype=np.int64, count=-1)
    if num_tokens_vec is None:
        return fast.batch_by_size_fn(indices, num_tokens_fn, max_tokens, max_sentences, required_batch_size_multiple)
    if not isinstance(num_tokens_vec, np.ndarray):
        num_tokens_vec = np.fromiter(num_tokens_vec, dtype=np.int64, count=-1)
    return fast.batch_by_size_vec(indices, num_tokens_vec, max_tokens, max_sentences, required_batch_size_multiple)


_original = None


def stop_prefetch_threads(timeout: float = 30.0) -> int:
    """Let every live fairseq prefetch thread finish the batch it is on, then end it.

    The thread checks ``count >= _max_len`` after each put, so lowering ``_max_len`` makes it leave
    its loop at the next batch; we drain its queue so that put (and the final sentinel) never block.
    Returns how many threads were stopped."""
    from fairseq.data.iterators import BackgroundConsumer

    stopped = 0
    for thread in threading.enumerate():
        if not isinstance(thread, BackgroundConsumer) or not thread.is_alive():
            continue
        thread._max_len = 0
        deadline = time.monotonic() + timeout
        while thread.is_alive() and time.monotonic() < deadline:
            try:
                thread._queue.get(timeout=0.05)
            except queue.Empty:
                pass
        stopped += not thread.is_alive()
    return stopped


def _epoch_independent_batches(get_batch_iterator):
    """Wrap FairseqTask.get_batch_iterator so that reusable batches never depend on the start epoch (3)."""
    signature = inspect.signature(get_batch_iterator)

    @functools.wraps(get_batch_iterator)
    def wrapper(self, *args, **kwargs):
        call = signature.bind(self, *args, **kwargs)
        call.apply_defaults()
        given = call.arguments
        epoch, dataset = given["epoch"], given["dataset"]
        reusable = (
            not given["disable_iterator_cache"]
            and not given["update_epoch_batch_itr"]
            and self.can_reuse_epoch_itr(dataset)
            and not getattr(self.cfg, "rebuild_batches", False)
        )
        if epoch <= 1 or not reusable or dataset in getattr(self, "dataset_to_epoch_iter", {}):
            return get_batch_iterator(*call.args, **call.kwargs)
        given["epoch"] = 1  # fairseq logs "creating new batches for epoch 1": the batches a fresh run has
        itr = get_batch_iterator(*call.args, **call.kwargs)
        dataset.set_epoch(epoch)
        itr.epoch = epoch
        return itr

    return wrapper


def _local(path) -> bool:
    from fairseq.file_io import PathManager

    return not PathManager.path_requires_pathmanager(str(path))


def write_atomic(path, write) -> None:
    """Call write(file) on PATH.tmp in PATH's folder, fsync it, then os.replace it over PATH (4).

    PATH is either the old file or the complete new one at every moment (also after a crash of the
    machine: the data are on disk before the rename); the temporary file is removed if write raises.
    PATH.tmp is a fixed name, so a file left by a kill is overwritten by the next write, not piled up."""
    from attn_only_tools.guards.atomic import atomic_output

    path = os.fspath(path)
    with atomic_output(path, "wb", tmp_path=path + ".tmp") as f:
        write(f)


def _atomic_copy(copy):
    """PathManager.copy for local files through write_atomic; other paths (iopath handlers) as before."""

    def atomic_copy(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
        if not (_local(src_path) and _local(dst_path)):
            return copy(src_path, dst_path, overwrite=overwrite)
        if not overwrite and os.path.exists(dst_path):
            return False
        with open(src_path, "rb") as src:
            write_atomic(dst_path, lambda dst: shutil.copyfileobj(src, dst, 16 << 20))
        return True

    return staticmethod(atomic_copy)


def _atomic_persistent_save(save):
    """checkpoint_utils.torch_persistent_save for local files through write_atomic (4)."""

    @functools.wraps(save)
    def torch_persistent_save(obj, filename, async_write: bool = False):
        if async_write or not _local(filename):
            return save(obj, filename, async_write=async_write)
        import torch

        write_atomic(filename, lambda f: torch.save(obj, f))

    return torch_persistent_save


_TORCHRUN_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")


def _torchrun_without_cuda(infer_init_method):
    """Wrap distributed.utils.infer_init_method so that torchrun works on CPU-only machines (5)."""

    @functools.wraps(infer_init_method)
    def wrapper(cfg, force_distributed=False):
        import torch

        launched = all(key in os.environ for key in _TORCHRUN_ENV) and int(os.environ["WORLD_SIZE"]) > 1
        if not launched or cfg.distributed_init_method is not None or torch.cuda.device_count() > 0:
            return infer_init_method(cfg, force_distributed)
        cfg.distributed_init_method = "env://"
        cfg.distributed_world_size = int(os.environ["WORLD_SIZE"])
        cfg.distributed_rank = int(os.environ["RANK"])
        cfg.device_id = 0
        cfg.distributed_no_spawn = True

    return wrapper


def _destroy_group_at_exit(distributed_init):
    """Wrap distributed.utils.distributed_init: the process group it makes is destroyed at exit (13)."""

    @functools.wraps(distributed_init)
    def wrapper(cfg):
        rank = distributed_init(cfg)
        atexit.register(destroy_process_group)
        return rank

    return wrapper


def destroy_process_group() -> bool:
    """torch.distributed.destroy_process_group() if a group is up; whether one was."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return False
    dist.destroy_process_group()
    return True


def _stop_at_max_update(train):
    """Wrap fairseq_cli.train.train (one epoch): nothing to do once --max-update is reached (6)."""

    @functools.wraps(train)
    def wrapper(cfg, trainer, task, epoch_itr):
        max_update = cfg.optimization.max_update
        if max_update and trainer.get_num_updates() >= max_update:
            return [None], True  # (valid_losses, should_stop), as train returns them
        return train(cfg, trainer, task, epoch_itr)

    return wrapper


def _bf16_without_tpu(call_main):
    """Wrap distributed_utils.call_main: --bf16 without an explicit --tpu runs where --tpu would not (12)."""

    @functools.wraps(call_main)
    def wrapper(cfg, main, **kwargs):
        common = getattr(cfg, "common", None)
        if common is not None and common.bf16 and common.tpu and "--tpu" not in sys.argv:
            from omegaconf import open_dict

            with open_dict(cfg):
                cfg.common.tpu = False
        return call_main(cfg, main, **kwargs)

    return wrapper


def _new_model_fields(overwrite_args_by_name):
    """Wrap checkpoint_utils.overwrite_args_by_name: overrides of our model's fields reach a stored
    config that lacks them (9)."""

    @functools.wraps(overwrite_args_by_name)
    def wrapper(cfg, overrides):
        from dataclasses import fields

        from fairseq.models import ARCH_MODEL_NAME_REGISTRY
        from omegaconf import DictConfig, open_dict

        from .models.transformer import TransformerConfig

        model = cfg.get("model") if isinstance(cfg, DictConfig) else None
        name = model.get("_name") if isinstance(model, DictConfig) else None
        if overrides and ARCH_MODEL_NAME_REGISTRY.get(name, name) == "attn_only_transformer":
            ours = {f.name for f in fields(TransformerConfig)}
            with open_dict(model):
                for key in ours & set(overrides) - set(model.keys()):
                    model[key] = overrides[key]
        return overwrite_args_by_name(cfg, overrides)

    return wrapper


def _diverse_beam_rows(step_fn):
    """Wrap search.DiverseBeamSearch.step: sentence ids -> rows of the first step's batch (10)."""

    @functools.wraps(step_fn)
    def step(self, step, lprobs, scores, prev_output_tokens=None, original_batch_idxs=None):
        if original_batch_idxs is not None:
            if step == 0:
                self._first_step_ids = original_batch_idxs.clone()
            first = self._first_step_ids
            original_batch_idxs = original_batch_idxs[:, None].eq(first[None, :]).int().argmax(dim=1)  # (bsz,) rows
        return step_fn(self, step, lprobs, scores, prev_output_tokens, original_batch_idxs)

    return step


def _ngrams_up_to_step(no_repeat_ngram):
    """Wrap NGramRepeatBlock._no_repeat_ngram: the tokens generated so far, not the padded buffer (11)."""

    @functools.wraps(no_repeat_ngram)
    def wrapper(self, tokens, lprobs, bsz: int, beam_size: int, step: int):
        return no_repeat_ngram(self, tokens[:, : step + 1], lprobs, bsz, beam_size, step)

    return wrapper


def install() -> None:
    """Apply the repairs above. Idempotent."""
    global _original
    from fairseq import checkpoint_utils
    from fairseq.data import data_utils
    from fairseq.distributed import utils as distributed_utils
    from fairseq.file_io import PathManager
    from fairseq.tasks import FairseqTask

    if data_utils.batch_by_size is not batch_by_size:
        _original = data_utils.batch_by_size
        data_utils.batch_by_size = batch_by_size
        atexit.register(stop_prefetch_threads)
    record("fairseq.data.data_utils.batch_by_size")
    record("atexit.stop_prefetch_threads")
    wrap_once(FairseqTask, "get_batch_iterator", _epoch_independent_batches)
    wrap_once(PathManager, "copy", _atomic_copy)
    wrap_once(checkpoint_utils, "torch_persistent_save", _atomic_persistent_save)
    wrap_once(distributed_utils, "infer_init_method", _torchrun_without_cuda)
    wrap_once(distributed_utils, "call_main", _bf16_without_tpu)
    wrap_once(distributed_utils, "distributed_init", _destroy_group_at_exit)
    wrap_once(checkpoint_utils, "overwrite_args_by_name", _new_model_fields)
    from fairseq import search
    from fairseq.ngram_repeat_block import NGramRepeatBlock

    wrap_once(search.DiverseBeamSearch, "step", _diverse_beam_rows)
    wrap_once(NGramRepeatBlock, "_no_repeat_ngram", _ngrams_up_to_step)
    train_cli = sys.modules.get("fairseq_cli.train")  # loaded only when fairseq-train is what runs
    if train_cli is not None:
        wrap_once(train_cli, "train", _stop_at_max_update)
    from .guards import results_file, save_dir  # (7, 8), each in a module of its own

    wrap_once(checkpoint_utils, "verify_checkpoint_directory", save_dir.locked_verify)
    wrap_once(checkpoint_utils, "load_checkpoint", save_dir.checked_load_checkpoint)
    generate_cli = sys.modules.get("fairseq_cli.generate")  # loaded only when fairseq-generate runs
    if generate_cli is not None:
        wrap_once(generate_cli, "main", results_file.whole_results)
