"""Checks bad data files and flag values where fairseq's own error would not name them.

Installed into fairseq when the plugin is imported; each check raises a one-line PluginError
naming the file or flag and what to do:
1. dict.*.txt: a line that is not `<token> <count> [flags]`, or a token listed twice (fairseq's
   ValueError/RuntimeError names neither the file nor the line);
2. a fairseq-preprocess .idx/.bin pair (mmap format) that is empty, truncated, or whose .bin is
   not the one its .idx describes (fairseq fails with an AttributeError about _bin_buffer_mmap,
   an offset error, or reads another run's sentences without complaint);
3. a split whose source and target files hold different numbers of sentences (fairseq's
   assertion names no file);
4. --beam below 1 (a ZeroDivisionError inside the decoder) and --update-freq below 1 (a
   ZeroDivisionError in fairseq's iterator).
"""

import functools
import os
import struct

from attn_only_tools.guards.errors import PluginError

from .wrap import wrap_once

REBUILD = "rebuild the data-bin with fairseq-preprocess"
_MMAP_MAGIC = b"MMIDIDX\x00\x00"
_HEADER = 9 + 8 + 1 + 8  # magic, version, dtype code, number of sentences


def dictionary_problem(path: str):
    """'line N: ...' for the first line of dictionary file `path` that fairseq cannot read, or
    None. Reads it as fairseq's Dictionary.add_from_file does (a '#fairseq:' meta first line,
    '#fairseq:overwrite' flags)."""
    seen = {"<s>", "<pad>", "</s>", "<unk>"}
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    start = 1 if lines and lines[0].startswith("# ") and "#fairseq:" in lines[0] else 0
    for n, line in enumerate(lines[start:], start + 1):
        parts = line.rstrip().rsplit(" ", 1)
        overwrite = len(parts) == 2 and parts[1] == "#fairseq:overwrite"
        if overwrite:
            parts = parts[0].rsplit(" ", 1)
        if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
            return f"line {n} is not '<token> <count>': {line[:60]!r}"
        if parts[0] in seen and not overwrite:
            return f"line {n} lists {parts[0]!r} a second time"
        seen.add(parts[0])
    return None


def _checked_add_from_file(original):
    @functools.wraps(original)
    def add_from_file(self, f):
        try:
            return original(self, f)
        except (ValueError, RuntimeError) as e:
            problem = dictionary_problem(f) if isinstance(f, str) and os.path.isfile(f) else None
            if problem is None:
                raise
            raise PluginError(
                f"dictionary {f} is malformed: {problem}; {REBUILD} (it writes one "
                "'<token> <count>' line per distinct token)"
            ) from e

    return add_from_file


def check_indexed_pair(prefix: str) -> None:
    """Raise a PluginError unless prefix.idx and prefix.bin (fairseq's mmap format) are a
    complete pair: the .idx whole for the sentences it counts, the .bin exactly as long as the
    .idx says. Files in other formats are left to fairseq."""
    idx, bin_ = prefix + ".idx", prefix + ".bin"
    if not (os.path.isfile(idx) and os.path.isfile(bin_)):
        return
    idx_size, bin_size = os.path.getsize(idx), os.path.getsize(bin_)
    with open(idx, "rb") as f:
        header = f.read(_HEADER)
        if idx_size == 0:
            raise PluginError(f"{idx} is empty: {REBUILD}")
        if not _MMAP_MAGIC.startswith(header[:9]):
            return  # another --dataset-impl: fairseq reads it
        if idx_size < _HEADER:
            raise PluginError(f"{idx} is truncated ({idx_size} bytes, not even a header): {REBUILD}")
        (n,) = struct.unpack("<Q", header[18:26])
        if idx_size < _HEADER + 12 * n:
            raise PluginError(
                f"{idx} is truncated: {idx_size} bytes for {n} sentences, which take {_HEADER + 12 * n}: {REBUILD}"
            )
        import numpy as np
        from fairseq.data.indexed_dataset import _code_to_dtype

        if header[17] not in _code_to_dtype:
            raise PluginError(f"{idx} is corrupt (unknown element type {header[17]}): {REBUILD}")
        itemsize = np.dtype(_code_to_dtype[header[17]]).itemsize
        sizes = np.frombuffer(f.read(4 * n), dtype=np.int32)
        pointers = np.frombuffer(f.read(8 * n), dtype=np.int64)
    if n == 0:
        raise PluginError(
            f"{prefix}.idx/.bin hold no sentences: the text given to fairseq-preprocess for "
            f"{os.path.basename(prefix)} was empty; give it a non-empty file"
        )
    expected = int(pointers[-1]) + int(sizes[-1]) * itemsize
    if bin_size != expected:
        raise PluginError(
            f"{bin_} holds {bin_size} bytes but {idx} describes {n} sentences in {expected}: the "
            ".bin is truncated or its .idx comes from another fairseq-preprocess run; " + REBUILD
        )


