"""Checkpoint averaging, section 6.1 of Vaswani et al. (2017): "For the base models, we used a
single model obtained by averaging the last 5 checkpoints, which were written at 10-minute
intervals. For the big models, we averaged the last 20 checkpoints."

    attn-only-average-checkpoints --inputs CKPT_DIR --num-update-checkpoints 5 --output avg.pt
    attn-only-average-checkpoints --inputs CKPT_DIR --num-epoch-checkpoints 5 --output avg.pt
    attn-only-average-checkpoints --inputs a.pt b.pt c.pt --output avg.pt
    attn-only-average-checkpoints --list-last 5 CKPT_DIR      # which the recipes average: one path a line

The command line is that of fairseq's repository script (its pip package does not ship it);
this is an independent implementation. Departures from the paper and from fairseq's script:
- the paper saved checkpoints every 10 minutes; fairseq saves every --save-interval-updates
  updates (checkpoint_E_U.pt) or every epoch (checkpointE.pt), so "last N" is by update U or
  epoch E (--checkpoint-upper-bound drops those after a given U or E);
- checkpoints are read one at a time with torch's safe loader (weights_only=True) and memory
  mapped, so only the running sums (float32; float64 for float64 tensors) and the checkpoint
  being read are in memory: about two models, whatever N is;
- floating-point tensors are averaged; integer tensors are taken from the first checkpoint;
- the result keeps the first checkpoint's cfg/args, extra_state and optimizer_history (so
  fairseq-generate and checkpoint_utils.load_model_ensemble load it) but not its optimizer
  state (last_optimizer_state = None: fine-tuning from it starts a fresh optimizer);
- tensors that share storage (tied embeddings saved under several names) stay one tensor;
- checkpoints whose parameter names or shapes differ are refused (one-line error, exit 1), as
  are a checkpoint holding NaN or inf (the average would be NaN/inf too) and an --output that is
  one of the inputs (compared as files: hard links, symlinks and other spellings of its path) or a
  folder holding one, and an --output named as fairseq-train's own checkpoints (checkpoint_last.pt,
  checkpoint_best.pt, checkpointN.pt, checkpoint_E_U.pt), which a save dir would take for the run's or
  overwrite; an existing --output is replaced only with --force (atomic.check_output);
  the output is written atomically (temporary file in the same folder + os.replace).
"""

import argparse
import filecmp
import logging
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional

import torch

from attn_only_plugin.guards import safe_load
from attn_only_plugin.guards.save_dir import check_not_a_training_name
from attn_only_tools.cli import command_parser
from attn_only_tools.guards.atomic import atomic_output, check_output, check_writable, same_file
from attn_only_tools.guards.errors import PluginError

logging.getLogger("fairseq").setLevel(logging.WARNING)  # no INFO chatter among our messages


def log(message: str) -> None:
    print(f"[average] {message}", file=sys.stderr, flush=True)


def numbered_checkpoints(folder: Path, by_update: bool) -> List[tuple]:
    """(U, path) of each checkpoint_E_U.pt (by update U) or (E, path) of each checkpointE.pt of
    folder, oldest first: the one reading of fairseq's checkpoint names."""
    pattern = re.compile(r"checkpoint_\d+_(\d+)\.pt" if by_update else r"checkpoint(\d+)\.pt")
    return sorted((int(m.group(1)), p) for p in Path(folder).iterdir() if (m := pattern.fullmatch(p.name)))


def last_n_checkpoints(folder: Path, n: int, by_update: bool, upper_bound: Optional[int] = None) -> List[Path]:
    """The n newest checkpoint_E_U.pt (by update U) or checkpointE.pt (by epoch E) of folder,
    ignoring those after upper_bound; oldest first."""
    found = numbered_checkpoints(folder, by_update)
    if upper_bound is not None:
        found = [(k, p) for k, p in found if k <= upper_bound]
    if len(found) < n:
        kind = "checkpoint_<epoch>_<update>.pt" if by_update else "checkpoint<epoch>.pt"
        bound = f" with {'update' if by_update else 'epoch'} <= {upper_bound}" if upper_bound is not None else ""
        raise PluginError(f"asked for the last {n} checkpoints but {folder} has {len(found)} named {kind}{bound}")
    return [p for _, p in found[-n:]]


