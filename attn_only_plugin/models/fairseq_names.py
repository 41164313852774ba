"""fairseq's transformer's flag names, accepted as aliases of ours: the one edge where they meet.

A `fairseq-train` command written for `--arch transformer` (`--encoder-embed-dim 512
--encoder-ffn-embed-dim 2048 --share-all-embeddings ...`) runs with `--user-dir attn_only_plugin
--arch transformer_base` unchanged. The paper's model has one d_model, d_ff, h, norm placement
and kind of positions for the encoder and the decoder (section 3.1, Table 3), so an encoder and a
decoder alias that disagree, a one-sided flag that fairseq would not apply to both sides (any but
--encoder-embed-dim and --encoder-ffn-embed-dim, from which fairseq derives the decoder's), and an
alias that disagrees with the paper-named flag also given are refused in one line.

On the command line the aliases are mapped before the architecture's preset (as fairseq's own
presets read them), so `--arch transformer_big --encoder-embed-dim 512` is a 512-wide big model
and an alias not given never overrides a preset. In a config file (or --model-overrides) an
alias sets its field unless that field is given too with another value than its default.
"""

from dataclasses import dataclass, field, fields
from typing import Callable, Optional

from fairseq.dataclass import FairseqDataclass

from attn_only_tools.guards.errors import PluginError

# our field: (encoder alias, decoder alias); one value for both sides in the paper's model
PAIRS = {
    "d_model": ("encoder_embed_dim", "decoder_embed_dim"),
    "d_ff": ("encoder_ffn_embed_dim", "decoder_ffn_embed_dim"),
    "heads": ("encoder_attention_heads", "decoder_attention_heads"),
    "pre_norm": ("encoder_normalize_before", "decoder_normalize_before"),
    "learned_pos": ("encoder_learned_pos", "decoder_learned_pos"),
}
SYMBOL = {
    "d_model": "d_model",
    "d_ff": "d_ff",
    "heads": "h",
    "pre_norm": "norm placement",
    "learned_pos": "kind of positions",
}
SINGLE = {"relu_dropout": "activation_dropout"}
SHARING = {"share_all_embeddings": "all", "share_decoder_input_output_embed": "decoder"}


def _alias(help_for: str, default=None):
    return field(default=default, metadata={"help": f"fairseq's transformer's name for {help_for}"})


@dataclass
class FairseqNames(FairseqDataclass):
    """fairseq's flag names; mapped onto the paper-named fields by to_paper_names."""

    encoder_embed_dim: Optional[int] = _alias("--d-model")
    decoder_embed_dim: Optional[int] = _alias("--d-model")
    encoder_ffn_embed_dim: Optional[int] = _alias("--d-ff")
    decoder_ffn_embed_dim: Optional[int] = _alias("--d-ff")
    encoder_attention_heads: Optional[int] = _alias("--heads")
    decoder_attention_heads: Optional[int] = _alias("--heads")
    encoder_normalize_before: bool = _alias("--pre-norm (with --decoder-normalize-before)", False)
    decoder_normalize_before: bool = _alias("--pre-norm (with --encoder-normalize-before)", False)
    encoder_learned_pos: bool = _alias("--learned-pos (with --decoder-learned-pos)", False)
    decoder_learned_pos: bool = _alias("--learned-pos (with --encoder-learned-pos)", False)
    activation_dropout: Optional[float] = _alias("--relu-dropout")
    activation_fn: Optional[str] = _alias("the FFN's activation: relu only (section 3.3)")
    share_all_embeddings: bool = _alias("--embedding-sharing all", False)
    share_decoder_input_output_embed: bool = _alias("--embedding-sharing decoder", False)


ALIASES = [f.name for f in fields(FairseqNames)]


def _flag(name: str, value=None) -> str:
    return "--" + name.replace("_", "-") + ("" if value is None or value is True else f" {value}")


def to_paper_names(get: Callable, put: Callable, given: Callable) -> None:
    """Move every alias that is set onto our field. get(name) -> value, put(name, value),
    given(name) -> whether our field was given (and so must agree). The callers clear the aliases."""
    for ours, (enc, dec) in PAIRS.items():
        said = {a: get(a) for a in (enc, dec) if get(a) is not None and get(a) is not False}
        if not said:
            continue
        first, value = next(iter(said.items()))
        if len(set(said.values())) > 1:
            raise PluginError(
                f"{_flag(enc, said[enc])} and {_flag(dec, said[dec])} differ: the paper's model has one "
                f"{SYMBOL[ours]} for the encoder and decoder; give one value (or {_flag(ours)})"
            )
        if len(said) == 1 and (isinstance(value, bool) or first == dec or ours == "heads"):
            # fairseq derives only the decoder's sizes from the encoder's (--encoder-embed-dim and
            # --encoder-ffn-embed-dim alone set both, as here); any other one-sided flag leaves
            # fairseq's other side at its own default, a model with two values that ours cannot hold
            other = dec if first == enc else enc
            raise PluginError(
                f"{_flag(first, value)} without {_flag(other)}: fairseq's transformer keeps the other "
                f"side at its default, and our model has one {SYMBOL[ours]} for both; give both "
                f"(or {_flag(ours)}) or neither"
            )
        _set(ours, value, first, value, get, put, given)
    for ours, alias in SINGLE.items():
        if get(alias) is not None:
            _set(ours, get(alias), alias, get(alias), get, put, given)
    shared = [a for a in SHARING if get(a)]
    if shared:
        _set("embedding_sharing", SHARING[shared[0]], shared[0], True, get, put, given)
    if get("activation_fn") not in (None, "relu"):
        raise PluginError(
            f"{_flag('activation_fn', get('activation_fn'))}: the paper's position-wise FFN uses ReLU "
            "(section 3.3), the only activation our model has; leave the flag out or give relu"
        )


def _set(ours: str, value, alias: str, alias_value, get, put, given) -> None:
    if given(ours) and str(get(ours)) != str(value):
        raise PluginError(
            f"{_flag(alias, alias_value)} disagrees with {_flag(ours, get(ours))}: they name the same "
            "setting (docs/fairseq_features.md); give one of them"
        )
    put(ours, value)


def map_namespace(args) -> None:
    """Command line (argparse Namespace, before the architecture's preset): a field was given
    when it is present (fairseq leaves out the ones not given) or, for a flag, when it is set."""
    to_paper_names(
        lambda n: getattr(args, n, None),
        lambda n, v: setattr(args, n, v),
        lambda n: getattr(args, n, None) is not None and getattr(args, n) is not False,
    )
    for alias in ALIASES:  # as if not given: the stored config holds our names only
        if hasattr(args, alias):
            delattr(args, alias)


def map_values(values: dict, defaults) -> None:
    """A config (YAML, --model-overrides, a stored checkpoint's): a field counts as given when it
    differs from its default."""
    to_paper_names(
        values.get, values.__setitem__, lambda n: n in values and str(values[n]) != str(getattr(defaults, n))
    )
    for alias in ALIASES:
        values.pop(alias, None)
