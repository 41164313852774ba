"""The encoder and decoder stacks, section 3.1 of Vaswani et al. (2017), on fairseq's interfaces.

Three training options that are not the paper's sit in the stack loops, outside the layers' maths:
LayerDrop (Fan et al. 2019: a whole layer skipped with probability p in each training step),
activation checkpointing (a layer's activations recomputed in the backward pass, not kept) and
torch.compile of the layers (--compile-layers, speed only: modules/compiled.py).

Tensor layout: batch first everywhere, (B, S, d_model) in the encoder and (B, T, d_model) in the
decoder. fairseq's own transformer is time first; our encoder_out dict is read only by our
decoder and reordered only by our encoder, so nothing outside sees the difference.
"""

import contextlib
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.models import FairseqEncoder, FairseqIncrementalDecoder
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ..modules import DecoderLayer, EncoderLayer, TransformerEmbedding
from ..modules.compiled import compile_layers, layer_to_run
from ..modules.decoding_state import DecodingState, select_rows, shared_rows
from ..modules.packing import padded, source_packing, target_packing

IncrementalState = Dict[str, Dict[str, Optional[Tensor]]]


def kept_layers(layers: nn.ModuleList, layerdrop: float, training: bool) -> List[Tuple[int, nn.Module]]:
    """LayerDrop (Fan et al. 2019; not in the paper): while training, each layer is left out with
    probability `layerdrop`, drawn afresh every step; every layer at inference. (index, layer) pairs."""
    if not training or layerdrop == 0.0:
        return list(enumerate(layers))
    dropped = torch.rand(len(layers)) < layerdrop  # (N,) one draw per layer
    return [(i, layer) for i, layer in enumerate(layers) if not dropped[i]]


class Stack:
    """How the encoder and decoder run their layers in training (the options above); a mixin."""

    def _setup_stack(self, cfg, side: str) -> None:
        self.layerdrop = getattr(cfg, f"{side}_layerdrop", 0.0)
        self.offload = bool(getattr(cfg, "offload_activations", False))
        self.recompute = self.offload or bool(getattr(cfg, "checkpoint_activations", False))
        self.compiled = compile_layers(self.layers) if getattr(cfg, "compile_layers", False) else {}
        self.varlen = bool(getattr(cfg, "varlen_attention", False))  # attention on packed rows (modules/varlen.py)

    def run_layer(self, layer: nn.Module, *args, **kwargs):
        """layer(*args, **kwargs), through torch.compile in training with --compile-layers
        (modules/compiled.py), and with --checkpoint-activations recomputed (below)."""
        return self._run_layer(layer_to_run(layer, self.compiled, self.training), *args, **kwargs)

    def _run_layer(self, layer, *args, **kwargs):
        """layer(*args, **kwargs); with --checkpoint-activations, while gradients are computed, only
        its inputs are kept and it runs again in the backward pass (torch restores the RNG state,
        so the dropout masks are the same)."""
        if self.recompute and self.training and torch.is_grad_enabled():
            return checkpoint(layer, *args, use_reentrant=False, **kwargs)
        return layer(*args, **kwargs)

    def saved_tensors_place(self):
        """--offload-activations: what the backward pass keeps goes to CPU memory meanwhile."""
        if self.offload and self.training and torch.is_grad_enabled():
            return torch.autograd.graph.save_on_cpu(pin_memory=torch.cuda.is_available())
        return contextlib.nullcontext()


def _layer_args(cfg) -> dict:
    """Map the config (fairseq names at this one edge) to the paper's symbols."""
    default = cfg.d_model // cfg.heads  # section 3.2.2: d_k = d_v = d_model / h unless given
    return dict(
        d_model=cfg.d_model,
        d_ff=cfg.d_ff,
        h=cfg.heads,
        d_k=default if cfg.d_k is None else cfg.d_k,
        d_v=default if cfg.d_v is None else cfg.d_v,
        dropout=cfg.dropout,
        attention_dropout=cfg.attention_dropout,
        relu_dropout=cfg.relu_dropout,
        pre_norm=cfg.pre_norm,
        window=cfg.attention_window,
        relative=cfg.relative_positions,
    )


