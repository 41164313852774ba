"""Named architectures: Table 3 of Vaswani et al. (2017) and section 6.3.

Each preset sets only what differs from the base model (TransformerConfig's defaults); any
field can still be overridden by its flag, which is how Table 3's rows A-E are reached.
fairseq's transformer's flag names given on the command line are mapped onto ours before a
preset reads them (fairseq_names.py), as fairseq's own presets read them.
"""

import argparse
import functools

from fairseq.models import register_model_architecture

from . import transformer  # noqa: F401  (the model must be registered first)
from .fairseq_names import map_namespace


def architecture(name: str):
    """register_model_architecture for our model, mapping fairseq's flag names first."""

    def register(preset):
        @functools.wraps(preset)
        def with_fairseq_names(args):
            if isinstance(args, argparse.Namespace):  # the command line (a config is mapped by full_config)
                map_namespace(args)
            preset(args)

        return register_model_architecture("attn_only_transformer", name)(with_fairseq_names)

    return register


def _default(args, **values):
    for name, value in values.items():
        setattr(args, name, getattr(args, name, value))


@architecture("transformer_base")
def transformer_base(args):
    """Table 3 "base": N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1 (the config defaults)."""


@architecture("transformer_big")
def transformer_big(args):
    """Table 3 "big": d_model=1024, d_ff=4096, h=16, P_drop=0.3 (0.1 for EN-FR, section 6.1)."""
    _default(args, d_model=1024, d_ff=4096, heads=16, dropout=0.3)


@architecture("transformer_parse")
def transformer_parse(args):
    """Section 6.3: 4 layers, d_model=1024; residual and attention dropout 0.2 (chosen on WSJ 22
    in the paper; tensor2tensor's transformer_parsing_base uses these values). d_ff and h stay
    the base model's (2048, 8) as the paper says "all other parameters remained unchanged"."""
    _default(args, encoder_layers=4, decoder_layers=4, d_model=1024, dropout=0.2, attention_dropout=0.2)
