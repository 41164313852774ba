"""Python API: load a trained checkpoint and translate plain strings.

    import attn_only_plugin
    mt = attn_only_plugin.load("work/quickstart/checkpoints", checkpoint_file="checkpoint_avg.pt",
                               data="work/quickstart/data-bin", spm_model="work/quickstart/spm/spm.model")
    mt.translate(["Click OK.", "Choose Tools - Options."], beam=4, lenpen=0.6)

A thin layer over fairseq's GeneratorHubInterface (what `TransformerModel.from_pretrained`
returns), so `sample`, `generate`, `.cuda()` and the rest work as in fairseq. sentencepiece is
applied to the input and removed from the output inside. Checkpoints load with torch's safe
loader (see safe_load.py).
"""

import contextlib
import re
from collections.abc import Iterable, Mapping, Set
from pathlib import Path
from typing import List, Optional, Union

from attn_only_tools.guards.errors import PluginError
from attn_only_tools.guards.hidden_chars import find_hidden

from ..tasks.translation_paper import SPEED_PATHS


def load(
    checkpoint_dir: Union[str, Path],
    checkpoint_file: str = "checkpoint_last.pt",
    data: Optional[Union[str, Path]] = None,
    spm_model: Optional[Union[str, Path]] = None,
    device: str = "cpu",
    **overrides,
):
    """Load checkpoint_dir/checkpoint_file with the dictionaries in `data` (default: the
    checkpoint dir) and the sentencepiece model `spm_model` (None: input is already segmented)."""
    from ..models.transformer import AttnOnlyTransformer, TransformerConfig

    check_device(device)
    _unknown(
        overrides,
        _fairseq_options("common", "common_eval", "generation", "checkpoint", "dataset")
        | {f for f in TransformerConfig.__dataclass_fields__}
        | {"source_lang", "target_lang"},
        "load()",
    )
    checkpoint_dir = Path(checkpoint_dir)
    if not (checkpoint_dir / checkpoint_file).is_file():
        raise PluginError(
            f"no checkpoint {checkpoint_dir / checkpoint_file}: give the folder and file name "
            "that fairseq-train (or attn-only-average-checkpoints) wrote"
        )
    if data is not None and not Path(data).is_dir():
        raise PluginError(
            f"data directory {data} does not exist: give the --destdir that fairseq-preprocess wrote "
            "(the folder with dict.*.txt)"
        )
    if spm_model is not None and not Path(spm_model).is_file():
        raise PluginError(f"no sentencepiece model at {spm_model}: give the spm.model used to prepare the data")
    if str(device).startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            from attn_only_tools.guards.explain import NO_GPU

            raise PluginError(f"device={device!r}: {NO_GPU}")
    kwargs = dict(overrides)
    if spm_model is not None:
        kwargs.update(bpe="sentencepiece", sentencepiece_model=str(spm_model))
    hub = AttnOnlyTransformer.from_pretrained(
        str(checkpoint_dir),
        checkpoint_file=checkpoint_file,
        data_name_or_path=str(data or checkpoint_dir),
        user_dir=str(Path(__file__).parent),
        **kwargs,
    )
    if spm_model is not None:
        from ..guards.input_checks import check_spm_matches_dictionary

        check_spm_matches_dictionary(
            hub.bpe.sp, hub.src_dict, spm_model, f"the source dictionary in {data or checkpoint_dir}"
        )
    hub.eval()
    if device != "cpu":
        hub = hub.to(device)
    return Translator(hub)


