"""Guards a fairseq-train --save-dir against being overwritten by mistake.

Installed into fairseq by fairseq_fixes.install() (fairseq-train and fairseq-hydra-train):

1. One training per save dir. The process that writes the checkpoints (the one fairseq has verify the
   save dir: the master, distributed rank 0) takes an exclusive fcntl.flock on SAVE_DIR/.train.lock
   and holds it until it exits; a second training into the same folder is refused in one line. The
   operating system releases the lock when the process ends in any way, SIGKILL included, so a
   killed run never blocks the next one (the lock *file* stays behind, empty or with the old pid;
   it means nothing by itself). Processes forked from the holder (DataLoader workers) close their
   copy of the descriptor, so that a worker outliving a killed trainer for a few seconds does not
   keep the lock. A save dir that cannot be created or written (its parent a file, read-only, full)
   is one line naming --save-dir, where fairseq re-raised the bare OSError. A lock that cannot be
   taken (the lock path a folder, a file system without locks) stops the training in one line:
   going on unlocked would let a second training rewrite this one's checkpoints.
2. What fairseq silently ignored before starting again from update 1 and overwriting the save dir:
   - an explicit --restore-file that does not exist, or is a folder: one-line error (a relative
     path is read from the current folder, as fairseq does; the error says so when the name exists
     in --save-dir);
   - a save dir holding checkpoints (any checkpoint*.pt: checkpoint_best.pt, checkpoint<epoch>.pt,
     checkpoint_<epoch>_<update>.pt, ...) but no checkpoint_last.pt, with the default --restore-file:
     refused, naming how to resume (--restore-file, or copying one to checkpoint_last.pt) and how to
     start over (a new --save-dir).
   - a resume point without training state (no optimizer state or no data-iterator position: an
     average, a conversion, a run saved with --no-save-optimizer-state), whatever wrote it and
     under whatever name: fairseq would take its weights, start again at update 0 and overwrite
     the run's checkpoints. Refused; --reset-optimizer says it is meant (in a save dir of its own, 3).
3. A training that starts over, at update 0 (--reset-optimizer, --finetune-from-model) or at epoch 1
   (--reset-dataloader), in a save dir that holds checkpoints: its own checkpoints (checkpoint_last.pt,
   checkpoint_best.pt, the interval ones of the same names) would overwrite the run's there. Refused,
   naming a new save dir as the way to start over and how to resume the run in place instead.
   Every other command keeps fairseq's meaning: checkpoint_last.pt resumes when it is there, an
   existing --restore-file is loaded, --finetune-from-model and --continue-once start from their
   model when checkpoint_last.pt is missing (the first in a save dir without checkpoints), the
   --reset-* flags apply to the checkpoint loaded (those of 3 in a save dir without checkpoints), and
   --no-save (nothing written) or an empty save dir starts from update 1 as before.
"""

import fcntl
import functools
import os
import re

from attn_only_tools.guards.errors import PluginError

LOCK_NAME = ".train.lock"
DEFAULT_RESTORE = "checkpoint_last.pt"  # fairseq's default --restore-file, read from --save-dir
CHECKPOINT_NAME = re.compile(r"^checkpoint.*\.pt$")
# the names fairseq-train resumes from or replaces as it trains (the last, the best, the best-k by
# metric, the epoch and interval checkpoints; with a sharding suffix such as -shard0 or -model_part-1)
TRAINING_NAME = re.compile(r"^checkpoint(_last|_best|\.best_.+|\d+|_\d+_\d+)(-[\w-]+)?\.pt$")

_held = {}  # real path of a locked save dir -> the descriptor holding its lock


def _local(path) -> bool:
    from fairseq.file_io import PathManager

    return not PathManager.path_requires_pathmanager(str(path))


def _close_in_child(fd: int) -> None:
    """Close a forked child's copy of the lock's descriptor (the parent's copy keeps the lock)."""
    try:
        os.close(fd)
    except OSError:
        pass


def _lock_holder(fd: int) -> str:
    """' (pid N)' from the lock file's content, or '' when it names no process."""
    try:
        pid = os.pread(fd, 32, 0).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""


def _unlockable(path: str, save_dir: str, e: OSError) -> PluginError:
    """The one line for a lock that cannot be taken: without it a second training into the same
    folder would not be refused, so the training stops instead of going on unguarded."""
    return PluginError(
        f"cannot take the training lock {path} ({e.strerror or e}): without it a second training into "
        f"{save_dir} would not be refused; remove or repair {path} (it must be a plain file, on a file "
        "system that supports locks), or give another --save-dir"
    )


