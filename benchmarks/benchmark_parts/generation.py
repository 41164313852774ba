"""Generation speed for benchmarks/benchmark.py: fairseq's SequenceGenerator, beam 4, lenpen 0.6, on
the same sentences for both models (ours through --batched-search's generator with the batched_search
lever, and its CUDA-graphed decoder step with cuda_graph) (in fp16 with --amp on CUDA, as fairseq-generate --fp16),
taking turns batch by batch: sentences/s and tokens/s (median of --repeats), and whether both
produce identical hypotheses. In the same turns our model exported to CTranslate2
(docs/export.md) in float32 and int8 (float16 and int8_float16 with --amp on CUDA), decoding with
fairseq-generate's settings through load_ctranslate2, inter_threads 1 and intra_threads = torch's
threads, and how many of its hypotheses are the built-in's (--no-ctranslate2 leaves it out).
"""

import importlib
import statistics
import time
from pathlib import Path

from .common import build_pair, half_dtype, levers, make_batches, rotation, synchronizer
from .profile import profiled, trace_file


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
        mt = load_ctranslate2(
            out,
            device=device,
            compute_type=kind,
            inter_threads=1,
            intra_threads=torch.get_num_threads() if device == "cpu" else 0,
        )

        def decode(src, mt=mt):
            rows = [[d[i] for i in row.tolist() if i not in (d.pad(), d.eos())] for row in src]  # (B,) word lists
            return [
                [d.index(w) for w in tokens] + [d.eos()]
                for _, tokens, _ in mt.translate_tokens(rows, batch_size=len(rows))
            ]

        decoders[f"ct2_{kind}"] = decode
    return decoders


def search_for(shape, name, model, d):
    """Beam 4, lenpen 0.6, max length input + 50: fairseq's SequenceGenerator, or for ours with the
    batched_search lever --batched-search's generator (with cuda_graph, its graphed decoder step;
    with graph_search, its whole step graphed; with reorder_kernel and decode_kernel, the kernels)."""
    from fairseq.sequence_generator import SequenceGenerator

    settings = dict(beam_size=4, len_penalty=0.6, max_len_a=1, max_len_b=50)
    if name == "ours" and levers(shape)["batched_search"]:
        from attn_only_plugin.tasks.batched_search import BatchedBeamSearch

        chosen = levers(shape)
        paths = dict(cuda_graph=chosen["cuda_graph"], graph_search=chosen["graph_search"])
        kernels = dict(reorder_kernel=chosen["reorder_kernel"], decode_kernel=chosen["decode_kernel"])
        return BatchedBeamSearch([model], d, **paths, **kernels, **settings)
    return SequenceGenerator([model], d, **settings)


