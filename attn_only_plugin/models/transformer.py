"""The Transformer of Vaswani et al. (2017), section 3, registered with fairseq as
`attn_only_transformer`; its architectures (Table 3, section 6.3) are in architectures.py.

Tensor layout: batch first, (B, T, d_model); see encoder_decoder.py.
"""
from dataclasses import dataclass, field, fields
from typing import Optional

import torch
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import FairseqEncoderDecoderModel, register_model
from torch import nn

from ..errors import PluginError
from .encoder_decoder import Decoder, Encoder

SHARING = ChoiceEnum(["all", "decoder", "none"])
# parameters with one row per dictionary entry: a size mismatch there means other dictionaries
_VOCAB_TABLES = ("encoder.embed.tokens.weight", "decoder.embed.tokens.weight", "decoder.output_weight")


@dataclass
class TransformerConfig(FairseqDataclass):
    """Defaults are the base model, Table 3 "base" row and section 5."""
    encoder_layers: int = field(default=6, metadata={"help": "N, encoder layers (Table 3 base)"})
    decoder_layers: int = field(default=6, metadata={"help": "N, decoder layers (Table 3 base)"})
    d_model: int = field(default=512, metadata={"help": "d_model (Table 3 base)"})
    d_ff: int = field(default=2048, metadata={"help": "d_ff, FFN inner size (Table 3 base)"})
    heads: int = field(default=8, metadata={"help": "h, attention heads (Table 3 base)"})
    d_k: Optional[int] = field(default=None, metadata={
        "help": "d_k, per-head query/key size; default d_model/h (section 3.2.2; Table 3 rows A, B)"})
    d_v: Optional[int] = field(default=None, metadata={
        "help": "d_v, per-head value size; default d_model/h (section 3.2.2; Table 3 row A)"})
    dropout: float = field(default=0.1, metadata={
        "help": "P_drop, residual and embedding dropout (section 5.4, Table 3 base)"})
    attention_dropout: float = field(default=0.0, metadata={
        "help": "dropout on attention weights (not in the paper for translation; 0.2 for parsing)"})
    relu_dropout: float = field(default=0.0, metadata={
        "help": "dropout on the FFN's ReLU activations (not in the paper)"})
    learned_pos: bool = field(default=False, metadata={
        "help": "learned positional embeddings instead of sinusoids (Table 3 row E)"})
    pre_norm: bool = field(default=False, metadata={
        "help": "LayerNorm before each sub-layer (not the paper's post-norm, section 3.1)"})
    embedding_sharing: SHARING = field(default="all", metadata={
        "help": "section 3.4: 'all' shares source, target and pre-softmax weights (needs "
                "fairseq-preprocess --joined-dictionary); 'decoder' target + pre-softmax; 'none'"})
    max_source_positions: int = field(default=1024, metadata={"help": "longest source (positions)"})
    max_target_positions: int = field(default=1024, metadata={"help": "longest target (positions)"})
    alignment_layer: int = field(default=-1, metadata={
        "help": "decoder layer whose encoder-decoder attention (mean over heads) gives "
                "--print-alignment alignments; -1 = last"})
    attention_window: Optional[int] = field(default=None, metadata={
        "help": "R: self-attention restricted to positions within R of the query (encoder, both sides) "
                "or the query and its R predecessors (decoder); default full (Table 1's restricted row, "
                "section 4; docs/attention_variants.md)"})
    relative_positions: Optional[int] = field(default=None, metadata={
        "help": "K: Shaw et al. (2018) relative position representations clipped at distance K in every "
                "self-attention layer; default off (docs/attention_variants.md)"})
    no_absolute_positions: bool = field(default=False, metadata={
        "help": "no positional encoding added to the embeddings (section 3.5's sinusoids or --learned-pos "
                "dropped); for use with --relative-positions"})


def full_config(cfg) -> TransformerConfig:
    """A complete TransformerConfig from a Namespace, DictConfig or partial YAML config."""
    values = {f.name: getattr(cfg, f.name) for f in fields(TransformerConfig)
              if getattr(cfg, f.name, None) is not None}
    values["embedding_sharing"] = str(values.get("embedding_sharing", "all"))
    return TransformerConfig(**values)


def validate(cfg: TransformerConfig) -> None:
    for name in ("encoder_layers", "decoder_layers", "d_model", "d_ff", "heads"):
        if getattr(cfg, name) < 1:
            raise PluginError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(cfg, name)}")
    if cfg.d_model % cfg.heads and (cfg.d_k is None or cfg.d_v is None):
        raise PluginError(f"d_model={cfg.d_model} is not divisible by h={cfg.heads}: choose --heads that "
                          "divides --d-model, or set --d-k and --d-v explicitly (section 3.2.2)")
    for name in ("d_k", "d_v"):  # None: d_model / h; 0 is not that (it would be stored as 0 in the checkpoint)
        if getattr(cfg, name) is not None and getattr(cfg, name) < 1:
            raise PluginError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(cfg, name)}: leave it out for "
                              f"d_model / h = {cfg.d_model // cfg.heads} (a checkpoint that stores 0 was trained with "
                              f"d_model / h: load it with --model-overrides \"{{'{name}': None}}\")")
    for name in ("dropout", "attention_dropout", "relu_dropout"):
        if not 0.0 <= getattr(cfg, name) < 1.0:
            raise PluginError(f"--{name.replace('_', '-')} must be in [0, 1), got {getattr(cfg, name)}")
    for name in ("attention_window", "relative_positions"):  # None: off
        if getattr(cfg, name) is not None and getattr(cfg, name) < 1:
            raise PluginError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(cfg, name)}: leave it out for "
                              + ("full self-attention" if name == "attention_window" else "no relative positions"))
    if not -1 <= cfg.alignment_layer < cfg.decoder_layers:
        raise PluginError(f"--alignment-layer must be a decoder layer, 0 to {cfg.decoder_layers - 1}, or -1 for the "
                          f"last, got {cfg.alignment_layer}")