def lock_save_dir(save_dir: str) -> None:
    """Take the exclusive lock on SAVE_DIR/.train.lock for the rest of this process, creating the
    folder if needed; raise a PluginError if another process holds it. A folder that cannot be
    created or written is left to fairseq's own check; a lock file that cannot be opened or locked
    (a folder in its place, a file system without locks) is refused in one line."""
    if not _local(save_dir) or os.path.realpath(save_dir) in _held:
        return
    path = os.path.join(save_dir, LOCK_NAME)
    try:
        os.makedirs(save_dir, exist_ok=True)
    except OSError:
        return  # fairseq's check of the folder comes next and is made one line by locked_verify
    if not os.access(save_dir, os.W_OK | os.X_OK):
        return  # the same: a folder this user cannot write
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError as e:
        raise _unlockable(path, save_dir, e) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _lock_holder(fd)
        os.close(fd)
        raise PluginError(
            f"another training{holder} is writing into {save_dir} (it holds the lock {path}): "
            f"wait for it to end, or give this run another --save-dir"
        ) from None
    except OSError as e:
        os.close(fd)
        raise _unlockable(path, save_dir, e) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    _held[os.path.realpath(save_dir)] = fd
    os.register_at_fork(after_in_child=functools.partial(_close_in_child, fd))


def locked_verify(verify):
    """Wrap checkpoint_utils.verify_checkpoint_directory, which fairseq-train calls on the master
    only, before anything else touches the save dir: lock the folder first (1)."""

    @functools.wraps(verify)
    def wrapper(save_dir: str) -> None:
        lock_save_dir(save_dir)
        try:
            return verify(save_dir)
        except OSError as e:  # fairseq logs a warning and re-raises the bare OSError
            from attn_only_tools.guards.explain import OS_FIXES

            reason = e.strerror or str(e)
            fix = OS_FIXES.get(e.errno, "")
            raise PluginError(
                f"--save-dir {save_dir} cannot be written ({reason}"
                + (f": {fix}" if fix else "")
                + "): give --save-dir a folder this user can create and write"
            ) from e

    return wrapper


def check_not_a_training_name(path, flag: str) -> None:
    """Refuse, in one line, to write a checkpoint that no training wrote (an average, a conversion)
    under a name fairseq-train resumes from or replaces (TRAINING_NAME): in a save dir it would be
    taken for the run's own, or overwritten by it (3)."""
    name = os.path.basename(os.fspath(path))
    if TRAINING_NAME.match(name):
        other = os.path.join(os.path.dirname(os.fspath(path)), "checkpoint_avg.pt")
        raise PluginError(
            f"{flag} {path}: {name} is a name fairseq-train resumes from or replaces as it trains, so in a "
            f"save dir this file would be taken for the run's own checkpoint or overwritten by it; give "
            f"another name, e.g. {other}"
        )


def check_restore_file(path: str, save_dir: str) -> None:
    """Raise a PluginError unless PATH (local), given explicitly as --restore-file, is a file (2)."""
    if os.path.isfile(path):
        return
    if os.path.isdir(path):
        inside = os.path.join(path, DEFAULT_RESTORE)
        example = f", e.g. --restore-file {inside}" if os.path.isfile(inside) else ""
        raise PluginError(f"--restore-file {path} is a folder, not a checkpoint: name a checkpoint file{example}")
    in_save_dir = os.path.join(save_dir, path)
    guess = not os.path.isabs(path) and os.path.isfile(in_save_dir)
    hint = f"; did you mean --restore-file {in_save_dir}?" if guess else ""
    raise PluginError(
        f"--restore-file {path} does not exist: give an existing checkpoint (a relative path is read "
        f"from the current folder, not from --save-dir{hint})"
    )


def saved_checkpoints(save_dir: str) -> list:
    """The checkpoint*.pt files in save_dir, newest first (by modification time, then name)."""
    if not os.path.isdir(save_dir):
        return []
    found = [e for e in os.scandir(save_dir) if CHECKPOINT_NAME.match(e.name) and e.is_file()]
    return [e.name for e in sorted(found, key=lambda e: (-e.stat().st_mtime, e.name))]