def reorder_check(shape, device, dtype, rows=1024, k=4, positions=128) -> dict:
    """With the reorder_kernel lever: whether the kernel runs here (modules/beam_reorder.py), and
    if so its in-place reorder of a random cache buffer of the model's heads (rows hypotheses, beam
    k) at three steps, each against torch's buffer[order] of the same buffer: on a GPU, where the
    kernel's barrier between reads and writes matters (Triton's interpreter runs every read first).
    Its calls in this process are counted later (counting_kernel_calls)."""
    import torch

    from attn_only_plugin.modules import beam_reorder

    d, h = shape["d_model"] // shape["heads"], shape["heads"]
    buffer = torch.randn(rows, h, positions, d, device=device).to(dtype)  # (B k, h, C, d_k)
    check = dict(kernel_runs=beam_reorder.available(buffer), equal=None, calls=0)
    if check["kernel_runs"]:
        g = torch.Generator().manual_seed(5)
        expected = buffer.clone()
        for last in (0, positions // 3, positions - 1):
            order = torch.arange(rows // k)[:, None] * k + torch.randint(0, k, (rows // k, k), generator=g)
            order = order.reshape(-1).to(device)  # (B k,) within each sentence's k rows
            expected[:, :, : last + 1] = expected[order, :, : last + 1]
            beam_reorder.reorder_within_groups(buffer, order, k, torch.full((1,), last, device=device))
        check["equal"] = bool(torch.equal(buffer, expected))
    return check


def decode_check(shape, device, dtype, rows=1024, positions=128) -> dict:
    """With the decode_kernel lever: whether the kernel runs here (modules/decode_attention.py), and
    if so the largest difference of its output from torch's fused attention, on random queries and
    a cache buffer of the model's heads (rows hypotheses) at three steps (on a GPU: the compiled
    kernel, where the tests ran Triton's interpreter). Its calls in this process are counted later."""
    import torch

    from attn_only_plugin.modules import decode_attention, static_cache
    from attn_only_plugin.modules.kernels import fused_attention

    d, h = shape["d_model"] // shape["heads"], shape["heads"]
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(rows, h, n, d, generator=g).to(device, dtype) for n in (1, positions, positions))
    check = dict(kernel_runs=decode_attention.available(q), max_abs_difference=None, calls=0)
    if check["kernel_runs"]:
        worst = 0.0
        for last in (0, positions // 3, positions - 1):
            mask = static_cache.visible(torch.full((1,), last, device=device), positions, dtype)[
                None, None
            ]  # (1, 1, 1, C)
            with decode_attention.enabled():
                ours = decode_attention.attend(q, k, v, mask)
            worst = max(worst, float((ours.float() - fused_attention(q, k, v, mask).float()).abs().max()))
        check["max_abs_difference"] = worst
    return check


def count_calls(owner, name: str, tally: dict) -> None:
    """Wraps owner.<name> (a module's function or a class's method) in this process so that each
    call adds 1 to tally["calls"]."""
    function = getattr(owner, name)

    def counted(*args, **kwargs):
        tally["calls"] += 1
        return function(*args, **kwargs)

    setattr(owner, name, counted)


def counting_kernel_calls(check: dict, module: str, name: str) -> None:
    """Counts the calls of attn_only_plugin.modules.<module>.<name> in this process into check["calls"]."""
    import importlib

    count_calls(importlib.import_module(f"attn_only_plugin.modules.{module}"), name, check)


def counting_captures() -> dict:
    """Counts the CUDA graphs our searches capture (modules/step_graph.py's StepGraph.capture,
    wrapped in this process): {"calls": the count so far}."""
    from attn_only_plugin.modules.step_graph import StepGraph

    tally = {"calls": 0}
    count_calls(StepGraph, "capture", tally)
    return tally


def generation(
    shape, device, n_sentences, batch_size, batching, repeats=1, half=False, ct2=True, profile=False, trace=None
):
    """Beam-4 SequenceGenerator on the same sentences for both models (same weights; with half,
    both in fp16, as fairseq-generate --fp16 runs them), and with ct2 our model exported to
    CTranslate2 (ctranslate2_decoders). They take turns batch by batch (who goes first rotates),
    so that a machine whose speed drifts slows all alike; each repeat translates every sentence
    once with each, and speeds are the medians over repeats. With `profile`, then the first batch
    once more with each model (not CTranslate2) under the profiler (profile.py; `trace`: the folder
    for their Chrome traces)."""
    import tempfile

    import torch

    theirs, ours, d = build_pair(shape)
    models = {"fairseq": theirs, "ours": ours}
    models = {name: (m.to(half_dtype(shape, device)) if half else m).to(device).eval() for name, m in models.items()}
    searches = {name: search_for(shape, name, m, d) for name, m in models.items()}
    gens = {
        name: (
            lambda src, lengths, m=m, g=searches[name]: [
                h[0]["tokens"].tolist()
                for h in g.generate([m], {"net_input": {"src_tokens": src, "src_lengths": lengths}})
            ]
        )
        for name, m in models.items()
    }
    folder = tempfile.TemporaryDirectory(prefix="benchmark-ct2-")
    if ct2:
        gens.update(
            {
                name: (lambda src, lengths, f=f: f(src))
                for name, f in ctranslate2_decoders(ours, d, device, half, folder.name).items()
            }
        )
    batches = make_batches(d, max(1, n_sentences // batch_size), batch_size, seed=2, batching=batching)
    seconds = {name: [0.0] * repeats for name in gens}
    captured, captures = counting_captures(), []  # graphs captured in each repeat (ours's only have any)
    checks, dtype = {}, half_dtype(shape, device) if half else torch.float32
    if levers(shape)["reorder_kernel"]:  # checked against torch's reorder before timing, then its calls counted
        checks["reorder_kernel_check"] = reorder_check(shape, device, dtype)
        counting_kernel_calls(checks["reorder_kernel_check"], "beam_reorder", "reorder_within_groups")
    if levers(shape)["decode_kernel"]:  # the same against torch's attention
        checks["decode_kernel_check"] = decode_check(shape, device, dtype)
        counting_kernel_calls(checks["decode_kernel_check"], "decode_attention", "attend")
    hyps = {name: [] for name in gens}
    sync = synchronizer(device)
    with torch.no_grad(), folder:
        for r in range(repeats):
            captures.append(-captured["calls"])
            for i, b in enumerate(batches):
                src, lengths = b["src"].to(device), b["lengths"].to(device)
                for name in rotation(list(gens), r + i):
                    t = time.perf_counter()
                    out = gens[name](src, lengths)
                    sync()
                    seconds[name][r] += time.perf_counter() - t
                    if r == 0:
                        hyps[name] += out
            captures[r] += captured["calls"]
        profiles = {}
        if profile:  # the first batch once more with each model, under the profiler
            src, lengths = batches[0]["src"].to(device), batches[0]["lengths"].to(device)
            for name in ("fairseq", "ours"):
                trace_to = trace_file(trace, "generation", name)
                profiles[name] = profiled(lambda i, g=gens[name]: g(src, lengths), 1, device, trace_to)
    result = {}
    for name in gens:
        s = statistics.median(seconds[name])
        result[name] = dict(sentences_per_s=len(hyps[name]) / s, tokens_per_s=sum(map(len, hyps[name])) / s)
        if name in profiles:
            result[name]["profile"] = profiles[name]
        if name.startswith("ct2_"):
            result[name]["identical_sentences"] = sum(a == b for a, b in zip(hyps[name], hyps["fairseq"], strict=False))
    result["sentences"] = len(hyps["ours"])
    result["ratio_per_repeat"] = [f / o for f, o in zip(seconds["fairseq"], seconds["ours"], strict=False)]
    result["identical_hypotheses"] = hyps["ours"] == hyps["fairseq"]
    result["identical_sentences"] = sum(a == b for a, b in zip(hyps["ours"], hyps["fairseq"], strict=False))
    result["graphs_captured_per_repeat"] = captures  # a graphed search's captures: fewer once its shapes repeat
    result.update(checks)
    result["ctranslate2_threads"] = dict(inter_threads=1, intra_threads=torch.get_num_threads()) if ct2 else None
    return result


def importable(name: str) -> bool:
    """Whether the module `name` imports (ctranslate2 on a machine with only the GPU bundle)."""
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True