class Translator:
    """Translate strings (one or a batch) with beam search; see load()."""

    def __init__(self, hub):
        self.hub = hub

    def translate(
        self,
        sentences: Union[str, List[str]],
        beam: int = 4,
        lenpen: float = 0.6,
        max_len_a: float = 1.0,
        max_len_b: int = 50,
        **kwargs,
    ):
        """Section 6.1 defaults: beam 4, alpha 0.6, maximum length = input length + 50. The decoding
        options of the translation_paper task also go here: lenpen_style, beam_stop, beam_patience,
        batched_search, cuda_graph_decoding, cuda_graph_search, beam_reorder_kernel,
        decode_attention_kernel (e.g. beam_stop="paper", the paper's search: tasks/paper_search.py;
        the last four with a model loaded with static_decoding_cache=True)."""
        check_decoding(beam, lenpen, max_len_a, max_len_b)
        task_options = {k: kwargs.pop(k) for k in TASK_DECODING if k in kwargs}
        _unknown(kwargs, _fairseq_options("generation"), "translate()")
        with _task_options(self.hub.task, task_options):
            return self._translate(sentences, beam, lenpen, max_len_a, max_len_b, **kwargs)

    def _translate(self, sentences, beam, lenpen, max_len_a, max_len_b, **kwargs):
        single = isinstance(sentences, str)
        batch = [sentences] if single else _batch(sentences)
        for i, s in enumerate(batch):
            _check_sentence(_not_bytes(s, f"sentence {i}"), f"sentence {i}")
        try:
            out = self.hub.translate(
                batch, beam=beam, lenpen=lenpen, max_len_a=max_len_a, max_len_b=max_len_b, **kwargs
            )
        except Exception as e:  # fairseq's batching refuses an input longer than the positions table
            found = re.match(r"Size of sample #(\d+) is invalid \(=\((?:np\.int64\()?(\d+)", str(e))
            if not found:
                raise
            raise too_long(int(found.group(1)), int(found.group(2)), self.hub.max_positions[0]) from None
        return out[0] if single else out

    def attention(self, sentence: str, target: Optional[str] = None):
        """Per-head attention weights for one sentence pair (the model's own beam output when no
        target is given): {"encoder": (layer, head, S, S), "decoder": (layer, head, T, T),
        "cross": (layer, head, T, S)} float tensors, plus the token labels
        {"source_tokens": [...], "target_tokens": [...]} (sentencepiece pieces; "▁" starts a word).
        S counts the source pieces and </s>; T the target pieces and </s> (the decoder input is
        </s> followed by the target, fairseq's convention)."""
        import torch

        _check_sentence(_not_bytes(sentence, "the sentence"), "the sentence")
        if target is not None:
            _check_sentence(_not_bytes(target, "the target"), "the target")
        target = self.translate(sentence) if target is None else target
        model, tgt_dict = self.hub.models[0], self.hub.task.target_dictionary
        src = self.hub.encode(sentence)  # (S,) ends with </s>
        tgt = tgt_dict.encode_line(self.hub.apply_bpe(self.hub.tokenize(target)), add_if_not_exist=False).long()
        prev = torch.cat([tgt.new_tensor([tgt_dict.eos()]), tgt[:-1]])  # (T,) decoder input
        device = next(model.parameters()).device
        w = model.attention_weights(src[None].to(device), prev[None].to(device))
        out = {k: v[:, 0].float().cpu() for k, v in w.items()}  # drop the batch axis
        out["source_tokens"] = [self.hub.src_dict[i] for i in src.tolist()]
        out["target_tokens"] = [tgt_dict[i] for i in tgt.tolist()]
        return out


# translation_paper's decoding options: its search's and --batched-search's speed paths
TASK_DECODING = ("lenpen_style", "beam_stop", "beam_patience", "batched_search", *SPEED_PATHS)


@contextlib.contextmanager
def _task_options(task, options: dict):
    """The task's config with these decoding options for the duration of a call."""
    missing = [k for k in options if getattr(task.cfg, k, None) is None]
    if missing:
        raise PluginError(
            f"translate() got {', '.join(missing)}, which this checkpoint's task "
            f"({getattr(task.cfg, '_name', type(task).__name__)}) does not have: they need a model trained "
            "with --task translation_paper or constituency_parsing"
        )
    saved = {k: getattr(task.cfg, k) for k in options}
    try:
        for k, v in options.items():
            try:
                setattr(task.cfg, k, v)
            except ValueError as e:  # omegaconf's ValidationError: e.g. beam_stop="best"
                raise PluginError(f"translate(): {k}={v!r} is not one of its values ({type(e).__name__})") from None
        yield
    finally:
        for k, v in saved.items():
            setattr(task.cfg, k, v)


