"""What every measurement of benchmarks/benchmark.py shares: the presets, fairseq's built-in
transformer and ours with the same sizes and the same weights (ours converted from it with
attn_only_plugin.export.fairseq), the batches both get, and the turns they take.

Batches: sentences of 10-30 words, left-padded sources and right-padded targets as fairseq makes
them. "random" draws every sentence's length (a third of each side is padding), "sorted" gives a
batch one source length and targets within 25% of it, what fairseq's length-sorted --max-tokens
batching gives (almost no source padding, ~20% target padding).
Turns, not one model after the other: shared and virtual machines drift in speed by 10-30%
within minutes, which one-after-the-other runs read as a difference between the models.
"""

PRESETS = {  # d_model, d_ff, heads, layers, vocab
    "tiny": dict(d_model=64, d_ff=256, heads=4, layers=2, vocab=1000),
    "cpu": dict(d_model=512, d_ff=2048, heads=8, layers=6, vocab=8000),
    "base": dict(d_model=512, d_ff=2048, heads=8, layers=6, vocab=37000),
    "big": dict(d_model=1024, d_ff=4096, heads=16, layers=6, vocab=37000),
}
# Sentences per training batch (generation: half as many, beam 4): 32 of 10-30 words (~650
# target tokens) suit 2 CPU cores; the GPU shapes get 256 (~5k target tokens, fairseq's usual
# --max-tokens 4096 per GPU; the paper's 25k-token batches were spread over 8 GPUs, section 5.1),
# as a GPU's speed on 650-token steps measures kernel launches, not the model.
BATCH_SIZE = {"tiny": 32, "cpu": 32, "base": 256, "big": 256}
# --without NAME: the module constant that turns one of our speed paths off (docs/speed.md, "Where
# the speed paths live"), so the benchmark measures what it buys; the maths is the same either way.
SPEED_PATHS = {
    "packing": ("attn_only_plugin.modules.packing", "MIN_PAD_FRACTION", 2.0),  # never packs
}
# shape["levers"]: speed levers that are not the paper's, off unless named (docs/speed.md, "The GPU
# speed levers"): "compile" (ours with --compile-layers; the value is torch.compile's backend),
# "static_cache" (ours with --static-decoding-cache), "pad_to" (every batch's source and target lengths
# padded up to a multiple of it, both models: fewer shapes), "half" ("float16" or "bfloat16": the
# autocast and generation dtype with --amp on CUDA), "batched_search" (ours decoded by --batched-search's
# generator), "cuda_graph" (its decoder step as a CUDA graph, --cuda-graph-decoding), "graph_search" (its
# whole step, decoder and search, as one graph, --cuda-graph-search), "reorder_kernel" (its caches' beam
# reorder by a Triton kernel, --beam-reorder-kernel), "decode_kernel" (its decoding steps' self-attention
# by a Triton kernel, --decode-attention-kernel), "varlen" (ours with
# --varlen-attention: training's attention on the packed rows) and "fused_loss" (ours's loss from the
# logits, --fused-softmax-loss). They reach every measuring
# process inside the shape.
PAD_TO_MULTIPLE = 1  # this process's "pad_to", set by build_pair; make_batches reads it


def levers(shape) -> dict:
    """The speed levers shape["levers"] names, with their defaults (all off, fp16)."""
    off = dict(compile=False, static_cache=False, pad_to=1, half="float16", batched_search=False, cuda_graph=False)
    off.update(varlen=False, graph_search=False, fused_loss=False, reorder_kernel=False, decode_kernel=False)
    return dict(off, **shape.get("levers", {}))


def half_dtype(shape, device):
    """The half-precision dtype of --amp: the lever's ("float16" or "bfloat16") on CUDA; bfloat16
    on a CPU, whose autocast has no float16."""
    import torch

    return getattr(torch, levers(shape)["half"]) if device == "cuda" else torch.bfloat16


def turn_off(names) -> None:
    """Turns off our speed paths named in SPEED_PATHS, in this process (each measuring process calls it)."""
    import importlib

    for name in names:
        module, constant, value = SPEED_PATHS[name]
        setattr(importlib.import_module(module), constant, value)