def _checked_read(original):
    """MMapIndexedDataset._do_init or IndexedDataset.read_index (an empty .idx makes fairseq take
    the legacy format), checking the pair first."""

    @functools.wraps(original)
    def read(self, path):
        check_indexed_pair(path)
        return original(self, path)

    return read


def _quiet_del(original):
    """MMapIndexedDataset.__del__ that does nothing for an object whose files were never opened
    (fairseq's raises an AttributeError about _bin_buffer_mmap, printed as a second error)."""

    @functools.wraps(original)
    def __del__(self):
        if "_bin_buffer_mmap" in vars(self):
            original(self)

    return __del__


def _file_of(dataset):
    """The file prefix of an indexed dataset, looking through fairseq's wrappers (.dataset)."""
    for _ in range(10):
        path = getattr(dataset, "_path", None) or getattr(dataset, "path", None)
        if isinstance(path, str):
            return path
        dataset = getattr(dataset, "dataset", None)
    return None


def _checked_pair_init(original):
    @functools.wraps(original)
    def __init__(self, src, src_sizes, src_dict, tgt=None, *args, **kwargs):
        if tgt is not None and len(src) != len(tgt):
            raise PluginError(
                f"source {_file_of(src) or 'data'} holds {len(src)} sentences but target "
                f"{_file_of(tgt) or 'data'} holds {len(tgt)}: a split's two sides must be "
                "aligned line by line; fix the text files and rerun fairseq-preprocess"
            )
        return original(self, src, src_sizes, src_dict, tgt, *args, **kwargs)

    return __init__


def check_flags(cfg) -> None:
    """Raise a PluginError for --update-freq values below 1 (cfg: fairseq's config or a part)."""
    optimization = getattr(cfg, "optimization", cfg)
    update_freq = getattr(optimization, "update_freq", None) or []
    if any(int(u) < 1 for u in update_freq):
        raise PluginError(f"--update-freq must be >= 1 (batches per update), got {','.join(map(str, update_freq))}")


def _checked_trainer_init(original):
    @functools.wraps(original)
    def __init__(self, cfg, *args, **kwargs):
        check_flags(cfg)
        return original(self, cfg, *args, **kwargs)

    return __init__


def _checked_build_generator(original):
    @functools.wraps(original)
    def build_generator(self, models, args, *rest, **kwargs):
        beam = getattr(args, "beam", None)
        if beam is not None and beam < 1:
            raise PluginError(f"--beam must be >= 1, got {beam} (1 is greedy decoding; the paper uses 4)")
        return original(self, models, args, *rest, **kwargs)

    return build_generator


def install() -> None:
    """Wrap the fairseq functions listed in the module docstring. Idempotent."""
    from fairseq.data import Dictionary, LanguagePairDataset
    from fairseq.data.indexed_dataset import IndexedDataset, MMapIndexedDataset
    from fairseq.tasks import FairseqTask
    from fairseq.trainer import Trainer

    wrap_once(Dictionary, "add_from_file", _checked_add_from_file)
    wrap_once(MMapIndexedDataset, "_do_init", _checked_read)
    wrap_once(IndexedDataset, "read_index", _checked_read)
    wrap_once(MMapIndexedDataset, "__del__", _quiet_del)
    wrap_once(MMapIndexedDataset.Index, "__del__", _quiet_del)
    wrap_once(LanguagePairDataset, "__init__", _checked_pair_init)
    wrap_once(Trainer, "__init__", _checked_trainer_init)
    wrap_once(FairseqTask, "build_generator", _checked_build_generator)