def last_checkpoints(folder: Path, n: int) -> List[Path]:
    """The last n checkpoints of a training (--list-last; the recipes average and ensemble these),
    oldest first: its newest checkpoint_E_U.pt by update U, with checkpoint_last.pt standing in for
    the newest when it is not a copy of the newest of them (fairseq writes no checkpoint_E_U.pt when
    training stops exactly at an epoch's end, only checkpoint_last.pt). Fewer when there are fewer."""
    if n < 1:
        raise PluginError(f"--list-last: the number of checkpoints must be >= 1, not {n}")
    if not Path(folder).is_dir():
        raise PluginError(f"--list-last: {folder} is not a folder: give fairseq-train's --save-dir")
    interval = [p for _, p in numbered_checkpoints(folder, by_update=True)]
    last = Path(folder) / "checkpoint_last.pt"
    if interval and last.is_file() and filecmp.cmp(interval[-1], last, shallow=False):
        return interval[-n:]
    if not last.is_file():
        if not interval:
            raise PluginError(f"--list-last: {folder} holds no checkpoint_<epoch>_<update>.pt, no checkpoint_last.pt")
        return interval[-n:]
    return interval[len(interval) - min(n - 1, len(interval)) :] + [last]


def load_checkpoint(path: Path) -> dict:
    """safe_load.load_checkpoint (torch's safe loader, memory-mapped), a missing file or weights
    that are not finite as PluginError."""
    try:
        state = safe_load.load_checkpoint(path)
    except FileNotFoundError:
        raise PluginError(f"checkpoint {path} not found") from None
    found = safe_load.non_finite(state["model"])
    if found is not None:
        name, bad, total = found
        raise PluginError(
            f"{path} holds non-finite weights: {name} has {bad} NaN/inf of its {total} values, which "
            "would make the average NaN/inf: leave it out of --inputs (with --num-*-checkpoints, set "
            "--checkpoint-upper-bound below it) and average checkpoints from before the training "
            "diverged"
        )
    return state


def storage_aliases(model: Dict[str, torch.Tensor]) -> Dict[str, str]:
    """name -> the first name that is the same tensor (same storage, offset, shape and stride)."""
    first: Dict[tuple, str] = {}
    aliases = {}
    for name, t in model.items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride()) if t.numel() else name
        aliases[name] = first.setdefault(key, name)
    return aliases


def check_same_layout(reference: Dict[str, torch.Tensor], model: Dict[str, torch.Tensor], path: Path, first: Path):
    """Refuse a checkpoint whose parameter names or shapes differ from the first one's."""
    differing = sorted(set(reference) ^ set(model))
    if differing:
        key = differing[0]
        where = path if key in model else first
        raise PluginError(
            f"{path} does not match {first}: parameter {key} is only in {where} (a different architecture?)"
        )
    for key, tensor in reference.items():
        if tuple(model[key].shape) != tuple(tensor.shape):
            raise PluginError(
                f"{path} does not match {first}: {key} has shape {tuple(model[key].shape)} "
                f"there but {tuple(tensor.shape)} in the first (a different architecture?)"
            )


def check_distinct(paths: List[Path]) -> None:
    """Refuse a checkpoint given twice (the same file, however named): it would weigh double."""
    for i, path in enumerate(paths):
        twin = next((p for p in paths[:i] if same_file(p, path)), None)
        if twin is not None:
            raise PluginError(
                f"--inputs gives {twin} twice (as {twin} and {path}): the average would weigh it double; "
                "name each checkpoint once"
            )


# model settings that change what the weights compute without changing their names or shapes (ours,
# then fairseq's transformer's): checkpoints that differ in one are of different architectures
ARCH_SETTINGS = (
    "_name", "arch", "heads", "d_k", "d_v", "pre_norm", "learned_pos", "embedding_sharing", "attention_window",
    "relative_positions", "no_absolute_positions", "encoder_attention_heads", "decoder_attention_heads",
    "encoder_normalize_before", "decoder_normalize_before", "activation_fn", "no_scale_embedding",
    "layernorm_embedding", "share_all_embeddings", "share_decoder_input_output_embed",
)  # fmt: skip


def model_settings(state: dict) -> dict:
    """The ARCH_SETTINGS a checkpoint records (cfg['model'], or the legacy args Namespace)."""
    cfg = state.get("cfg")
    model = cfg.get("model") if isinstance(cfg, dict) else None
    if model is None and state.get("args") is not None:
        model = vars(state["args"])
    if model is None:
        return {}
    if not isinstance(model, dict):
        model = dict(model) if hasattr(model, "keys") else vars(model)
    return {key: model[key] for key in ARCH_SETTINGS if key in model}


def check_same_settings(reference: dict, state: dict, path: Path, first: Path) -> None:
    """Refuse a checkpoint whose architecture settings differ from the first one's (same shapes)."""
    settings = model_settings(state)
    for key in ARCH_SETTINGS:
        if key in reference and key in settings and str(reference[key]) != str(settings[key]):
            raise PluginError(
                f"{path} does not match {first}: it was trained with {key}={settings[key]}, the first with "
                f"{key}={reference[key]} (a different architecture, with weights of the same shapes); "
                "average checkpoints of one run"
            )