def check_save_dir_without_last(save_dir: str, last: str) -> None:
    """Raise a PluginError if save_dir holds checkpoints but not `last` (checkpoint_last.pt), which
    fairseq would take as a first launch and overwrite them (2)."""
    last_path = os.path.join(save_dir, last)
    if os.path.isfile(last_path):
        return
    if os.path.exists(last_path):
        raise PluginError(f"{last_path} is not a file: move it away, it is where fairseq-train resumes from")
    found = saved_checkpoints(save_dir)
    if not found:
        return
    names = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    newest = os.path.join(save_dir, found[0])
    raise PluginError(
        f"{save_dir} holds checkpoints ({names}) but no {last}, so training would start again at "
        f"update 1 and overwrite them: to resume, pass --restore-file {newest} (the newest) or copy "
        f"it to {last_path}; to start over, give a new --save-dir"
    )


def check_training_state(path: str, save_dir: str) -> None:
    """Raise a PluginError if the checkpoint at PATH, about to be resumed, holds no training state
    (2): its optimizer state or the data iterator's position is missing. Read memory-mapped, so the
    weights are not loaded twice."""
    from .safe_load import load_checkpoint

    state = load_checkpoint(path)
    extra = state.get("extra_state") or {}
    if state.get("last_optimizer_state") is not None and "train_iterator" in extra:
        return
    raise PluginError(
        f"{path} holds no training state (no optimizer state or data position: an average, a "
        f"conversion, or a run saved with --no-save-optimizer-state), so it is no resume point: "
        f"training would start again at update 0 and overwrite the checkpoints in {save_dir}; to train "
        f"from its weights, give a new, empty --save-dir with --finetune-from-model {path} (or "
        f"--restore-file {path} --reset-optimizer); to resume the run, move {path} out of {save_dir}"
    )


def check_restart(cfg, path: str, how: str) -> None:
    """Raise a PluginError if a training that starts over from PATH (how: the flag that makes it)
    would write into a save dir holding checkpoints, whose names its own checkpoints reuse (3)."""
    if cfg.no_save or not _local(cfg.save_dir):
        return
    found = saved_checkpoints(cfg.save_dir)
    if not found:
        return
    names = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    start = "at epoch 1" if how == "--reset-dataloader" else "at update 0"
    if how == "--finetune-from-model":
        new = f"--finetune-from-model {path}"
        resume = ""
    else:
        new = f"--restore-file {path} {how}"
        restore = "" if cfg.restore_file == DEFAULT_RESTORE else " and --restore-file"
        resume = f"; to resume the run in {cfg.save_dir} instead, leave out {how}{restore}"
    raise PluginError(
        f"{how} starts training again {start} from {path}, and its checkpoints would overwrite those in "
        f"{cfg.save_dir} ({names}): give it a new, empty --save-dir ({new}){resume}"
    )


def check_restore(cfg, suffix: str) -> None:
    """Check, before fairseq's load_checkpoint(cfg) reads it, what it would restore (2); cfg is the
    CheckpointConfig and suffix the trainer's checkpoint suffix, as fairseq uses them."""
    if cfg.finetune_from_model is not None:  # fairseq's own rules (and errors) for --finetune-from-model
        last = os.path.join(cfg.save_dir, f"checkpoint_last{suffix}.pt")
        if _local(cfg.save_dir) and not os.path.exists(last) and os.path.isfile(cfg.finetune_from_model):
            check_restart(cfg, cfg.finetune_from_model, "--finetune-from-model")  # a first launch: update 0
        return
    if cfg.restore_file != DEFAULT_RESTORE:
        path = cfg.restore_file.replace(".pt", suffix + ".pt") if suffix else cfg.restore_file
        if _local(path):
            check_restore_file(path, cfg.save_dir)
    else:
        if cfg.no_save or getattr(cfg, "continue_once", None) is not None or not _local(cfg.save_dir):
            return
        path = os.path.join(cfg.save_dir, f"checkpoint_last{suffix}.pt")
        check_save_dir_without_last(cfg.save_dir, os.path.basename(path))
    if not os.path.isfile(path):
        return
    for flag, how in (("reset_optimizer", "--reset-optimizer"), ("reset_dataloader", "--reset-dataloader")):
        if getattr(cfg, flag, False):
            check_restart(cfg, path, how)
    if not cfg.reset_optimizer:
        check_training_state(path, cfg.save_dir)


def checked_load_checkpoint(load_checkpoint):
    """Wrap checkpoint_utils.load_checkpoint (every rank, before anything is read or written) (2)."""

    @functools.wraps(load_checkpoint)
    def wrapper(cfg, trainer, **passthrough_args):
        check_restore(cfg, trainer.checkpoint_suffix)
        return load_checkpoint(cfg, trainer, **passthrough_args)

    return wrapper