def build_embedding(dictionary, d_model: int) -> nn.Embedding:
    """Token table; N(0, d_model^-0.5) so that sqrt(d_model) * E has unit scale (section 3.4)."""
    emb = nn.Embedding(len(dictionary), d_model, padding_idx=dictionary.pad())
    nn.init.normal_(emb.weight, mean=0.0, std=d_model ** -0.5)
    nn.init.zeros_(emb.weight[dictionary.pad()])
    return emb


@register_model("attn_only_transformer", dataclass=TransformerConfig)
class AttnOnlyTransformer(FairseqEncoderDecoderModel):
    """Section 3: encoder-decoder Transformer. Our own layers on fairseq's base interfaces."""
    gives_real_only = True  # forward(..., real_only=True): training logits of real target tokens only

    def __init__(self, cfg: TransformerConfig, encoder: Encoder, decoder: Decoder):
        super().__init__(encoder, decoder)
        self.cfg = cfg

    @classmethod
    def build_model(cls, cfg, task):
        cfg = full_config(cfg)
        validate(cfg)
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        if cfg.embedding_sharing == "all":
            if src_dict != tgt_dict:
                raise PluginError("--embedding-sharing all (section 3.4) needs one joined dictionary: "
                                  "run fairseq-preprocess with --joined-dictionary, or pass "
                                  "--embedding-sharing decoder")
            enc_emb = dec_emb = build_embedding(src_dict, cfg.d_model)
        else:
            enc_emb, dec_emb = build_embedding(src_dict, cfg.d_model), build_embedding(tgt_dict, cfg.d_model)
        output_weight = dec_emb.weight if cfg.embedding_sharing != "none" else None
        encoder = Encoder(cfg, src_dict, enc_emb)
        decoder = Decoder(cfg, tgt_dict, dec_emb, output_weight)
        return cls(cfg, encoder, decoder)

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        """Refuse, in one line, a checkpoint whose tensors do not fit this model."""
        own = self.state_dict()
        for name, value in state_dict.items():
            if name in own and own[name].shape != value.shape:
                if name in _VOCAB_TABLES and own[name].shape[1:] == value.shape[1:]:
                    side = "target" if name.startswith("decoder") else "source"
                    raise PluginError(
                        f"the {side} dictionary does not match the checkpoint: it has {own[name].shape[0]} entries "
                        f"but the checkpoint's {name} has {value.shape[0]}; use the data directory (dict.*.txt) "
                        "the checkpoint was trained with")
                raise PluginError(
                    f"checkpoint does not fit this model: {name} is {tuple(value.shape)} in the "
                    f"checkpoint but {tuple(own[name].shape)} here; use the architecture and size flags "
                    "the checkpoint was trained with, or a new --save-dir")
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise PluginError(
                "checkpoint does not fit this model: "
                + (f"missing {missing[0]} (+{len(missing) - 1} more) " if missing else "")
                + (f"unexpected {unexpected[0]} (+{len(unexpected) - 1} more) " if unexpected else "")
                + "- was it written by another architecture? Use its own --arch, or a new --save-dir")
        return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)

    def prepare_for_inference_(self, cfg):
        """fairseq-generate/-interactive call this: with --print-alignment the decoder returns the
        encoder-decoder attention of alignment_layer (mean over heads) at every step."""
        super().prepare_for_inference_(cfg)
        generation = getattr(cfg, "generation", None)
        self.decoder.need_attn = bool(generation is not None and getattr(generation, "print_alignment", None))

    def num_parameters(self) -> int:
        """Distinct trainable parameters (a shared matrix counted once)."""
        return sum(p.numel() for p in {id(p): p for p in self.parameters()}.values())

    @torch.no_grad()
    def attention_weights(self, src_tokens, prev_output_tokens):
        """Per-head attention weights of every layer: a dict of (layer, B, h, T, S)-shaped
        tensors for "encoder" self-attention, "decoder" self-attention and "cross" attention."""
        self.eval()
        enc = self.encoder(src_tokens, need_weights=True)
        _, extra = self.decoder(prev_output_tokens, encoder_out=enc, need_all_weights=True)
        return {"encoder": torch.stack(enc["attn"]), "decoder": torch.stack(extra["self_attn"]),
                "cross": torch.stack(extra["cross_attn"])}
