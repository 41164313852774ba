"""Encoder and decoder layers, section 3.1 of Vaswani et al. (2017).

Tensor layout: (B, T, d_model) for the layer input and output, or its real rows (N, d_model)
when training with a Packing (see packing.py); memory (B, S, d_model).
"""

from typing import Callable, Optional, Tuple

from torch import Tensor, nn

from .attention import MultiHeadAttention
from .decoding_state import DecodingState
from .dropout import Dropout
from .feed_forward import PositionwiseFeedForward
from .packing import Packing


class SublayerConnection(nn.Module):
    """Section 3.1 + 5.4: LayerNorm(x + Dropout(Sublayer(x))), the paper's post-norm.

    pre_norm=True computes x + Dropout(Sublayer(LayerNorm(x))) instead: not the paper's, but
    trains deep stacks without warm-up tricks; the stack then ends with a final LayerNorm.
    LayerNorm eps is torch's 1e-5 (the paper does not say; tensor2tensor uses 1e-6).
    """

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm, self.dropout, self.pre_norm = nn.LayerNorm(d_model), Dropout(dropout), pre_norm

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tuple[Tensor, Optional[Tensor]]]):
        y, weights = sublayer(self.norm(x) if self.pre_norm else x)
        x = x + self.dropout(y)
        return (x if self.pre_norm else self.norm(x)), weights


class EncoderLayer(nn.Module):
    """Section 3.1: multi-head self-attention, then the position-wise FFN, each wrapped.
    window and relative: restricted self-attention and relative positions (attention.py)."""

    def __init__(
        self, d_model, d_ff, h, d_k, d_v, dropout, attention_dropout, relu_dropout, pre_norm, window=None, relative=None
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, h, d_k, d_v, attention_dropout, window=window, relative=relative)
        self.ffn = PositionwiseFeedForward(d_model, d_ff, relu_dropout)
        self.sub_attn = SublayerConnection(d_model, dropout, pre_norm)
        self.sub_ffn = SublayerConnection(d_model, dropout, pre_norm)

    def forward(self, x: Tensor, key_mask: Tensor, need_weights: bool = False, packing: Optional[Packing] = None):
        """x: (B, S, d_model), or (N, d_model) with packing; key_mask: (B, S) True = real token."""
        x, w = self.sub_attn(
            x, lambda y: self.self_attn(y, key_mask=key_mask, need_weights=need_weights, packing=packing)
        )
        x, _ = self.sub_ffn(x, lambda y: (self.ffn(y), None))
        return x, w


class DecoderLayer(nn.Module):
    """Section 3.1: masked self-attention, encoder-decoder attention, FFN, each wrapped."""

    def __init__(
        self,
        d_model,
        d_ff,
        h,
        d_k,
        d_v,
        dropout,
        attention_dropout,
        relu_dropout,
        pre_norm,
        window=None,
        relative=None,
        index: int = 0,
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(
            d_model,
            h,
            d_k,
            d_v,
            attention_dropout,
            self_attention=True,
            cache_key=f"{index}.self",
            window=window,
            relative=relative,
        )
        self.cross_attn = MultiHeadAttention(
            d_model, h, d_k, d_v, attention_dropout, self_attention=False, cache_key=f"{index}.cross"
        )
        self.ffn = PositionwiseFeedForward(d_model, d_ff, relu_dropout)
        self.sub_self = SublayerConnection(d_model, dropout, pre_norm)
        self.sub_cross = SublayerConnection(d_model, dropout, pre_norm)
        self.sub_ffn = SublayerConnection(d_model, dropout, pre_norm)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        memory_mask: Tensor,
        state: Optional[DecodingState] = None,
        need_weights: bool = False,
        packing: Optional[Packing] = None,
    ):
        """x: (B, T, d_model), or its real rows (N, d_model) with packing; memory: (B, S, d_model);
        memory_mask: (B, S) True = real token, or additive (0 / -inf) when decoding.
        With a decoding state (incremental decoding, decoding_state.py) x holds only the new
        positions and the causal mask is implied: the queries see every cached position. Returns the output, the
        encoder-decoder weights (B, h, T, S) and the self-attention weights (B, h, T, T_all)."""
        x, w_self = self.sub_self(
            x,
            lambda y: self.self_attn(
                y,
                key_mask=None if state is None else state.self_mask,  # a fixed-size cache's written positions
                causal=state is None,
                state=state,
                need_weights=need_weights,
                packing=packing,
            ),
        )
        x, w_cross = self.sub_cross(
            x,
            lambda y: self.cross_attn(
                y, memory=memory, key_mask=memory_mask, state=state, need_weights=need_weights, packing=packing
            ),
        )
        x, _ = self.sub_ffn(x, lambda y: (self.ffn(y), None))
        return x, w_cross, w_self
