"""Embeddings and positional encoding, sections 3.4 and 3.5 of Vaswani et al. (2017).

Tensor layout: tokens (B, T) -> (B, T, d_model), or its real rows (N, d_model) with a Packing.
"""

import math
from typing import Optional

import torch
from torch import Tensor, nn

from attn_only_tools.guards.errors import PluginError

from .dropout import Dropout
from .packing import Packing, packed


def sinusoid_table(n_positions: int, d_model: int) -> Tensor:
    """Section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same).

    Sine and cosine are interleaved along the model dimension, exactly as the formula says.
    fairseq's SinusoidalPositionalEmbedding instead concatenates [sin | cos], uses
    10000^(i/(d/2-1)) and starts counting at padding_idx + 1; the two are not interchangeable.
    """
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]  # (P, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(d/2),)
    angle = pos / torch.pow(10000.0, two_i / d_model)  # (P, ceil(d/2))
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.float()  # (P, d_model)


class TransformerEmbedding(nn.Module):
    """Section 3.4 + 3.5: sqrt(d_model) * E[token] + PE(pos), then dropout (section 5.4).

    Positions count from 0 at the first real token of each sentence, so a left-padded source
    (fairseq's default) gets the same encodings as an unpadded one. learned=True replaces the
    sinusoids with a learned table (Table 3 row E). The token table is passed in so that it can
    be shared between encoder, decoder and the pre-softmax projection (section 3.4).
    absolute=False adds no positional encoding at all (--no-absolute-positions, for relative
    positions in the attention instead, modules/relative.py).
    """

    def __init__(self, tokens: nn.Embedding, max_positions: int, learned: bool, dropout: float, absolute: bool = True):
        super().__init__()
        d_model = tokens.embedding_dim
        self.tokens, self.padding_idx = tokens, tokens.padding_idx
        self.scale, self.max_positions = math.sqrt(d_model), max_positions
        self.positions = nn.Embedding(max_positions, d_model) if learned and absolute else None
        self.absolute = absolute
        if self.positions is not None:
            nn.init.normal_(self.positions.weight, mean=0.0, std=d_model**-0.5)
        elif absolute:
            self.register_buffer("pe", sinusoid_table(max_positions, d_model), persistent=False)
        self.dropout = Dropout(dropout)

    def forward(
        self, tokens: Tensor, step: int = -1, packing: Optional[Packing] = None, position: Optional[Tensor] = None
    ) -> Tensor:
        """tokens: (B, T). step >= 0: incremental decoding, the T (=1) tokens sit at position step;
        `position`, when given, is that step as a (1,) tensor on the device (a CUDA graph's input:
        the positions read from it, not baked in). With a packing (training), returns the real rows
        only, and dropout draws for those alone."""
        if step >= 0:
            start = torch.full_like(tokens, step) if position is None else position.expand_as(tokens)  # (B, T)
            pos = start + torch.arange(tokens.size(1), device=tokens.device)
        else:
            real = tokens.ne(self.padding_idx)
            pos = (real.cumsum(dim=1) - 1).clamp(min=0)  # (B, T); pads get 0, masked later
        last = step + tokens.size(1) if step >= 0 else tokens.size(1)
        if last > self.max_positions:
            raise PluginError(
                f"sequence of {last} positions exceeds the model's maximum of {self.max_positions}: "
                "shorten or filter the input (--skip-invalid-size-inputs-valid-test) or train with "
                "larger --max-source-positions / --max-target-positions"
            )
        x = self.scale * self.tokens(tokens)  # (B, T, d_model)
        if self.absolute:
            x = x + (self.positions(pos) if self.positions is not None else self.pe[pos])  # (B, T, d_model)
        return self.dropout(packed(x, packing))  # (B, T, d_model) or (N, d_model)
