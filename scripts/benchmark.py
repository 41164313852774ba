#!/usr/bin/env python
"""Side-by-side speed of our Transformer and fairseq's built-in `transformer` on the same work:
both get the same sizes, weights and batches, train in turns and translate the same sentences
with beam 4, and one table gives training tokens/s, peak memory, model FLOP/s, the optimizer
step and beam-4 sentences/s, ours against the built-in (JSON with --out).

    python scripts/benchmark.py --preset cpu --out benchmark.json      # 2-core CPU shape, fp32
    python scripts/benchmark.py --preset base --device cuda --amp        # the paper's base shape

Both models get identical sizes and identical weights (fairseq's converted to ours with
attn_only_plugin.convert), and identical batches (left-padded sources, lengths 10-30 tokens):
--batching random draws each batch's lengths at random (a third of each side is padding),
--batching sorted groups sentences of similar source length as fairseq's --max-tokens batching
does (almost no source padding; targets of a translation still vary in length, ~20% padding).
- training: tokens/s (target tokens) over --updates forward+backward+Adam steps after
  --warmup steps, median of --repeats, the two models in one process taking turns step by step
  on the same batch; peak memory from a fresh process per model (CUDA max allocated, or the
  process's peak RSS); model FLOP/s by the analytic count of training_flops.py and MFU against
  the device's peak (--peak-tflops, or the data sheet's for known GPUs); with
  --checkpoint-activations, ours's peak memory once more with its layers recomputed in the
  backward pass. Each model steps with
  the optimizer its fairseq-train recipe names (--optimizer recipe): fairseq's `adam` for the
  built-in, our `paper_adam` for ours, both with section 5.3's betas and epsilon; --optimizer
  adam or paper_adam gives both models the same one;
- generation: fairseq's SequenceGenerator, beam 4, lenpen 0.6, on the same sentences, the two
  models taking turns batch by batch: sentences/s and tokens/s (median of --repeats), and
  whether both produce identical hypotheses; in the same turns our model exported to CTranslate2
  (docs/export.md) in float32 and int8 (float16 and int8_float16 with --amp on CUDA), with
  fairseq-generate's decoding settings, inter_threads 1 and intra_threads = torch's threads, and
  how many of its hypotheses are the built-in's (--no-ctranslate2 leaves these out).
Turns, not one model after the other: shared and virtual machines drift in speed by 10-30%
within minutes, which one-after-the-other runs read as a difference between the models.
Prints one table (ours, built-in, ratio) and writes JSON. A script, not a timed test.
Counts that cannot be measured (--updates, --repeats, --batch-size, --generate below 1,
--warmup below 0, --peak-tflops not above 0) are refused before anything runs; a measuring
process that fails ends the benchmark with its one-line error (ATTN_ONLY_TRACEBACK=1 prints its
traceback too), one that dies with its exit status.
"""
import argparse
import importlib
import json
import multiprocessing as mp
import os
import queue as queues
import resource
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # training_flops.py beside this file

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


def build_pair(shape, seed=0):
    """(fairseq's built-in, ours) with the same sizes and weights, in eval mode."""
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
    args = ap.Namespace(encoder_embed_dim=shape["d_model"], decoder_embed_dim=shape["d_model"],
                        encoder_ffn_embed_dim=shape["d_ff"], decoder_ffn_embed_dim=shape["d_ff"],
                        encoder_attention_heads=shape["heads"], decoder_attention_heads=shape["heads"],
                        encoder_layers=shape["layers"], decoder_layers=shape["layers"], encoder_learned_pos=True,
                        decoder_learned_pos=True, share_all_embeddings=True, dropout=0.1,
                        max_source_positions=256, max_target_positions=256)
    base_architecture(args)
    torch.manual_seed(seed)
    theirs = TransformerModel.build_model(args, task)
    cfg = TransformerConfig(encoder_layers=shape["layers"], decoder_layers=shape["layers"], d_model=shape["d_model"],
                            d_ff=shape["d_ff"], heads=shape["heads"], dropout=0.1, learned_pos=True,
                            max_source_positions=256, max_target_positions=256)
    ours = AttnOnlyTransformer.build_model(cfg, task)
    ours.load_state_dict(fairseq_to_ours(theirs.state_dict(), d.pad()))
    return theirs, ours, d