def _whole(value, name: str, low: int) -> None:
    """A whole number >= low (not a bool, a float or a string), or a one-line PluginError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise PluginError(f"{name}={value!r}: give a whole number >= {low}")


def _real(value, name: str, low: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= low:
        raise PluginError(f"{name}={value!r}: give a number >= {low}")


def check_decoding(beam, lenpen, max_len_a, max_len_b, batch_size=None) -> None:
    """The decoding arguments of both translate() faces, checked alike in one line each (fairseq
    and CTranslate2 silently turned a beam of 0, a negative length or batch size into something)."""
    _whole(beam, "beam", 1)
    _real(lenpen, "lenpen", 0.0)
    _real(max_len_a, "max_len_a", 0.0)
    _whole(max_len_b, "max_len_b", 0)
    if batch_size is not None:
        _whole(batch_size, "batch_size", 1)


def check_device(device) -> None:
    """'cpu', 'cuda' or 'cuda:N' (what both faces understand), else one line."""
    if not isinstance(device, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise PluginError(f"device={device!r}: give 'cpu', 'cuda' or 'cuda:N' (lower case)")


def _unknown(names, known, where: str) -> None:
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise PluginError(
            f"{where} got unknown keyword argument{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(unknown)}: check the spelling (fairseq's option names with _ for -)"
        )


def _fairseq_options(*groups) -> set:
    """The option names of fairseq's config groups (FairseqConfig's fields, e.g. 'generation')."""
    import dataclasses

    from fairseq.dataclass.configs import FairseqConfig

    config = FairseqConfig()
    return {f.name for g in groups for f in dataclasses.fields(getattr(config, g))}


def too_long(i: int, n: int, positions: int) -> PluginError:
    """The error for sentence i of n tokens (</s> included) when the model has `positions` source positions."""
    return PluginError(
        f"sentence {i} is {n} tokens long (with </s>), more than the model's {positions} source "
        "positions: split or shorten it"
    )


def _batch(sentences) -> list:
    """The list of sentences to translate: any ordered collection of them, not a dict (whose keys
    list() would give), a set (whose order is arbitrary) or a single non-string."""
    _not_bytes(sentences, "sentences")
    if isinstance(sentences, Mapping):
        raise PluginError(
            f"sentences is a {type(sentences).__name__}, not a list: it would translate its keys; "
            "pass a list of strings, e.g. list(d.values())"
        )
    if isinstance(sentences, Set):
        raise PluginError(
            f"sentences is a {type(sentences).__name__}, whose order is arbitrary: pass a list of "
            "strings, so that the translations come back in its order"
        )
    if not isinstance(sentences, Iterable):
        raise PluginError(f"sentences is {type(sentences).__name__}, not str: pass a string or a list of strings")
    return list(sentences)


def _not_bytes(value, what: str):
    if isinstance(value, (bytes, bytearray)):
        raise PluginError(f"{what} is bytes, not str: decode it first, e.g. text.decode('utf-8')")
    return value


def _check_sentence(s, what: str) -> None:
    """Refuse what the model cannot translate: non-strings, empty lines, text that is not Unicode,
    invisible characters (hidden_chars.py)."""
    if not isinstance(s, str):
        raise PluginError(f"{what} is {type(s).__name__}, not str: pass a string or a list of strings")
    if not s.strip():
        raise PluginError(f"{what} is empty or whitespace only: remove it before translating")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:  # lone surrogates, e.g. bytes decoded with errors="surrogateescape"
        raise PluginError(
            f"{what} is not valid Unicode text ({e.reason} at character {e.start}): read the input "
            "as UTF-8 (encoding='utf-8', errors='strict'), converting other encodings first"
        ) from None
    hidden = find_hidden(s)
    if hidden:
        raise PluginError(
            f"{what} holds an invisible character, {hidden[1]} at column {hidden[0]}, which would be "
            "translated as part of a word: remove it first"
        )
