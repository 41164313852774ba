"""Bad input caught at the earliest point, as one-line PluginErrors (see errors.py).

Installed into fairseq when the plugin is imported (any fairseq CLI given --user-dir, the hub):
1. the data directory of the translation tasks (fairseq-train/-generate/-interactive/-validate,
   attn_only_plugin.load): missing, empty (no dict.*.txt), a --source-lang/--target-lang without
   its dictionary, or a language pair fairseq cannot infer;
2. fairseq-interactive's input: a line that is not UTF-8, is empty or whitespace only (fairseq
   would decode a hypothesis from nothing but </s>), or holds an invisible character such as a
   byte order mark or a zero-width space (hidden_chars.py);
3. a sentencepiece model (--bpe sentencepiece) that is missing, is not a sentencepiece model, or
   does not match the dictionary;
4. training that stops on NaN/inf gradients (fairseq's FloatingPointError, after it has written
   crash.pt and run its NanDetector): the error names the update, and the first weight that is no
   longer finite when there is one (a checkpoint that is not finite is refused when it is loaded:
   safe_load.py).
"""

import contextlib
import fileinput
import functools
import glob
import os

from attn_only_tools.guards.errors import PluginError
from attn_only_tools.guards.explain import find_in_chain
from attn_only_tools.guards.hidden_chars import REMOVE, find_hidden, strip_bom

from .safe_load import non_finite
from .wrap import record, wrap_once

# a sentencepiece model fits a dictionary when at least this share of its (non-special) entries
# are pieces of the model: fairseq-preprocess on sentencepiece output gives 100%; rare characters
# outside --character_coverage can appear as raw characters, hence not 100.
SPM_MIN_COVERAGE = 0.9


PAIR_FLAGS = "pass --source-lang and --target-lang"


def check_data_dir(data, source_lang=None, target_lang=None, pair_fix: str = PAIR_FLAGS) -> None:
    """Raise a PluginError unless `data` (fairseq's DATA, shards separated by ':') is a folder
    that fairseq-preprocess wrote, with the dictionaries of the language pair. pair_fix: what to
    do when the pair cannot be inferred (a command without --source-lang says its own remedy)."""
    from fairseq import utils
    from fairseq.data.data_utils import infer_language_pair

    paths = utils.split_paths(data) if data else []
    if not paths or not paths[0]:
        raise PluginError(
            "no data directory given: pass the --destdir of fairseq-preprocess "
            "(fairseq's first argument; data= in attn_only_plugin.load)"
        )
    first = paths[0]
    if "://" in first:  # a remote path fairseq's PathManager handles: leave it to fairseq
        return
    if os.path.exists(first) and not os.path.isdir(first):
        raise PluginError(
            f"data directory {first} is a file, not a folder: give the --destdir folder that fairseq-preprocess wrote"
        )
    if not os.path.isdir(first):
        raise PluginError(f"data directory {first} does not exist: give the --destdir that fairseq-preprocess wrote")
    dicts = sorted(os.path.basename(p) for p in glob.glob(os.path.join(glob.escape(first), "dict.*.txt")))
    if not dicts:
        raise PluginError(
            f"{first} holds no fairseq-preprocess output (no dict.*.txt): run fairseq-preprocess "
            f"--destdir {first} first, or give the folder it wrote"
        )
    for flag, lang in (("--source-lang", source_lang), ("--target-lang", target_lang)):
        if lang is not None and not os.path.isfile(os.path.join(first, f"dict.{lang}.txt")):
            raise PluginError(f"no dict.{lang}.txt in {first} (it has {', '.join(dicts)}): check {flag}")
    if (source_lang is None or target_lang is None) and infer_language_pair(first) == (None, None):
        raise PluginError(
            f"cannot tell the language pair of {first} (no SPLIT.SRC-TGT.* data beside {', '.join(dicts)}): {pair_fix}"
        )


