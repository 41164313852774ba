"""Test helpers: tiny dictionaries and models (d_model <= 64) that run fast on a CPU.
(A module of its own name: several conftest.py files exist, so `from conftest import` is ambiguous.)"""

import sys
from pathlib import Path
from types import SimpleNamespace

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import attn_only_plugin  # noqa: E402,F401  (registers everything)
from attn_only_plugin.models.transformer import AttnOnlyTransformer, TransformerConfig  # noqa: E402


def make_dictionary(n_symbols: int = 20):
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(n_symbols):
        d.add_symbol(f"w{i}")
    return d


def build_model(dictionary, tgt_dictionary=None, **overrides):
    """A tiny model on a fake task; overrides are TransformerConfig fields."""
    values = dict(
        encoder_layers=2,
        decoder_layers=2,
        d_model=32,
        d_ff=64,
        heads=4,
        dropout=0.0,
        max_source_positions=64,
        max_target_positions=64,
    )
    values.update(overrides)
    task = SimpleNamespace(source_dictionary=dictionary, target_dictionary=tgt_dictionary or dictionary)
    torch.manual_seed(0)
    return AttnOnlyTransformer.build_model(TransformerConfig(**values), task).eval()


def build_builtin(dictionary, d_model=32, d_ff=64, heads=4, layers=2, normalize_before=False, seed=1):
    """fairseq's built-in transformer of these sizes, learned positions (convertible to ours),
    shared embeddings, no dropout; freshly initialised from seed, in train mode."""
    import argparse

    from fairseq.models.transformer import TransformerModel
    from fairseq.models.transformer.transformer_legacy import base_architecture

    args = argparse.Namespace(
        encoder_embed_dim=d_model,
        decoder_embed_dim=d_model,
        encoder_ffn_embed_dim=d_ff,
        decoder_ffn_embed_dim=d_ff,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_learned_pos=True,
        decoder_learned_pos=True,
        share_all_embeddings=True,
        dropout=0.0,
        encoder_normalize_before=normalize_before,
        decoder_normalize_before=normalize_before,
        max_source_positions=64,
        max_target_positions=64,
    )
    base_architecture(args)
    task = SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    torch.manual_seed(seed)
    return TransformerModel.build_model(args, task)


def random_batch(dictionary, B=3, S=7, T=6, seed=0):
    """Left-padded sources (fairseq's default) with different lengths, right-padded targets."""
    g = torch.Generator().manual_seed(seed)
    n_special = dictionary.nspecial
    src = torch.randint(n_special, len(dictionary), (B, S), generator=g)
    src[:, -1] = dictionary.eos()
    src[1, :3] = dictionary.pad()  # row 1 is shorter, left-padded
    prev = torch.randint(n_special, len(dictionary), (B, T), generator=g)
    prev[:, 0] = dictionary.eos()
    return src, prev


def script(name):
    """scripts/NAME.py as a module (scripts/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
