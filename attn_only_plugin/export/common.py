"""What every export shares, whatever the engine: reading a checkpoint of ours (with the safe loader,
one-line refusals of other models, partial or non-finite weights and dictionaries that are not its
own), writing an output folder atomically (`--out` refused when it exists, unless `--force`), and
the zero-padding of narrow heads (free d_k, d_v) to an engine's one head width.

--force replaces only what an export wrote: every export folder holds MANIFEST, the list of the
files written into it, and a folder is replaced only when it has one and holds no file it does not
list (a user's notes.txt, a file added after the export); anything else is refused before the
checkpoint is read.

No engine is imported here: export/ctranslate2.py and export/transformers.py both use it.
"""

import json
import os
import re
import shutil
import tempfile
from argparse import Namespace
from pathlib import Path
from typing import Callable, NamedTuple, Tuple

import torch
from torch import Tensor

from attn_only_tools.guards.atomic import _umask, check_output, empty_folder
from attn_only_tools.guards.errors import PluginError

from ..models.transformer import TransformerConfig, full_config, validate

MODEL_NAME = "attn_only_transformer"


class Checkpoint(NamedTuple):
    """A checkpoint of ours read for export: its model config, weights, dictionaries and the whole state."""

    cfg: TransformerConfig
    weights: dict
    src_dict: object
    tgt_dict: object
    state: dict


def model_config(state: dict, path, other_tool: str = "ctranslate2's own ct2-fairseq-converter") -> TransformerConfig:
    """Our model's config from a checkpoint's cfg.model (or legacy args), refusing other models
    (other_tool: what to use for a fairseq transformer instead)."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    cfg = state.get("cfg") or {}
    m = (cfg.get("model") if isinstance(cfg, dict) else getattr(cfg, "model", None)) or state.get("args")
    if m is None:
        raise PluginError(
            f"{path} has no model config (cfg.model or args): export a checkpoint that fairseq-train "
            "or attn-only-average-checkpoints wrote"
        )
    m = Namespace(**m) if isinstance(m, dict) else m
    name = getattr(m, "_name", None) or getattr(m, "arch", None)
    if ARCH_MODEL_NAME_REGISTRY.get(name, name) != MODEL_NAME:
        raise PluginError(
            f"{path} holds a {name!r} model, not attn_only_plugin's: this exports models trained "
            f"with --user-dir attn_only_plugin (a fairseq transformer: {other_tool})"
        )
    cfg = full_config(m)
    validate(cfg)
    return cfg


def read_dictionaries(data, task_cfg) -> Tuple[object, object]:
    """(source, target) fairseq Dictionaries from the data directory, with the checkpoint's language
    pair or, when it did not store one, the pair fairseq infers from the data's file names."""
    from fairseq.data import Dictionary
    from fairseq.data.data_utils import infer_language_pair

    from ..guards.input_checks import check_data_dir

    get = (lambda k: task_cfg.get(k)) if isinstance(task_cfg, dict) else (lambda k: getattr(task_cfg, k, None))
    src, tgt = get("source_lang"), get("target_lang")
    check_data_dir(
        str(data),
        src,
        tgt,
        "the checkpoint records no language pair either: give the whole data-bin "
        "(its SPLIT.SRC-TGT.* files name the pair) or a checkpoint that fairseq-train wrote",
    )
    if src is None or tgt is None:
        src, tgt = infer_language_pair(str(data))
    return (
        Dictionary.load(os.path.join(data, f"dict.{src}.txt")),
        Dictionary.load(os.path.join(data, f"dict.{tgt}.txt")),
    )


def check_dictionaries(weights: dict, src_dict, tgt_dict) -> None:
    """Refuse dictionaries whose sizes are not the checkpoint's embedding tables'."""
    for side, d, name in (("encoder", src_dict, "source"), ("decoder", tgt_dict, "target")):
        table = weights.get(f"{side}.embed.tokens.weight")
        if table is not None and table.size(0) != len(d):
            raise PluginError(
                f"the {name} dictionary does not match the checkpoint: it has {len(d)} entries but the "
                f"checkpoint's {side} embeddings {table.size(0)}; give the --data folder (dict.*.txt) "
                "the checkpoint was trained with"
            )


def read_checkpoint(checkpoint, data, other_tool: str = "ctranslate2's own ct2-fairseq-converter") -> Checkpoint:
    """A checkpoint file of ours (safe loader) and the dictionaries of its data folder, each
    problem refused in one line: no file, not ours, non-finite weights, other dictionaries."""
    from ..guards.safe_load import load_checkpoint, non_finite, non_finite_error

    checkpoint = Path(checkpoint)
    if not checkpoint.is_file():
        raise PluginError(
            f"no checkpoint {checkpoint}: give a checkpoint file that fairseq-train "
            "(or attn-only-average-checkpoints) wrote"
        )
    state = load_checkpoint(checkpoint)
    cfg = model_config(state, checkpoint, other_tool)
    found = non_finite(state["model"])
    if found is not None:
        raise non_finite_error(checkpoint, found)
    task = (state.get("cfg") or {}).get("task") if isinstance(state.get("cfg"), dict) else None
    src_dict, tgt_dict = read_dictionaries(Path(data), task or state.get("args") or {})
    check_dictionaries(state["model"], src_dict, tgt_dict)
    return Checkpoint(cfg, state["model"], src_dict, tgt_dict, state)