def _sum_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def average_checkpoints(paths: List[Path]) -> dict:
    """The first checkpoint of `paths` with its model replaced by the element-wise mean of all
    models' floating-point tensors; one checkpoint in memory at a time."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise PluginError("no checkpoints to average: give --inputs files, or a folder with --num-*-checkpoints N")
    log(f"1/{len(paths)} {paths[0]}")
    state = load_checkpoint(paths[0])
    reference, settings = state["model"], model_settings(state)
    aliases = storage_aliases(reference)
    sums = {
        name: t.to(_sum_dtype(t), copy=True)
        for name, t in reference.items()
        if aliases[name] == name and t.is_floating_point()
    }
    for i, path in enumerate(paths[1:], start=2):
        log(f"{i}/{len(paths)} {path}")
        other = load_checkpoint(path)
        model = other["model"]
        check_same_layout(reference, model, path, paths[0])
        check_same_settings(settings, other, path, paths[0])
        del other
        for name, total in sums.items():
            total.add_(model[name].to(total.dtype))
        del model
    averaged = {}
    for name, tensor in reference.items():
        canonical = aliases[name]
        if canonical in averaged:
            averaged[name] = averaged[canonical]  # tied: the very same tensor again
        elif canonical in sums:
            averaged[name] = sums.pop(canonical).div_(len(paths)).to(tensor.dtype)
        else:
            averaged[name] = tensor  # integer tensors: the first checkpoint's
    state["model"] = averaged
    state["last_optimizer_state"] = None
    return state


def save_atomic(state: dict, output: Path) -> None:
    """torch.save to a temporary file next to `output`, then rename it over `output`."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(output) as f:
        torch.save(state, f)


def resolve_inputs(
    inputs: List[Path], num_epoch: Optional[int], num_update: Optional[int], upper_bound: Optional[int]
) -> List[Path]:
    """fairseq's rules: with --num-*-checkpoints one folder, otherwise a list of files."""
    if num_epoch is not None and num_update is not None:
        raise PluginError("give --num-epoch-checkpoints or --num-update-checkpoints, not both")
    n = num_update if num_update is not None else num_epoch
    if n is None:
        if upper_bound is not None:
            raise PluginError("--checkpoint-upper-bound needs --num-epoch-checkpoints or --num-update-checkpoints")
        folders = [p for p in inputs if p.is_dir()]
        if folders:
            raise PluginError(f"{folders[0]} is a folder: add --num-update-checkpoints N or --num-epoch-checkpoints N")
        return list(inputs)
    if n < 1:
        raise PluginError(f"the number of checkpoints to average must be >= 1, not {n}")
    if len(inputs) != 1 or not inputs[0].is_dir():
        raise PluginError("--num-*-checkpoints needs exactly one --inputs folder")
    return last_n_checkpoints(inputs[0], n, by_update=num_update is not None, upper_bound=upper_bound)


def parse_args(argv=None) -> argparse.Namespace:
    p = command_parser(__doc__)
    p.add_argument("--inputs", nargs="+", type=Path, help="checkpoint files, or one folder")
    p.add_argument("--output", type=Path, help="where to write the averaged checkpoint")
    p.add_argument("--force", action="store_true", help="replace an existing --output")
    p.add_argument("--num-epoch-checkpoints", type=int, help="average the last N checkpointE.pt of the folder")
    p.add_argument("--num-update-checkpoints", type=int, help="average the last N checkpoint_E_U.pt of the folder")
    p.add_argument("--checkpoint-upper-bound", type=int, help="ignore checkpoints after this epoch / update")
    p.add_argument(
        "--list-last",
        nargs=2,
        metavar=("N", "DIR"),
        help="print the last N checkpoints of the save dir DIR, one path a line, oldest first (checkpoint_last.pt "
        "standing in for the newest when fairseq wrote no checkpoint_E_U.pt for it), and average nothing",
    )
    a = p.parse_args(argv)
    if a.list_last is None and (a.inputs is None or a.output is None):
        p.error("the following arguments are required: --inputs, --output (or --list-last N DIR)")
    if a.list_last is not None:
        if not a.list_last[0].isdigit():
            p.error(f"--list-last N DIR: N must be a whole number, not {a.list_last[0]!r}")
        a.list_last = (int(a.list_last[0]), Path(a.list_last[1]))
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    try:
        if a.list_last is not None:
            print("\n".join(str(p) for p in last_checkpoints(a.list_last[1], a.list_last[0])))
            return 0
        paths = resolve_inputs(a.inputs, a.num_epoch_checkpoints, a.num_update_checkpoints, a.checkpoint_upper_bound)
        check_output(a.output, paths, a.force, "--output")
        check_not_a_training_name(a.output, "--output")
        check_writable(a.output, "--output", create_folders=True)  # before the work, not after it
        check_distinct(paths)
        log(f"averaging {len(paths)} checkpoints: {', '.join(str(p) for p in paths)}")
        save_atomic(average_checkpoints(paths), a.output)
    except PluginError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    log(f"wrote {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