def check_spm_matches_dictionary(sp, dictionary, model_path, dict_name="the dictionary") -> None:
    """Raise a PluginError if fewer than SPM_MIN_COVERAGE of the dictionary's entries are pieces
    of the sentencepiece model `sp` (a SentencePieceProcessor)."""
    symbols = [s for s in dictionary.symbols[dictionary.nspecial :] if not s.startswith("madeupword")]
    if not symbols:
        return
    unk = sp.unk_id()
    foreign = [s for s in symbols if sp.piece_to_id(s) == unk]
    if len(symbols) - len(foreign) < SPM_MIN_COVERAGE * len(symbols):
        raise PluginError(
            f"sentencepiece model {model_path} does not match {dict_name}: {len(foreign)} of the "
            f"dictionary's {len(symbols)} entries (e.g. {foreign[0]!r}) are not pieces of the model; "
            "give the spm.model that prepared this data (attn-only-spm-prepare --out)"
        )


def _decoded(raw, n: int) -> str:
    """Line n as text: bytes (a file, or a binary stdin) decoded as UTF-8; a str (a text stdin such
    as the io.StringIO that fairseq's tests and in-process callers give fairseq_cli.interactive)
    as it is, unless it holds bytes that a surrogateescape decoder could not decode."""
    if isinstance(raw, str):
        try:
            raw.encode("utf-8")
            return raw
        except UnicodeEncodeError as e:  # lone surrogates: U+DC80-U+DCFF are undecodable bytes 0x80-0xFF
            try:
                raw = raw.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:
                raise PluginError(
                    f"input line {n} is not valid text (a lone surrogate, U+{ord(raw[e.start]):04X} at "
                    f"column {e.start + 1}): give UTF-8 text"
                ) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PluginError(
            f"input line {n} is not UTF-8 text (byte 0x{raw[e.start]:02x} at byte {e.start}): "
            "convert the input to UTF-8 first, e.g. iconv -f latin1 -t utf-8"
        ) from None


def read_input_lines(input, buffer_size):
    """fairseq-interactive's buffered_read, refusing non-UTF-8 and empty lines by line number.
    A file and a binary stdin are read as bytes; a text sys.stdin (no .buffer) gives str lines."""
    buffer = []
    with fileinput.input(files=[input], mode="rb") as h:
        for n, raw in enumerate(h, 1):
            line = strip_bom(_decoded(raw, n), n == 1).strip()
            if not line:
                raise PluginError(
                    f"input line {n} is empty or whitespace only: remove empty lines before "
                    "translating, e.g. grep -v '^[[:space:]]*$'"
                )
            hidden = find_hidden(line)
            if hidden:
                raise PluginError(
                    f"input line {n} holds an invisible character, {hidden[1]} at column {hidden[0]}, "
                    f"which would be translated as part of a word: remove it first, e.g. "
                    f"{REMOVE.replace(' -i', '').replace('FILE', '')}< input"
                )
            buffer.append(line)
            if len(buffer) >= buffer_size:
                yield buffer
                buffer = []
    if buffer:
        yield buffer


def _checked_setup_task(original):
    @functools.wraps(original)
    def setup_task(cls, cfg, **kwargs):
        check_data_dir(getattr(cfg, "data", None), getattr(cfg, "source_lang", None), getattr(cfg, "target_lang", None))
        return original.__func__(cls, cfg, **kwargs)

    return classmethod(setup_task)


@contextlib.contextmanager
def reading_sentencepiece(path, flag: str = ""):
    """One-line errors around loading the sentencepiece model at `path`: missing, or not a model.
    `flag` names the option that gave the path, for the message's advice."""
    give = f"give {flag + ' ' if flag else ''}the spm.model that prepared the data (attn-only-spm-prepare --out)"
    if path is None or path == "???" or ("://" not in str(path) and not os.path.isfile(path)):
        raise PluginError(f"no sentencepiece model at {path}: {give}")
    try:
        yield
    except (RuntimeError, OSError) as e:  # sentencepiece: "could not parse ModelProto from ..."
        raise PluginError(f"{path} is not a sentencepiece model ({str(e).strip()[:80]}): {give}") from e