def build_pair(shape, seed=0):
    """(fairseq's built-in, ours) with the same sizes and weights, in eval mode; ours without the
    speed paths that shape["without"] names, if any."""
    import argparse as ap
    from types import SimpleNamespace

    import torch
    from fairseq.data import Dictionary
    from fairseq.models.transformer import TransformerModel
    from fairseq.models.transformer.transformer_legacy import base_architecture

    import attn_only_plugin  # noqa: F401
    from attn_only_plugin.export.fairseq import fairseq_to_ours
    from attn_only_plugin.models.transformer import AttnOnlyTransformer, TransformerConfig

    d = Dictionary()
    for i in range(shape["vocab"] - d.nspecial):
        d.add_symbol(f"w{i}")
    task = SimpleNamespace(source_dictionary=d, target_dictionary=d)
    args = ap.Namespace(
        encoder_embed_dim=shape["d_model"],
        decoder_embed_dim=shape["d_model"],
        encoder_ffn_embed_dim=shape["d_ff"],
        decoder_ffn_embed_dim=shape["d_ff"],
        encoder_attention_heads=shape["heads"],
        decoder_attention_heads=shape["heads"],
        encoder_layers=shape["layers"],
        decoder_layers=shape["layers"],
        encoder_learned_pos=True,
        decoder_learned_pos=True,
        share_all_embeddings=True,
        dropout=0.1,
        max_source_positions=256,
        max_target_positions=256,
    )
    base_architecture(args)
    torch.manual_seed(seed)
    theirs = TransformerModel.build_model(args, task)
    cfg = TransformerConfig(
        encoder_layers=shape["layers"],
        decoder_layers=shape["layers"],
        d_model=shape["d_model"],
        d_ff=shape["d_ff"],
        heads=shape["heads"],
        dropout=0.1,
        learned_pos=True,
        max_source_positions=256,
        max_target_positions=256,
        compile_layers=bool(levers(shape)["compile"]),
        static_decoding_cache=levers(shape)["static_cache"],
        varlen_attention=levers(shape)["varlen"],
    )
    turn_off(shape.get("without", ()))
    if levers(shape)["compile"]:
        from attn_only_plugin.modules import compiled

        compiled.BACKEND = levers(shape)["compile"]
    global PAD_TO_MULTIPLE
    PAD_TO_MULTIPLE = levers(shape)["pad_to"]
    ours = AttnOnlyTransformer.build_model(cfg, task)
    ours.load_state_dict(fairseq_to_ours(theirs.state_dict(), d.pad()))
    return theirs, ours, d


# "fresh" batches' (source, target) lengths: sources of 10-30 words, targets within 25% of them
FRESH_SHAPES = [(n, m) for n in range(10, 31) for m in range(n - n // 4, n + n // 4 + 1)]


def fresh_shapes(n_batches, g):
    """n_batches different (source, target) lengths of FRESH_SHAPES, in a random order."""
    import torch

    if n_batches > len(FRESH_SHAPES):
        raise ValueError(f"fresh batching has {len(FRESH_SHAPES)} shapes, {n_batches} asked")
    return [FRESH_SHAPES[i] for i in torch.randperm(len(FRESH_SHAPES), generator=g)[:n_batches].tolist()]


def make_batches(d, n_batches, batch_size, seed=1, batching="random"):
    """Sentences of 10-30 words. "random": lengths drawn per sentence, the target is the reversed
    source; "sorted" (what fairseq's length-sorted batching gives): one source length per batch,
    targets of that length +-25%; "fresh": like sorted, but every batch of a shape (source and
    target length) that no other batch has, as in the first epoch of fairseq-train."""
    import torch

    g = torch.Generator().manual_seed(seed)

    def words(n):
        return torch.randint(d.nspecial, len(d), (n,), generator=g)

    shapes = fresh_shapes(n_batches, g) if batching == "fresh" else None
    batches = []
    for i in range(n_batches):
        if shapes:
            n, m = shapes[i]  # the longest target has m words, the others within 25% of n (as sorted)
            lengths = torch.randint(n - n // 4, m + 1, (batch_size,), generator=g).clamp(max=m)
            lengths[0] = m
            sources, targets = [words(n) for _ in range(batch_size)], [words(int(k)) for k in lengths]
        elif batching == "sorted":
            n = int(torch.randint(10, 31, (), generator=g))
            sources = [words(n) for _ in range(batch_size)]
            targets = [words(n + int(torch.randint(-(n // 4), n // 4 + 1, (), generator=g))) for _ in range(batch_size)]
        else:
            sources = [words(int(n)) for n in torch.randint(10, 31, (batch_size,), generator=g)]
            targets = [w.flip(0) for w in sources]
        S, T = bucket(max(map(len, sources)) + 1), bucket(max(map(len, targets)) + 1)
        src = torch.full((batch_size, S), d.pad())
        tgt = torch.full((batch_size, T), d.pad())
        for b, (w, t) in enumerate(zip(sources, targets, strict=False)):
            src[b, S - len(w) - 1 :] = torch.cat([w, torch.tensor([d.eos()])])  # left-padded
            tgt[b, : len(t) + 1] = torch.cat([t, torch.tensor([d.eos()])])  # right-padded
        prev = torch.cat([torch.full((batch_size, 1), d.eos()), tgt[:, :-1]], dim=1)  # eos moved to the front
        prev[tgt == d.pad()] = d.pad()
        lengths = src.ne(d.pad()).sum(1)
        batches.append(dict(src=src, lengths=lengths, prev=prev, tgt=tgt))
    return batches


def bucket(length: int) -> int:
    """length rounded up to a multiple of PAD_TO_MULTIPLE, as fairseq's --required-seq-len-multiple pads."""
    return -(-length // PAD_TO_MULTIPLE) * PAD_TO_MULTIPLE


def pad_share(batches, pad):
    """Share of pad positions in the sources and in the targets."""
    return {
        side: sum(int(b[side].eq(pad).sum()) for b in batches) / sum(b[side].numel() for b in batches)
        for side in ("src", "tgt")
    }


def device_batches(d, device, batch_size, batching, n=4, seed=1):
    """The n training batches that the steps go through (4, cycled; "fresh": one per step), on the device."""
    return [{k: v.to(device) for k, v in b.items()} for b in make_batches(d, n, batch_size, seed, batching)]


def synchronizer(device):
    """A function that waits for the device's queued work (timings on a GPU), a no-op on a CPU."""
    import torch

    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def rotation(names, k):
    """Who goes when in turn k: each goes first in turn."""
    k %= len(names)
    return names[k:] + names[:k]