def make_batches(d, n_batches, batch_size, seed=1, batching="random"):
    """Sentences of 10-30 words. "random": lengths drawn per sentence, the target is the reversed
    source; "sorted" (what fairseq's length-sorted batching gives): one source length per batch,
    targets of that length +-25%."""
    import torch
    g = torch.Generator().manual_seed(seed)

    def words(n):
        return torch.randint(d.nspecial, len(d), (n,), generator=g)

    batches = []
    for _ in range(n_batches):
        if batching == "sorted":
            n = int(torch.randint(10, 31, (), generator=g))
            sources = [words(n) for _ in range(batch_size)]
            targets = [words(n + int(torch.randint(-(n // 4), n // 4 + 1, (), generator=g))) for _ in range(batch_size)]
        else:
            sources = [words(int(n)) for n in torch.randint(10, 31, (batch_size,), generator=g)]
            targets = [w.flip(0) for w in sources]
        S, T = max(map(len, sources)) + 1, max(map(len, targets)) + 1
        src = torch.full((batch_size, S), d.pad())
        tgt = torch.full((batch_size, T), d.pad())
        for b, (w, t) in enumerate(zip(sources, targets)):
            src[b, S - len(w) - 1:] = torch.cat([w, torch.tensor([d.eos()])])  # left-padded
            tgt[b, : len(t) + 1] = torch.cat([t, torch.tensor([d.eos()])])  # right-padded
        prev = torch.cat([torch.full((batch_size, 1), d.eos()), tgt[:, :-1]], dim=1)  # eos moved to the front
        prev[tgt == d.pad()] = d.pad()
        lengths = src.ne(d.pad()).sum(1)
        batches.append(dict(src=src, lengths=lengths, prev=prev, tgt=tgt))
    return batches


def pad_share(batches, pad):
    """Share of pad positions in the sources and in the targets."""
    return {side: sum(int(b[side].eq(pad).sum()) for b in batches) / sum(b[side].numel() for b in batches)
            for side in ("src", "tgt")}


def _peak_memory(device):
    import torch
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB (Linux reports KiB)


def peak_tflops(device, amp, given=None):
    """The rate MFU is measured against: `given`, else the data-sheet peak of a known GPU
    (scripts/training_flops.py's table: bf16/fp16 tensor cores with --amp, else fp32), else None
    (a CPU's peak depends on its clock and vector units: give --peak-tflops)."""
    if given:
        return given
    if device != "cuda":
        return None
    import torch

    from training_flops import TFLOPS
    name = torch.cuda.get_device_name()
    table = TFLOPS["bf16" if amp else "fp32"]
    return next((rate for gpu, rate in table.items() if gpu in name), None)


def model_flops(batch, shape, pad) -> float:
    """FLOPs of one training step on `batch` by the analytic count of scripts/training_flops.py
    (forward + backward = 3 x forward, real tokens only, attention over each sentence's own
    lengths): the work the paper's model needs, whatever the implementation computes besides."""
    from training_flops import attention_flops, layer_params
    p_enc, p_dec = layer_params(shape["layers"], shape["d_model"], shape["d_ff"], shape["vocab"])
    S, T = batch["src"].ne(pad).sum(1).tolist(), batch["tgt"].ne(pad).sum(1).tolist()
    attention = sum(attention_flops(shape["layers"], shape["d_model"], s, t, s, t) for s, t in zip(S, T))
    return 6 * (p_enc * sum(S) + p_dec * sum(T)) + 3 * attention


def _synchronizer(device):
    """A function that waits for the device's queued work (timings on a GPU), a no-op on a CPU."""
    import torch
    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


RECIPE_OPTIMIZERS = {"fairseq": "adam", "ours": "paper_adam"}  # what each model's fairseq-train command names


def build_optimizer(name, params):
    """The optimizer `fairseq-train --optimizer NAME` builds, with section 5.3's beta_1 0.9,
    beta_2 0.98 and epsilon 1e-9: fairseq's `adam` (on a CPU, or a GPU without apex, its Python
    loop over the parameters) or our `paper_adam` (torch's fused Adam)."""
    from fairseq.optim.adam import FairseqAdam, FairseqAdamConfig

    from attn_only_plugin.optim.paper_adam import PaperAdam, PaperAdamConfig
    if name == "adam":
        return FairseqAdam(FairseqAdamConfig(adam_betas="(0.9, 0.98)", adam_eps=1e-9, lr=[1e-4], tpu=False), params)
    return PaperAdam(PaperAdamConfig(lr=[1e-4]), params)


def optimizer_for(which, optimizer):
    """The optimizer's name for model `which` ('ours' or 'fairseq') under --optimizer."""
    return RECIPE_OPTIMIZERS[which] if optimizer == "recipe" else optimizer


def _trainer(model, device, amp, pad, optimizer):
    """One training step of `model` on a batch: forward, the paper's smoothed loss, backward, the
    optimizer's step (fairseq's `adam` or our `paper_adam`); returns the seconds of that last part."""
    import torch

    from attn_only_plugin.criterions.label_smoothed_ce import label_smoothed_nll_loss, target_lprobs
    opt = build_optimizer(optimizer, model.parameters())
    sync = _synchronizer(device)

    def step(b):
        sample = dict(net_input=dict(src_tokens=b["src"], src_lengths=b["lengths"], prev_output_tokens=b["prev"]),
                      target=b["tgt"])
        with torch.autocast(device_type=device, dtype=torch.float16 if device == "cuda" else torch.bfloat16,
                            enabled=amp):
            lprobs, target = target_lprobs(model, sample, pad)  # what paper_label_smoothed_ce runs
            loss, _ = label_smoothed_nll_loss(lprobs, target, 0.1, pad)
        opt.zero_grad()
        loss.backward()
        sync()
        t = time.perf_counter()
        opt.step()
        sync()
        return time.perf_counter() - t
    return step


def _turns(k):
    """The two models' order in turn k: who goes first alternates."""
    return ("fairseq", "ours") if k % 2 == 0 else ("ours", "fairseq")


def _batches(d, device, batch_size, batching):
    return [{k: v.to(device) for k, v in b.items()} for b in make_batches(d, 4, batch_size, batching=batching)]


def train_speed(shape, device, amp, updates, warmup, repeats, batch_size, batching, optimizer):
    """Runs in its own process: both models train side by side, taking turns step by step on the
    same batch (who goes first alternates), so that a machine whose speed drifts slows both alike.
    Per repeat, target tokens/s and model FLOP/s over `updates` steps each, after `warmup`."""
    theirs, ours, d = build_pair(shape)
    models = {"fairseq": theirs, "ours": ours}
    steps = {name: _trainer(m.to(device).train(), device, amp, d.pad(), optimizer_for(name, optimizer))
             for name, m in models.items()}
    batches = _batches(d, device, batch_size, batching)
    sync = _synchronizer(device)
    for i in range(warmup):
        for step in steps.values():
            step(batches[i % len(batches)])
    seconds = {name: [0.0] * repeats for name in steps}
    in_optimizer = dict.fromkeys(steps, 0.0)
    for r in range(repeats):
        for i in range(updates):
            for name in _turns(r + i):
                sync()
                t = time.perf_counter()
                in_optimizer[name] += steps[name](batches[i % len(batches)])
                sync()
                seconds[name][r] += time.perf_counter() - t
    tokens = sum(int(batches[i % len(batches)]["tgt"].ne(d.pad()).sum()) for i in range(updates))
    flops = sum(model_flops(batches[i % len(batches)], shape, d.pad()) for i in range(updates))
    pads = pad_share(batches, d.pad())
    return {name: dict(tokens_per_s_per_repeat=[tokens / s for s in secs],
                       flops_per_s_per_repeat=[flops / s for s in secs], pad_share=pads,
                       step_ms=1e3 * sum(secs) / (repeats * updates),
                       optimizer_ms=1e3 * in_optimizer[name] / (repeats * updates))
            for name, secs in seconds.items()}


def train_memory(which, shape, device, amp, n_steps, batch_size, batching, optimizer, recompute=False):
    """Runs in its own process: the peak memory of training `which` ('ours' or 'fairseq') for
    n_steps steps (the process's peak RSS on a CPU, CUDA max allocated on a GPU); recompute:
    ours with --checkpoint-activations."""
    import torch
    theirs, ours, d = build_pair(shape)
    ours.encoder.recompute = ours.decoder.recompute = recompute
    model = (ours if which == "ours" else theirs).to(device).train()
    del theirs, ours
    step = _trainer(model, device, amp, d.pad(), optimizer_for(which, optimizer))
    batches = _batches(d, device, batch_size, batching)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for i in range(n_steps):
        step(batches[i % len(batches)])
    return _peak_memory(device)


class WorkerError(RuntimeError):
    """A measuring process failed or died; the message is one line."""


def _worker(target, args, queue):
    """Runs in the measuring process: ("ok", target(*args)) or ("error", one line) into queue."""
    try:
        queue.put(("ok", target(*args)))
    except BaseException as e:  # noqa: B902 (Ctrl-C too: the parent must not wait for a result)
        if os.environ.get("ATTN_ONLY_TRACEBACK"):
            traceback.print_exc()
        first = (str(e).strip().splitlines() or [""])[0]
        queue.put(("error", f"{type(e).__name__}: {first}" if first else type(e).__name__))


def in_process(ctx, target, *args, poll_s=0.5):
    """target(*args) in a fresh process (peak memory is per process); its result, or WorkerError
    with its one-line error, or its exit status if it died without one (killed, out of memory)."""
    q = ctx.Queue()
    p = ctx.Process(target=_worker, args=(target, args, q))
    p.start()
    try:
        while True:
            try:
                status, value = q.get(timeout=poll_s)
                break
            except queues.Empty:
                if p.is_alive():
                    continue
                try:  # it may have put its result just before ending
                    status, value = q.get(timeout=poll_s)
                    break
                except queues.Empty:
                    why = f"killed by signal {-p.exitcode}" if p.exitcode < 0 else f"exit status {p.exitcode}"
                    raise WorkerError(f"the {target.__name__} process died ({why}) without a result: out of "
                                      "memory? try a smaller --batch-size or --preset") from None
    finally:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
            p.join()
    if status == "error":
        raise WorkerError(f"the {target.__name__} process failed: {value}: rerun with ATTN_ONLY_TRACEBACK=1 for "
                          "its traceback")
    return value


def check_settings(updates, warmup, repeats, batch_size=None, n_gen=None, peak=None) -> None:
    """Refuse counts that measure nothing (or divide by zero) before any process starts."""
    for flag, value, least in (("--updates", updates, 1), ("--warmup", warmup, 0), ("--repeats", repeats, 1),
                               ("--batch-size", batch_size, 1), ("--generate", n_gen, 1)):
        if value is not None and value < least:
            raise ValueError(f"{flag} must be >= {least}, got {value}"
                             + (": leave it out for the preset's" if flag in ("--batch-size", "--generate") else ""))
    if peak is not None and not peak > 0:
        raise ValueError(f"--peak-tflops must be > 0, got {peak}: leave it out when the device's peak is not known")


def ctranslate2_decoders(model, d, device, half, folder):
    """{"ct2_<type>": a function translating a batch like SequenceGenerator.generate (token ids
    with the final </s>)} for our model exported to CTranslate2, float32 and int8 (on CUDA with
    half: float16 and int8_float16), decoding as load_ctranslate2's translate() does
    (fairseq-generate's settings: beam 4, lenpen 0.6, max length input + 50)."""
    import torch

    from attn_only_plugin.api.hub_ctranslate2 import load_ctranslate2
    from attn_only_plugin.export.ctranslate2 import build_spec, model_info, save_spec
    from attn_only_plugin.models.transformer import full_config
    cfg = full_config(model.cfg)
    state = {k: v.float().cpu() for k, v in model.state_dict().items()}
    types = ("float16", "int8_float16") if half and device == "cuda" else ("float32", "int8")
    decoders = {}
    for kind in types:
        out = Path(folder) / kind
        save_spec(build_spec(cfg, state, d, d), out, None if kind == "float32" else kind, info=model_info(cfg))
        mt = load_ctranslate2(out, device=device, compute_type=kind, inter_threads=1,
                              intra_threads=torch.get_num_threads() if device == "cpu" else 0)

        def decode(src, mt=mt):
            rows = [[d[i] for i in row.tolist() if i not in (d.pad(), d.eos())] for row in src]  # (B,) word lists
            return [[d.index(w) for w in tokens] + [d.eos()]
                    for _, tokens, _ in mt.translate_tokens(rows, batch_size=len(rows))]
        decoders[f"ct2_{kind}"] = decode
    return decoders


def _rotation(names, k):
    """Who goes when in turn k: each goes first in turn."""
    k %= len(names)
    return names[k:] + names[:k]


def generation(shape, device, n_sentences, batch_size, batching, repeats=1, half=False, ct2=True):
    """Beam-4 SequenceGenerator on the same sentences for both models (same weights; with half,
    both in fp16, as fairseq-generate --fp16 runs them), and with ct2 our model exported to
    CTranslate2 (ctranslate2_decoders). They take turns batch by batch (who goes first rotates),
    so that a machine whose speed drifts slows all alike; each repeat translates every sentence
    once with each, and speeds are the medians over repeats."""
    import tempfile

    import torch
    from fairseq.sequence_generator import SequenceGenerator
    theirs, ours, d = build_pair(shape)
    models = {"fairseq": theirs, "ours": ours}
    models = {name: (m.half() if half else m).to(device).eval() for name, m in models.items()}
    gens = {name: (lambda src, lengths, m=m, g=SequenceGenerator([m], d, beam_size=4, len_penalty=0.6, max_len_a=1,
                                                                    max_len_b=50):
                   [h[0]["tokens"].tolist() for h in g.generate([m], {"net_input": {"src_tokens": src,
                                                                                     "src_lengths": lengths}})])
            for name, m in models.items()}
    folder = tempfile.TemporaryDirectory(prefix="benchmark-ct2-")
    if ct2:
        gens.update({name: (lambda src, lengths, f=f: f(src))
                     for name, f in ctranslate2_decoders(ours, d, device, half, folder.name).items()})
    batches = make_batches(d, max(1, n_sentences // batch_size), batch_size, seed=2, batching=batching)
    seconds = {name: [0.0] * repeats for name in gens}
    hyps = {name: [] for name in gens}
    sync = _synchronizer(device)
    with torch.no_grad(), folder:
        for r in range(repeats):
            for i, b in enumerate(batches):
                src, lengths = b["src"].to(device), b["lengths"].to(device)
                for name in _rotation(list(gens), r + i):
                    t = time.perf_counter()
                    out = gens[name](src, lengths)
                    sync()
                    seconds[name][r] += time.perf_counter() - t
                    if r == 0:
                        hyps[name] += out
    result = {}
    for name in gens:
        s = statistics.median(seconds[name])
        result[name] = dict(sentences_per_s=len(hyps[name]) / s, tokens_per_s=sum(map(len, hyps[name])) / s)
        if name.startswith("ct2_"):
            result[name]["identical_sentences"] = sum(a == b for a, b in zip(hyps[name], hyps["fairseq"]))
    result["sentences"] = len(hyps["ours"])
    result["ratio_per_repeat"] = [f / o for f, o in zip(seconds["fairseq"], seconds["ours"])]
    result["identical_hypotheses"] = hyps["ours"] == hyps["fairseq"]
    result["identical_sentences"] = sum(a == b for a, b in zip(hyps["ours"], hyps["fairseq"]))
    result["ctranslate2_threads"] = dict(inter_threads=1, intra_threads=torch.get_num_threads()) if ct2 else None
    return result


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def run(preset, device="cpu", amp=False, updates=5, warmup=2, repeats=3, batch_size=None, n_gen=None,
        parts=("training", "generation"), batching="random", peak=None, optimizer="recipe", recompute=False,
        ct2=True):
    """Both measurements; batch_size defaults to the preset's (BATCH_SIZE), n_gen to two batches."""
    check_settings(updates, warmup, repeats, batch_size, n_gen, peak)
    shape = PRESETS[preset]
    batch_size = BATCH_SIZE[preset] if batch_size is None else batch_size
    n_gen = 2 * batch_size if n_gen is None else n_gen
    peak = peak_tflops(device, amp, peak)
    ctx = mp.get_context("spawn")
    train = {}
    if "training" in parts:
        print(f"[benchmark] training speed: both models in turns, {repeats} x {updates} updates each",
              file=sys.stderr)
        train = in_process(ctx, train_speed, shape, device, amp, updates, warmup, repeats, batch_size, batching,
                           optimizer)
        for which, t in train.items():
            print(f"[benchmark] training memory: {which}", file=sys.stderr)
            t["peak_mib"] = in_process(ctx, train_memory, which, shape, device, amp, max(2, warmup + 1), batch_size,
                                       batching, optimizer)
            t["optimizer"] = optimizer_for(which, optimizer)
            t["tokens_per_s"] = statistics.median(t["tokens_per_s_per_repeat"])
            t["flops_per_s"] = statistics.median(t.pop("flops_per_s_per_repeat"))
            t["mfu"] = t["flops_per_s"] / (peak * 1e12) if peak else None
        if recompute:
            print("[benchmark] training memory: ours with --checkpoint-activations", file=sys.stderr)
            train["ours"]["peak_mib_checkpointed"] = in_process(ctx, train_memory, "ours", shape, device, amp,
                                                                max(2, warmup + 1), batch_size, batching, optimizer,
                                                                True)
        train["ratio_per_repeat"] = [o / f for o, f in zip(train["ours"]["tokens_per_s_per_repeat"],
                                                           train["fairseq"]["tokens_per_s_per_repeat"])]
    gen = {}
    if ct2 and "generation" in parts and not _importable("ctranslate2"):
        print("[benchmark] ctranslate2 is not installed: no CTranslate2 columns (bash scripts/install.sh; on a GPU "
              "machine the wheel in .gpu_bundle_ct2/, docs/speed.md)", file=sys.stderr)
        ct2 = False
    if "generation" in parts:
        print(f"[benchmark] generation, beam 4{', fp16' if amp and device == 'cuda' else ''}", file=sys.stderr)
        gen = generation(shape, device, n_gen, max(1, batch_size // 2), batching, repeats,
                         half=amp and device == "cuda", ct2=ct2)
    return dict(preset=preset, shape=shape, device=device, amp=amp, threads=int(os.environ.get("OMP_NUM_THREADS", 0)),
                batching=batching, batch_size=batch_size, peak_tflops=peak, training=train, generation=gen)


def table(r) -> str:
    t, g = r["training"], r["generation"]
    rows = [("training tokens/s", "tokens_per_s"), ("training peak memory (MiB)", "peak_mib")] if t else []
    values = [(name, t["ours"][key], t["fairseq"][key]) for name, key in rows]
    if t:
        values.append(("training model GFLOP/s", t["ours"]["flops_per_s"] / 1e9, t["fairseq"]["flops_per_s"] / 1e9))
        values += [(name, t["ours"][key], t["fairseq"][key]) for name, key in
                   (("training step (ms, mean)", "step_ms"), ("of which optimizer (ms)", "optimizer_ms"))]
    ct2 = [name for name in g if name.startswith("ct2_")] if g else []
    if g:
        values += [(name, g["ours"][key], g["fairseq"][key]) for name, key in
                   (("generation sentences/s", "sentences_per_s"), ("generation tokens/s", "tokens_per_s"))]
        values += [(f"CTranslate2 {name[4:]} sentences/s", g[name]["sentences_per_s"], g["fairseq"]["sentences_per_s"])
                   for name in ct2]
    lines = [f"preset {r['preset']} {r['shape']} on {r['device']}{' amp' if r['amp'] else ''}, {r['batching']} batches"
             f" of {r['batch_size']} sentences"]
    if t:
        pads = t["ours"]["pad_share"]
        lines[0] += (f" (training: {pads['src']:.0%} of source and {pads['tgt']:.0%} of target positions are pads;"
                     f" optimizer {t['ours']['optimizer']} for ours, {t['fairseq']['optimizer']} for the built-in)")
    lines += [f"| {'measure':<28} | {'ours':>10} | {'built-in':>10} | {'ratio':>6} |",
              f"|{'-' * 30}|{'-' * 12}|{'-' * 12}|{'-' * 8}|"]
    lines += [f"| {n:<28} | {a:>10.1f} | {b:>10.1f} | {a / b:>5.2f}x |" for n, a, b in values]
    if t:
        mfu = (f"{t['ours']['mfu']:.1%} ours, {t['fairseq']['mfu']:.1%} built-in of {r['peak_tflops']:g} TFLOP/s"
               if t["ours"]["mfu"] is not None else "not known without the device's peak (--peak-tflops)")
        lines.append(f"training model FLOPs utilisation: {mfu}")
        if "peak_mib_checkpointed" in t["ours"]:
            lines.append(f"training peak memory, ours with --checkpoint-activations: "
                         f"{t['ours']['peak_mib_checkpointed']:.1f} MiB ({t['ours']['peak_mib']:.1f} without)")
    if g:
        lines.append(f"identical beam-4 hypotheses: {g['identical_hypotheses']}"
                     f" ({g['identical_sentences']} of {g['sentences']} sentences)")
        if ct2:
            threads = g["ctranslate2_threads"]
            lines.append("CTranslate2 (its sentences/s in the ours column; inter_threads "
                         f"{threads['inter_threads']}, intra_threads {threads['intra_threads']}), hypotheses identical "
                         "to the built-in's: " + ", ".join(f"{name[4:]} {g[name]['identical_sentences']} of "
                                                           f"{g['sentences']}" for name in ct2))
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="examples:\n" + __doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--amp", action="store_true",
                   help="mixed precision: on CUDA fp16 autocast training and fp16 generation; on a CPU bf16 autocast training")
    p.add_argument("--updates", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch-size", type=int,
                   help="sentences per training batch, half as many per generation batch "
                        f"(default: the preset's, {BATCH_SIZE})")
    p.add_argument("--generate", type=int, help="sentences to translate (default: two batches of --batch-size)")
    p.add_argument("--parts", nargs="+", choices=["training", "generation"], default=["training", "generation"],
                   help="what to measure (default: both)")
    p.add_argument("--batching", choices=["random", "sorted"], default="random",
                   help="random: lengths drawn per sentence; sorted: one source length per batch, as "
                        "fairseq's length-sorted batching gives (default: random)")
    p.add_argument("--peak-tflops", type=float,
                   help="the device's peak rate for MFU (default: the data sheet's, for known GPUs)")
    p.add_argument("--optimizer", choices=["recipe", "adam", "paper_adam"], default="recipe",
                   help="recipe: each model with the one its fairseq-train command names (fairseq's adam for the "
                        "built-in, paper_adam for ours); adam or paper_adam: that one for both (default: recipe)")
    p.add_argument("--checkpoint-activations", action="store_true",
                   help="also measure ours training with --checkpoint-activations (peak memory only)")
    p.add_argument("--no-ctranslate2", action="store_true",
                   help="leave out the CTranslate2 generation columns (they need the ctranslate2 package)")
    p.add_argument("--out", type=Path, help="write the results as JSON here")
    a = p.parse_args(argv)
    try:
        check_settings(a.updates, a.warmup, a.repeats, a.batch_size, a.generate, a.peak_tflops)
    except ValueError as e:
        sys.exit(f"error: {e}")
    try:
        r = run(a.preset, a.device, a.amp, a.updates, a.warmup, a.repeats, a.batch_size, a.generate, a.parts,
                a.batching, a.peak_tflops, a.optimizer, a.checkpoint_activations, ct2=not a.no_ctranslate2)
    except WorkerError as e:
        sys.exit(f"error: {e}")
    print(table(r))
    if a.out:
        a.out.write_text(json.dumps(r, indent=2))


if __name__ == "__main__":
    main()