def _checked_spm_init(original):
    @functools.wraps(original)
    def __init__(self, cfg):
        with reading_sentencepiece(getattr(cfg, "sentencepiece_model", None), "--sentencepiece-model"):
            original(self, cfg)

    return __init__


def _checked_build_bpe(original):
    @functools.wraps(original)
    def build_bpe(self, args):
        bpe = original(self, args)
        sp = getattr(bpe, "sp", None)
        dictionary = getattr(self, "source_dictionary", None)
        if sp is not None and dictionary is not None and hasattr(sp, "piece_to_id"):
            check_spm_matches_dictionary(
                sp, dictionary, getattr(args, "sentencepiece_model", "?"), "the source dictionary"
            )
        return bpe

    return build_bpe


def _checked_train_step(original):
    @functools.wraps(original)
    def train_step(self, samples, *args, **kwargs):
        try:
            return original(self, samples, *args, **kwargs)
        except Exception as caught:
            # fairseq raises FloatingPointError after re-running the step under its NanDetector, whose
            # old-style backward hooks can themselves fail on an encoder that returns a dict (torch >= 2:
            # StopIteration): the FloatingPointError is then the context of that failure.
            e = find_in_chain(caught, lambda x: isinstance(x, FloatingPointError))
            if e is None:
                raise
            update = self.get_num_updates() + 1
            first = (str(e).strip().splitlines() or ["gradients are Nan/Inf"])[0]
            save_dir = getattr(getattr(self.cfg, "checkpoint", None), "save_dir", "--save-dir")
            if "Nan/Inf" in first:
                crash = os.path.join(save_dir, "crash.pt")
                weights = non_finite(dict(self.model.named_parameters()))
                if weights is None:
                    raise PluginError(
                        f"training stopped at update {update}: the loss or gradients are NaN/inf; lower the learning "
                        "rate (--lr, --lr-multiplier), raise --warmup-updates or set --clip-norm, and run again (it "
                        "resumes from checkpoint_last.pt, which is left as it was; fairseq wrote the failing state to "
                        f"{crash})"
                    ) from caught
                name, bad, total = weights
                raise PluginError(
                    f"training stopped at update {update}: the loss or gradients are NaN/inf, and so is the weight "
                    f"{name} ({bad} of {total} values); lower the learning rate (--lr, --lr-multiplier), raise "
                    "--warmup-updates or set --clip-norm, and run again from a checkpoint saved before the weights "
                    "diverged (checkpoint_last.pt is left as it was; if it was saved after, fairseq-train refuses it "
                    f"by name: give --restore-file an earlier checkpoint_E_U.pt; the failing state is in {crash})"
                ) from caught
            raise PluginError(f"training stopped at update {update}: {first}") from caught

    return train_step


def install() -> None:
    """Wrap the fairseq entry points listed in the module docstring. Idempotent."""
    import sys

    from fairseq.data.encoders.sentencepiece_bpe import SentencepieceBPE
    from fairseq.tasks.fairseq_task import FairseqTask
    from fairseq.tasks.translation import TranslationTask
    from fairseq.trainer import Trainer

    wrap_once(TranslationTask, "setup_task", _checked_setup_task, stored=True)
    wrap_once(SentencepieceBPE, "__init__", _checked_spm_init)
    wrap_once(FairseqTask, "build_bpe", _checked_build_bpe)
    wrap_once(Trainer, "train_step", _checked_train_step)
    interactive = sys.modules.get("fairseq_cli.interactive")  # only when fairseq-interactive runs: importing
    if interactive is not None:  # it would configure the root logger for everyone else
        interactive.buffered_read = read_input_lines
        record("fairseq_cli.interactive.buffered_read")