def pad_heads(w: Tensor, h: int, d: int, D: int, dim: int = 0) -> Tensor:
    """Per-head blocks of d rows (dim 0: a projection's weight or bias) or columns (dim 1: W^O),
    each followed by D - d zeros."""
    if d == D:
        return w
    if dim == 0:
        blocks = w.reshape(h, d, -1)  # (h, d, d_model or 1)
        blocks = torch.cat([blocks, blocks.new_zeros(h, D - d, blocks.size(2))], dim=1)  # (h, D, .)
        return blocks.reshape(h * D, *w.shape[1:])  # (h D, d_model) or (h D,)
    blocks = w.reshape(w.size(0), h, d)  # (d_model, h, d)
    blocks = torch.cat([blocks, blocks.new_zeros(w.size(0), h, D - d)], dim=2)  # (d_model, h, D)
    return blocks.reshape(w.size(0), h * D)  # (d_model, h D)


MANIFEST = ".export-manifest.json"  # in every export folder: the files the export wrote there


def folder_files(folder: Path) -> list:
    """Every file (and link) under folder, as sorted paths relative to it, the manifest left out."""
    found = []
    for root, dirs, files in os.walk(folder):
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]  # a link is a name, not a folder to enter
        dirs[:] = [d for d in dirs if d not in links]
        found += [os.path.relpath(os.path.join(root, name), folder) for name in files + links]
    return sorted(name for name in found if name != MANIFEST)


def write_manifest(folder: Path) -> None:
    """List what an export wrote into folder (called on the complete temporary folder)."""
    (folder / MANIFEST).write_text(json.dumps({"written": folder_files(folder)}, indent=1) + "\n")


# every file the exports write (CTranslate2's, then transformers'): an export made before MANIFEST
# existed holds these alone, and is replaced as its list would allow
EXPORT_FILES = {
    "model.bin", "config.json", "shared_vocabulary.json", "source_vocabulary.json", "target_vocabulary.json",
    "attn_only_plugin.json", "model.safetensors", "generation_config.json", "README.md", "source.spm",
    "target.spm", "vocab.json", "tokenizer_config.json",
}  # fmt: skip


def not_written_by_export(out: Path) -> str:
    """'' when --force may replace folder out (a manifest, and no file it does not list); else why not."""
    if not out.is_dir() or out.is_symlink():
        return "is not a folder an export wrote"
    try:
        written = set(json.loads((out / MANIFEST).read_text())["written"])
    except (OSError, ValueError, KeyError, TypeError):
        files = set(folder_files(out))
        if not ({"model.bin", "model.safetensors"} & files and "config.json" in files):
            return f"has no list of the files an export wrote into it ({MANIFEST}), so it is not an export's folder"
        written = EXPORT_FILES  # an export made before the list existed: what an export may have written
    others = [name for name in folder_files(out) if name not in written]
    if others:
        names = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        return f"holds files the export did not write ({names}), which --force would delete"
    return ""


def new_out(out, force: bool, inputs=()) -> Path:
    """`out` as a Path, checked by the shared rule for outputs (atomic.check_output: not an input,
    not holding or inside one, replaced only with force) and refused in one line when its folder
    does not exist; with force, what it replaces must be what an export wrote (its MANIFEST lists
    every file in it), so that --force never deletes anything else."""
    check_output(out, inputs, force)
    out = Path(out)
    if force and (out.exists() or out.is_symlink()) and not empty_folder(out):
        why = not_written_by_export(out)
        if why:
            raise PluginError(
                f"--out {out} {why}: --force replaces only what an export wrote; move your files out of it, "
                "or choose another --out"
            )
    if not out.resolve().parent.is_dir():
        raise PluginError(f"the folder of {out} does not exist: create it first, or choose another --out")
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_leftovers(out: Path) -> None:
    """Remove the temporary folders (.OUT.PID.XXXX.tmp, and their .old) that an export into `out`
    killed outright (kill -9, a power cut) left beside it: those of a process that no longer runs."""
    pattern = re.compile(rf"^\.{re.escape(out.name)}\.(\d+)\.[^.]+\.tmp(\.old)?$")
    folder = out.resolve().parent
    for entry in os.scandir(folder):
        found = pattern.match(entry.name)
        if found and entry.is_dir(follow_symlinks=False) and not _alive(int(found.group(1))):
            shutil.rmtree(entry.path, ignore_errors=True)


def write_folder(out, force: bool, fill: Callable[[Path], None]) -> Path:
    """Write folder `out` atomically: fill(tmp) writes into a temporary folder beside it, named with
    this process' id, which is renamed to `out` when complete; an existing `out` is refused unless
    force (then replaced only once the new one is written). If fill raises, nothing is left behind;
    what a killed export left is removed by the next one into the same `out`."""
    out = new_out(out, force)
    remove_leftovers(out)
    tmp = Path(tempfile.mkdtemp(dir=out.resolve().parent, prefix=f".{out.name}.{os.getpid()}.", suffix=".tmp"))
    try:
        fill(tmp)
        write_manifest(tmp)
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp creates 0700
        new_out(out, force)  # again: a file added to the old folder since the start is not deleted either
        if out.exists():  # --force: the old folder goes only now that the new one is complete
            old = tmp.with_name(tmp.name + ".old")
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
