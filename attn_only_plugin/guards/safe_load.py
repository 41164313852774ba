"""Load fairseq checkpoints with torch's safe unpickler (torch >= 2.6 defaults to weights_only).

fairseq 0.12 writes a few non-tensor Python objects into its checkpoints; torch's weights-only
unpickler refuses them (`Unsupported global: argparse.Namespace`). Rather than turning
weights_only off (which lets a crafted checkpoint run arbitrary code), we allow-list exactly
the types fairseq stores: argparse.Namespace (legacy "args"), numpy scalars and dtypes (meters
and best-loss values), and the enums of fairseq's config. Everything else stays refused.

A refused checkpoint is reported as one line naming the file and the global it holds
(`refused_error`), a file torch cannot read at all (truncated, corrupt, not a checkpoint) as one
line naming the file (`unreadable_error`), a file torch reads but that holds no fairseq checkpoint
(a bare tensor, a list, a dict without 'model') as one line saying what it holds (`structure_error`);
fairseq's checkpoint_utils.load_checkpoint_to_cpu,
which generate, interactive, validate, train's resume and the hub all call, is wrapped to raise
those PluginErrors, and to refuse a checkpoint whose weights hold NaN or inf (`non_finite`), naming
the file and the tensor: training from it stops at the first update whatever the learning rate,
and decoding with it gives nothing.
"""

import argparse
import functools
import os
import pickle
import re
import zipfile

import numpy as np
import torch


def _numpy_globals():
    found = [np.dtype, np.ndarray]
    for modname in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            mod = __import__(modname, fromlist=["scalar", "_reconstruct"])
            found += [mod.scalar, mod._reconstruct]
            break
        except (ImportError, AttributeError):
            continue
    # numpy >= 1.25 pickles dtypes by their class (numpy.dtypes.Float64DType, ...)
    dtypes = getattr(np, "dtypes", None)
    for name in ("Float64DType", "Float32DType", "Float16DType", "Int64DType", "Int32DType", "BoolDType"):
        if dtypes is not None and hasattr(dtypes, name):
            found.append(getattr(dtypes, name))
    return found


def _fairseq_enums():
    from enum import Enum

    from fairseq.dataclass import constants

    return [v for v in vars(constants).values() if isinstance(v, type) and issubclass(v, Enum) and v is not Enum]


def allowed_globals():
    """The exact list of non-tensor types that fairseq puts into a checkpoint."""
    return [argparse.Namespace, *_numpy_globals(), *_fairseq_enums()]


def refused_error(path, exc: BaseException):
    """The PluginError for a checkpoint torch's safe unpickler refused, or None if `exc` is not that."""
    from attn_only_tools.guards.errors import PluginError

    text = str(exc)
    if not isinstance(exc, pickle.UnpicklingError) or "Weights only load failed" not in text:
        return None
    # a refused global, or a refused class of an allowed one (numpy's object dtype: an array of
    # arbitrary Python objects, each unpickled in turn)
    found = re.search(r"GLOBAL ([\w.]+)", text) or re.search(r"Can only build .* but got <class '([\w.]+)'>", text)
    if not found:  # not a refused class but a broken pickle (e.g. "Unsupported operand"): unreadable
        return None
    what = found.group(1)
    return PluginError(
        f"refused to load untrusted checkpoint {path}: it holds {what}, which is not a tensor or "
        "one of the plain types fairseq writes, and unpickling it could run code; load only "
        "checkpoints from a source you trust"
    )


# the first bytes of torch's legacy (non-zip) format: a pickle (protocol 2) of its magic number
_TORCH_LEGACY = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"


def other_format(path):
    """What a file that torch cannot read is instead, when its name or first bytes say so, else None."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(_TORCH_LEGACY))
    except OSError:
        return None
    folder = os.path.dirname(os.path.abspath(path))
    if not head:
        return "an empty file"
    if os.path.basename(path) == "model.bin" and os.path.isfile(os.path.join(folder, "config.json")):
        return "a CTranslate2 model (attn-only-export-ctranslate2's output: load it with load_ctranslate2)"
    if head.startswith(b"\x93NUMPY"):
        return "a numpy array file (.npy)"
    if head[:1] == b"\x80" and not head.startswith(_TORCH_LEGACY):
        return "a plain Python pickle (pickle.dump), not a torch checkpoint"
    return None


def unreadable_error(path, exc: BaseException):
    """The PluginError for a checkpoint file torch.load could not read (truncated, corrupt, not a
    checkpoint): one line with torch's first line of explanation, or what the file is instead."""
    from attn_only_tools.guards.errors import PluginError

    kind = other_format(path)
    if kind is not None:
        return PluginError(
            f"{path} is not a checkpoint but {kind}: give a checkpoint that fairseq-train wrote "
            "(checkpoint_best.pt, checkpoint_last.pt, checkpoint_E_U.pt in its --save-dir)"
        )
    return PluginError(
        f"cannot read checkpoint {path}: it is corrupt or truncated ({_reason(path, exc)}); copy it "
        "again, or use another checkpoint (checkpoint_best.pt, an earlier checkpoint_E_U.pt)"
    )