class Encoder(FairseqEncoder, Stack):
    """Section 3.1: a stack of N identical layers over the embedded source."""

    def __init__(self, cfg, dictionary, embed_tokens: nn.Embedding):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.embed = TransformerEmbedding(
            embed_tokens, cfg.max_source_positions, cfg.learned_pos, cfg.dropout, absolute=not cfg.no_absolute_positions
        )
        self.layers = nn.ModuleList(EncoderLayer(**_layer_args(cfg)) for _ in range(cfg.encoder_layers))
        self._setup_stack(cfg, "encoder")
        self.final_norm = nn.LayerNorm(cfg.d_model) if cfg.pre_norm else None

    def forward(
        self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, need_weights: bool = False, **unused
    ) -> Dict[str, List[Tensor]]:
        """src_tokens: (B, S). Returns fairseq's encoder_out dict with batch-first tensors; with
        need_weights, "attn" holds each layer's self-attention weights (B, h, S, S)."""
        key_mask = src_tokens.ne(self.padding_idx)  # (B, S) True = real token
        packing = source_packing(key_mask, self.training, self.varlen)  # training: position-wise work on real tokens
        x = self.embed(src_tokens, packing=packing)  # (B, S, d_model), or (N, d_model) packed
        weights = []
        with self.saved_tensors_place():
            for _, layer in kept_layers(self.layers, self.layerdrop, self.training):
                x, w = self.run_layer(layer, x, key_mask, need_weights, packing)
                weights.append(w)
        if self.final_norm is not None:
            x = self.final_norm(x)
        x = padded(x, packing)  # (B, S, d_model), zeros at pads when packed
        return {
            "encoder_out": [x],
            "encoder_padding_mask": [~key_mask],
            "src_tokens": [src_tokens],
            "src_lengths": [] if src_lengths is None else [src_lengths],
            "attn": weights if need_weights else [],
            "beam": [],
        }

    @torch.jit.export
    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        """SequenceGenerator's beam expansion and reordering, every step. Rows stay one per
        sentence with "beam" = [hypotheses per row] while the order allows (see shared_rows), so
        reordering within the beams copies nothing."""
        g = int(encoder_out["beam"][0]) if encoder_out.get("beam") else 1
        rows, g = shared_rows(new_order, g)
        fields = {k: v for k, v in encoder_out.items() if k != "beam"}
        kept = iter(select_rows([t for v in fields.values() for t in v], rows))  # one test of rows for all
        out = {k: [next(kept) for _ in v] for k, v in fields.items()}
        out["beam"] = [torch.tensor(g)] if g > 1 else []
        return out

    def max_positions(self) -> int:
        return self.embed.max_positions


