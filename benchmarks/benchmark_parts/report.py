"""The table benchmarks/benchmark.py prints: one row per measure, ours against the built-in, and
with --profile a line per model and part saying where a step's time goes."""

from .profile import describe


def table(r) -> str:
    """The results of benchmark.run as a table (ours, built-in, ratio) and the lines below it."""
    t, g = r["training"], r["generation"]
    rows = [("training tokens/s", "tokens_per_s"), ("training peak memory (MiB)", "peak_mib")] if t else []
    values = [(name, t["ours"][key], t["fairseq"][key]) for name, key in rows]
    if t:
        values.append(("training model GFLOP/s", t["ours"]["flops_per_s"] / 1e9, t["fairseq"]["flops_per_s"] / 1e9))
        values += [
            (name, t["ours"][key], t["fairseq"][key])
            for name, key in (("training step (ms, mean)", "step_ms"), ("of which optimizer (ms)", "optimizer_ms"))
        ]
    ct2 = [name for name in g if name.startswith("ct2_")] if g else []
    if g:
        values += [
            (name, g["ours"][key], g["fairseq"][key])
            for name, key in (("generation sentences/s", "sentences_per_s"), ("generation tokens/s", "tokens_per_s"))
        ]
        values += [
            (f"CTranslate2 {name[4:]} sentences/s", g[name]["sentences_per_s"], g["fairseq"]["sentences_per_s"])
            for name in ct2
        ]
    lines = [
        f"preset {r['preset']} {r['shape']} on {r['device']}{' amp' if r['amp'] else ''}, {r['batching']} batches"
        f" of {r['batch_size']} sentences"
        + (f", attention kernels {'/'.join(r['sdpa_backends'])}" if isinstance(r.get("sdpa_backends"), list) else "")
    ]
    if t:
        pads = t["ours"]["pad_share"]
        lines[0] += (
            f" (training: {pads['src']:.0%} of source and {pads['tgt']:.0%} of target positions are pads;"
            f" optimizer {t['ours']['optimizer']} for ours, {t['fairseq']['optimizer']} for the built-in)"
        )
    lines += [
        f"| {'measure':<28} | {'ours':>10} | {'built-in':>10} | {'ratio':>6} |",
        f"|{'-' * 30}|{'-' * 12}|{'-' * 12}|{'-' * 8}|",
    ]
    lines += [f"| {n:<28} | {a:>10.1f} | {b:>10.1f} | {a / b:>5.2f}x |" for n, a, b in values]
    if t:
        mfu = (
            f"{t['ours']['mfu']:.1%} ours, {t['fairseq']['mfu']:.1%} built-in of {r['peak_tflops']:g} TFLOP/s"
            if t["ours"]["mfu"] is not None
            else "not known without the device's peak (--peak-tflops)"
        )
        lines.append(f"training model FLOPs utilisation: {mfu}")
        if "torch_compile" in t["ours"]:
            lines.append("torch.compile, ours: " + describe_compile(t["ours"]["torch_compile"], reasons=True))
        if "peak_mib_checkpointed" in t["ours"]:
            lines.append(
                f"training peak memory, ours with --checkpoint-activations: "
                f"{t['ours']['peak_mib_checkpointed']:.1f} MiB ({t['ours']['peak_mib']:.1f} without)"
            )
    if g:
        lines.append(
            f"identical beam-4 hypotheses: {g['identical_hypotheses']}"
            f" ({g['identical_sentences']} of {g['sentences']} sentences)"
        )
        if ct2:
            threads = g["ctranslate2_threads"]
            lines.append(
                "CTranslate2 (its sentences/s in the ours column; inter_threads "
                f"{threads['inter_threads']}, intra_threads {threads['intra_threads']}), hypotheses identical "
                "to the built-in's: "
                + ", ".join(f"{name[4:]} {g[name]['identical_sentences']} of {g['sentences']}" for name in ct2)
            )
    for part, results in (("training", t), ("generation", g)):
        for which in ("ours", "fairseq"):
            if results and "profile" in results[which]:
                lines.append(f"profile, {part}, {which}: {describe(results[which]['profile'])}")
    return "\n".join(lines)


def describe_compile(made, reasons=False) -> str:
    """What torch.compile made (training.compile_report) in a few words; with `reasons`, the graph
    breaks' reasons after their count."""
    why = "; ".join(f"{n} x {reason}" for reason, n in made["graph_break_reasons"].items()) if reasons else ""
    return (
        f"{made['graphs']} graphs, {made['graph_breaks']} graph breaks"
        + (f" ({why})" if why else "")
        + f", {made['recompile_limit_hits']} recompile limits hit, {made['frames_left_eager']} frames left eager"
    )