def _reason(path, exc: BaseException) -> str:
    text = str(exc)
    found = re.search(r"WeightsUnpickler error:\s*(\S.*)", text)
    if found:  # torch's long "Weights only load failed" preamble is about refused classes: not this case
        return f"not a valid pickle: {found.group(1).strip()[:150]}"
    try:
        with open(path, "rb") as f:
            if f.read(2) == b"PK" and not zipfile.is_zipfile(path):
                return "its zip archive is incomplete"
    except OSError:
        pass
    return (text.strip().splitlines() or [type(exc).__name__])[0][:200]


def load_checkpoint(path) -> dict:
    """A checkpoint file read with torch's safe loader, memory-mapped where the file format allows
    (averaging reads many), checked to be a dict with a 'model' entry. A refused, unreadable or
    non-fairseq file raises a one-line PluginError; FileNotFoundError passes through for the caller
    to phrase."""
    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as e:
            if "mmap can only be used" not in str(e):
                raise
            state = torch.load(path, map_location="cpu", weights_only=True)  # legacy (non-zip) format
    except FileNotFoundError:
        raise
    except Exception as e:  # truncated, not a checkpoint, or a pickle the safe loader refuses
        raise (refused_error(path, e) or unreadable_error(path, e)) from None
    err = structure_error(path, state)
    if err is not None:
        raise err
    return state


def structure_error(path, state):
    """The PluginError for a file that torch reads but that is not a fairseq checkpoint (a dict
    with a 'model' state dict), or None when it is one."""
    from attn_only_tools.guards.errors import PluginError

    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        return None
    if isinstance(state, dict):
        keys = ", ".join(map(repr, list(state)[:5])) or "none"
        what = f"a dict without a 'model' state dict (its keys: {keys})"
    else:
        kind = type(state)
        package = "" if kind.__module__ == "builtins" else kind.__module__.split(".")[0] + "."
        what = f"a {package}{kind.__name__}"
    return PluginError(
        f"{path} is not a fairseq checkpoint ({what}): give a checkpoint that fairseq-train wrote "
        "(checkpoint_best.pt, checkpoint_last.pt, checkpoint_E_U.pt in its --save-dir)"
    )


def _not_a_checkpoint(path):
    """structure_error() of local file `path` read again after fairseq failed on it, or None."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:
        return None
    return structure_error(path, state)


def non_finite(tensors: dict):
    """(name, number of NaN/inf values, number of values) of the first floating-point tensor of
    `tensors` (a state dict) that is not finite, or None when all are."""
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all()):
            return name, int(t.numel() - torch.isfinite(t).sum()), t.numel()
    return None


def non_finite_error(path, found):
    """The PluginError for checkpoint `path` whose tensor non_finite() found."""
    from attn_only_tools.guards.errors import PluginError

    name, bad, total = found
    return PluginError(
        f"checkpoint {path} holds non-finite weights: {name} has {bad} NaN/inf of its {total} values, "
        "so training from it stops at the first update whatever the learning rate, and decoding "
        "with it gives nothing; use an earlier checkpoint of that run (fairseq-train --restore-file "
        "checkpoint_E_U.pt, fairseq-generate --path), or train again from scratch"
    )


def _raised_in_torch_load(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith(os.path.join("torch", "serialization.py")):
            return True
        tb = tb.tb_next
    return False


def _refusing_loader(original):
    """checkpoint_utils.load_checkpoint_to_cpu raising our one-line PluginErrors."""

    @functools.wraps(original)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        try:
            state = original(path, *args, **kwargs)
        except Exception as e:
            err = refused_error(path, e)
            if err is None and _raised_in_torch_load(e):
                err = unreadable_error(path, e)
            if err is None and os.path.isfile(str(path)):  # read, but fairseq found no checkpoint in it
                err = _not_a_checkpoint(path)
            if err is None:
                raise
            raise err from None
        found = non_finite(state["model"]) if isinstance(state, dict) and isinstance(state.get("model"), dict) else None
        if found is not None:
            raise non_finite_error(path, found)
        return state

    return load_checkpoint_to_cpu


def install() -> None:
    """Allow-list fairseq's checkpoint types for torch.load(weights_only=True). Idempotent."""
    from fairseq import checkpoint_utils

    from .wrap import record, wrap_once

    if hasattr(torch.serialization, "add_safe_globals"):
        torch.serialization.add_safe_globals(allowed_globals())
        record("torch.serialization.add_safe_globals")

    wrap_once(checkpoint_utils, "load_checkpoint_to_cpu", _refusing_loader)