class Decoder(FairseqIncrementalDecoder, Stack):
    """Section 3.1: N identical layers with masked self-attention and encoder-decoder attention,
    then the pre-softmax linear map (section 3.4), shared with the embeddings when asked.

    Incremental decoding keeps a DecodingState (modules/decoding_state.py) in fairseq's
    incremental state: encoder-decoder keys/values are projected once per sentence and shared by
    its beam (the encoder output stays one row per sentence, see shared_rows); self-attention
    keys/values are one row per hypothesis, written into spare room of their buffer each step (no
    torch.cat), and a beam reorder copies the rows that move, in place when few do (modules/cache.py).

    Training skips the pads of right-padded targets in the layers' position-wise work
    (modules/packing.py; the encoder does the same with its source pads). With real_only (our
    criterion asks for it) the pre-softmax map runs on the real tokens only too: the logits are
    (N, |V|), never padded, and extra["real_index"] says which of the B T positions they are.
    """

    def __init__(self, cfg, dictionary, embed_tokens: nn.Embedding, output_weight: Optional[Tensor] = None):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.embed = TransformerEmbedding(
            embed_tokens, cfg.max_target_positions, cfg.learned_pos, cfg.dropout, absolute=not cfg.no_absolute_positions
        )
        self.layers = nn.ModuleList(DecoderLayer(**_layer_args(cfg), index=i) for i in range(cfg.decoder_layers))
        self._setup_stack(cfg, "decoder")
        self.final_norm = nn.LayerNorm(cfg.d_model) if cfg.pre_norm else None
        if output_weight is None:  # not shared: its own pre-softmax matrix
            output_weight = nn.Parameter(torch.empty(len(dictionary), cfg.d_model))
            nn.init.normal_(output_weight, mean=0.0, std=cfg.d_model**-0.5)
        self.output_weight = output_weight
        self.alignment_layer = cfg.decoder_layers - 1 if cfg.alignment_layer < 0 else cfg.alignment_layer
        self.need_attn = False  # set by the task/generator for --print-alignment
        self.static_cache = bool(getattr(cfg, "static_decoding_cache", False))  # modules/static_cache.py

    def forward(
        self,
        prev_output_tokens: Tensor,
        encoder_out: Optional[Dict[str, List[Tensor]]] = None,
        incremental_state: Optional[IncrementalState] = None,
        features_only: bool = False,
        need_attn: bool = False,
        need_all_weights: bool = False,
        real_only: bool = False,
        step: Optional[int] = None,
        position: Optional[Tensor] = None,
        reserve: int = 0,
        **unused,
    ):
        x, extra = self.extract_features(
            prev_output_tokens,
            encoder_out,
            incremental_state,
            need_attn or self.need_attn,
            need_all_weights,
            real_only,
            step=step,
            position=position,
            reserve=reserve,
        )
        return (x if features_only else self.output_layer(x)), extra

    def extract_features(
        self,
        prev_output_tokens: Tensor,
        encoder_out,
        incremental_state=None,
        need_attn: bool = False,
        need_all_weights: bool = False,
        real_only: bool = False,
        step: Optional[int] = None,
        position: Optional[Tensor] = None,
        reserve: int = 0,
        **unused,
    ):
        """prev_output_tokens: (B, T). Returns (B, T, d_model) features (B, 1, d_model when
        incremental) and {"attn": [encoder-decoder weights of alignment_layer averaged over heads
        (B, T, S), or None], "real_index": None}; need_all_weights adds every layer's per-head
        weights. With real_only, when training packs the targets' real tokens, the features are
        those N tokens' (N, d_model) and "real_index" their flat positions b T + t, (N,).
        A caller's own incremental step (tasks/decoder_step.py, for a CUDA graph) gives step, and
        prev_output_tokens holds only that step's tokens (B, 1); position is step as a (1,) tensor,
        and reserve the positions its fixed-size caches make room for at once."""
        memory, memory_pad = encoder_out["encoder_out"][0], encoder_out["encoder_padding_mask"][0]  # (B_s, S, d_model)
        tokens, step = self.step_tokens(prev_output_tokens, incremental_state, step)  # (B, T); one step: (B, 1)
        packing = target_packing(tokens, self.padding_idx, self.training and step < 0, self.varlen)  # real tokens only
        if packing is not None and packing.varlen:  # encoder-decoder attention on the memory's real rows too
            packing.memory = source_packing(~memory_pad, True, varlen=True)
        x = self.embed(tokens, step, packing, position)  # (B, T, d_model), or (N, d_model) packed: sections 3.4, 3.5
        state = self.decoding_state(incremental_state, memory_pad, x.dtype, step, position, reserve)
        memory_mask = ~memory_pad if state is None else state.memory_mask  # (B_s, S) True or 0 = real token
        attn, cross_all, self_all = None, [], []
        with self.saved_tensors_place():
            for i, layer in kept_layers(self.layers, self.layerdrop, self.training):
                want = need_all_weights or (need_attn and i == self.alignment_layer)
                x, w_cross, w_self = self.run_layer(
                    layer, x, memory, memory_mask, state, need_weights=want, packing=packing
                )
                if need_attn and i == self.alignment_layer:
                    attn = w_cross.mean(dim=1)  # (B, T, S), averaged over heads
                cross_all.append(w_cross)
                self_all.append(w_self)
        if self.final_norm is not None:
            x = self.final_norm(x)
        real_index = packing.index if real_only and packing is not None else None
        x = x if real_index is not None else padded(x, packing)  # (B, T, d_model), or (N, d_model)
        extra = {"attn": [attn], "inner_states": None, "real_index": real_index}
        if need_all_weights:
            extra.update(cross_attn=cross_all, self_attn=self_all)
        return x, extra

    @staticmethod
    def step_tokens(prev_output_tokens: Tensor, incremental_state, step: Optional[int]) -> Tuple[Tensor, int]:
        """The tokens to run and their step: all and -1 for a full pass; of fairseq's incremental call's
        prefix (B, t + 1) the last (B, 1) at step t; a caller's own step gives those (B, 1) already."""
        if step is not None:
            return prev_output_tokens, step
        if incremental_state is None:
            return prev_output_tokens, -1
        return prev_output_tokens[:, -1:], prev_output_tokens.size(1) - 1

    def decoding_state(
        self,
        incremental_state: Optional[IncrementalState],
        memory_pad: Tensor,
        dtype: torch.dtype,
        step: int = 0,
        position: Optional[Tensor] = None,
        reserve: int = 0,
    ) -> Optional[DecodingState]:
        """Incremental decoding: the state kept in fairseq's incremental_state, begun for this
        step over memory_pad (B_s, S) (modules/decoding_state.py; with --static-decoding-cache
        its fixed-size self-attention caches, modules/static_cache.py, with room for `reserve`
        positions made at once); None for a full pass."""
        if incremental_state is None:
            return None
        entries = self.get_incremental_state(incremental_state, "cache") or {}
        self.set_incremental_state(incremental_state, "cache", entries)
        state = DecodingState(entries, static=self.static_cache)
        state.begin_step(memory_pad, dtype, step, position, reserve)
        return state

    def output_layer(self, features: Tensor) -> Tensor:
        return F.linear(features, self.output_weight)  # (B, T, |V|) or (N, |V|) logits before softmax

    def reorder_incremental_state(self, incremental_state: IncrementalState, new_order: Tensor):
        """Beam search goes on with hypotheses new_order: the decoding state reorders itself
        (modules/decoding_state.py): self-attention caches take the new order (index_select, or
        in place for the few rows that move), encoder-decoder keys/values stay one row per
        sentence while the beams stay together."""
        entries = self.get_incremental_state(incremental_state, "cache")
        if entries is not None:
            DecodingState(entries, static=self.static_cache).reorder(new_order)
            self.set_incremental_state(incremental_state, "cache", entries)

    def reorder_within_beams(
        self, incremental_state: IncrementalState, new_order: Tensor, written=None, group=None, last=None
    ):
        """A search over a fixed batch (tasks/batched_search.py) goes on with hypotheses new_order, each
        in its sentence's beam: only self-attention caches move (of the fixed-size ones the first
        `written` positions, when given; by modules/beam_reorder.py's kernel with `group`, the beam,
        and `last`, the last position written), the host is not asked which rows."""
        entries = self.get_incremental_state(incremental_state, "cache")
        if entries is not None:
            DecodingState(entries, static=self.static_cache).reorder_within_beams(new_order, written, group, last)
            self.set_incremental_state(incremental_state, "cache", entries)

    def reorder_incremental_state_scripting(self, incremental_state: IncrementalState, new_order: Tensor):
        """SequenceGenerator's entry point for every reorder. fairseq's version walks all
        submodules and calls reorder_incremental_state on each that has one (a failed hasattr per
        module per step); the whole cache lives in this decoder, so it is one call."""
        self.reorder_incremental_state(incremental_state, new_order)

    def max_positions(self) -> int:
        return self.embed.max_positions
