"""The paper's building blocks, one section each: attention (3.2), FFN (3.3),
embeddings and positional encoding (3.4, 3.5), encoder and decoder layers (3.1)."""

from .attention import MultiHeadAttention, scaled_dot_product_attention
from .embedding import TransformerEmbedding, sinusoid_table
from .feed_forward import PositionwiseFeedForward
from .layers import DecoderLayer, EncoderLayer, SublayerConnection

__all__ = [
    "MultiHeadAttention",
    "scaled_dot_product_attention",
    "TransformerEmbedding",
    "sinusoid_table",
    "PositionwiseFeedForward",
    "DecoderLayer",
    "EncoderLayer",
    "SublayerConnection",
]
