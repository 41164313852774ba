"""benchmarks/benchmark.py on the tiny preset: it runs, both models decode the same hypotheses, and
the table and JSON carry every measure. (Speeds themselves are never asserted.)"""

import json
import os
import re

import pytest

from attn_only_tools.guards.errors import PluginError


def test_tiny_benchmark_runs_and_hypotheses_match(cli, tmp_path):
    out = tmp_path / "bench.json"
    proc = cli(
        "benchmark",
        "--preset",
        "tiny",
        "--updates",
        "1",
        "--warmup",
        "0",
        "--repeats",
        "2",
        "--batch-size",
        "4",
        "--generate",
        "4",
        "--peak-tflops",
        "1",
        "--out",
        out,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "identical beam-4 hypotheses: True" in proc.stdout
    assert "training model FLOPs utilisation: " in proc.stdout and "of 1 TFLOP/s" in proc.stdout
    r = json.loads(out.read_text())
    assert r["generation"]["identical_hypotheses"] is True and len(r["generation"]["ratio_per_repeat"]) == 2
    assert r["generation"]["identical_sentences"] == r["generation"]["sentences"] == 4
    # our model exported to CTranslate2, in the same turns: its hypotheses are the built-in's
    assert "CTranslate2 float32 sentences/s" in proc.stdout and "CTranslate2 int8 sentences/s" in proc.stdout
    assert r["generation"]["ctranslate2_threads"]["inter_threads"] == 1
    assert r["generation"]["ct2_float32"]["identical_sentences"] == 4
    assert r["generation"]["ct2_float32"]["sentences_per_s"] > 0 and r["generation"]["ct2_int8"]["sentences_per_s"] > 0
    assert len(r["training"]["ratio_per_repeat"]) == 2  # both models trained in the one process, in turns
    # each with the optimizer its fairseq-train recipe names
    assert (r["training"]["ours"]["optimizer"], r["training"]["fairseq"]["optimizer"]) == ("paper_adam", "adam")
    assert "optimizer paper_adam for ours, adam for the built-in" in proc.stdout
    for which in ("ours", "fairseq"):
        t = r["training"][which]
        assert t["tokens_per_s"] > 0 and t["peak_mib"] > 0 and len(t["tokens_per_s_per_repeat"]) == 2
        assert 0 < t["optimizer_ms"] < t["step_ms"]
        assert 0 < t["mfu"] == t["flops_per_s"] / 1e12
        assert r["generation"][which]["sentences_per_s"] > 0


def test_model_flops_hand_computed(script):
    """N=1, d=4, d_ff=8, V=10: P_enc = 4*16 + 2*4*8 = 128, P_dec = 8*16 + 64 + 40 = 232; sources of 2
    and 3 real tokens, targets of 2 and 2: 6 (128*5 + 232*4) = 9408, plus 3 x attention
    4*1*4 ((2*2 + 4*2) + (3*3 + 5*2)) = 3 * 496 = 1488."""
    import torch

    bench = script("benchmark")
    shape = dict(d_model=4, d_ff=8, heads=2, layers=1, vocab=10)
    batch = {"src": torch.tensor([[1, 5, 2], [5, 6, 2]]), "tgt": torch.tensor([[7, 2], [8, 2]])}
    assert bench.model_flops(batch, shape, pad=1) == 9408 + 1488
    assert bench.peak_tflops("cpu", False) is None and bench.peak_tflops("cpu", False, 2.5) == 2.5


def test_same_optimizer_for_both(script):
    bench = script("benchmark")
    assert [bench.optimizer_for(w, "recipe") for w in ("ours", "fairseq")] == ["paper_adam", "adam"]
    assert [bench.optimizer_for(w, "adam") for w in ("ours", "fairseq")] == ["adam", "adam"]


def test_batches_default_to_the_presets(cli, script, tmp_path):
    """Without --batch-size and --generate: the preset's batch (256 sentences for the GPU shapes,
    whose speed on the CPU shapes' ~650-token steps would measure kernel launches), and two
    batches' worth of sentences to translate, in batches of half as many."""
    assert script("benchmark").BATCH_SIZE == {"tiny": 32, "cpu": 32, "base": 256, "big": 256}
    out = tmp_path / "bench.json"
    proc = cli("benchmark", "--preset", "tiny", "--parts", "generation", "--repeats", "1", "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(out.read_text())
    assert r["batch_size"] == 32 and r["generation"]["sentences"] == 64 and "batches of 32 sentences" in proc.stdout


def test_generation_only(cli):
    proc = cli(
        "benchmark",
        "--preset",
        "tiny",
        "--generate",
        "4",
        "--batch-size",
        "4",
        "--parts",
        "generation",
        "--batching",
        "sorted",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "generation sentences/s" in proc.stdout and "training tokens/s" not in proc.stdout
    proc = cli(
        "benchmark",
        "--preset",
        "tiny",
        "--generate",
        "2",
        "--batch-size",
        "2",
        "--parts",
        "generation",
        "--repeats",
        "1",
        "--no-ctranslate2",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "generation sentences/s" in proc.stdout and "CTranslate2" not in proc.stdout


def test_without_a_speed_path(cli, script, monkeypatch, tmp_path):
    """--without turns our speed paths off (to measure what each buys, docs/speed.md): the module
    constants that switch them, in every measuring process; the hypotheses stay the built-in's."""
    import attn_only_plugin.modules.packing as packing

    monkeypatch.setattr(packing, "MIN_PAD_FRACTION", packing.MIN_PAD_FRACTION)  # restored after
    script("benchmark")
    from benchmark_parts.common import turn_off

    turn_off(["packing"])
    assert packing.MIN_PAD_FRACTION > 1  # nothing packs
    out = tmp_path / "bench.json"
    args = ["--generate", "4", "--batch-size", "4", "--parts", "generation", "--repeats", "1", "--no-ctranslate2"]
    proc = cli("benchmark", "--preset", "tiny", *args, "--without", "packing", "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(out.read_text())
    assert r["shape"]["without"] == ["packing"] and r["generation"]["identical_hypotheses"] is True
    assert "'without': ['packing']" in proc.stdout
    # argparse's refusal, also of the beam-shared self-attention cache's switch, dropped
    assert cli("benchmark", "--preset", "tiny", "--without", "shared-cache").returncode == 2


def test_generation_without_ctranslate2_installed(tmp_path):
    """A GPU machine with only the bundle: the CTranslate2 columns are left out, with a line saying why."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "ctranslate2.py").write_text("raise ImportError('No module named ctranslate2')\n")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [
            sys.executable,
            "benchmarks/benchmark.py",
            "--preset",
            "tiny",
            "--generate",
            "2",
            "--batch-size",
            "2",
            "--parts",
            "generation",
            "--repeats",
            "1",
        ],
        cwd=root,
        env=dict(os.environ, PYTHONPATH=str(tmp_path), PYTHONWARNINGS="ignore"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ctranslate2 is not installed: no CTranslate2 columns" in proc.stderr
    assert "generation sentences/s" in proc.stdout and "CTranslate2" not in proc.stdout


def test_batches_follow_fairseq_layout(script):
    """Left-padded sources, right-padded targets, prev_output_tokens = eos + target without its
    eos; "sorted" batches have no source pads and targets of varying length, like fairseq's."""
    from helpers import make_dictionary

    bench, d = script("benchmark"), make_dictionary(50)
    for batching in ("random", "sorted"):
        for b in bench.make_batches(d, 3, 8, batching=batching):
            src, prev, tgt = b["src"], b["prev"], b["tgt"]
            assert src[:, -1].eq(d.eos()).all() and b["lengths"].equal(src.ne(d.pad()).sum(1))
            real = tgt[:, 1:].ne(d.pad())
            assert prev[:, 0].eq(d.eos()).all() and prev[:, 1:][real].equal(tgt[:, :-1][real])
            assert prev.eq(d.pad()).equal(tgt.eq(d.pad())) and (tgt.eq(d.eos()).sum(1) == 1).all()
    sorted_pads = bench.pad_share(bench.make_batches(d, 4, 16, batching="sorted"), d.pad())
    random_pads = bench.pad_share(bench.make_batches(d, 4, 16, batching="random"), d.pad())
    assert sorted_pads["src"] == 0 and 0.05 < sorted_pads["tgt"] < 0.3 and random_pads["src"] > 0.15


def test_fresh_batches_never_repeat_a_shape(script):
    """--batching fresh: every batch of its own (source, target) shape, in fairseq's layout with no
    source pads, and each model's steps on shapes the other model's never had."""
    from helpers import make_dictionary

    bench, d = script("benchmark"), make_dictionary(50)
    batches = bench.make_batches(d, 40, 4, batching="fresh")
    shapes = [(b["src"].shape, b["tgt"].shape) for b in batches]
    assert len(set(shapes)) == 40 and all(b["src"].ne(d.pad()).all() for b in batches)
    from benchmark_parts.training import step_batches

    per_model = step_batches(d, "cpu", 4, "fresh", 10)
    ours, theirs = ({(b["src"].shape, b["tgt"].shape) for b in per_model[m]} for m in ("ours", "fairseq"))
    assert len(ours) == len(theirs) == 10 and not ours & theirs
    cycled = step_batches(d, "cpu", 4, "sorted", 10)  # the 4 batches that steps cycle, for both models
    assert cycled["ours"] is cycled["fairseq"] and len(cycled["ours"]) == 4


def test_benchmark_needs_no_compiled_fairseq(tmp_path):
    """Where PyPI has no fairseq-fixed wheel for the GPU machine's Python, benchmarks/gpu_bundle.sh
    carries fairseq's Python sources without its compiled extensions there: the benchmark,
    training (fairseq's `adam` included) and generation, must run on them alone."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import fairseq

    site = tmp_path / "site"
    shutil.copytree(
        Path(fairseq.__file__).parent, site / "fairseq", ignore=shutil.ignore_patterns("*.so", "__pycache__")
    )
    root = Path(__file__).resolve().parents[2]
    code = (
        "import fairseq, runpy, sys; assert fairseq.__file__.startswith(sys.argv[1]), fairseq.__file__; "
        "sys.argv = ['benchmark.py', '--preset', 'tiny', '--updates', '1', '--warmup', '0', '--repeats', '1', "
        "'--generate', '4', '--batch-size', '4']; runpy.run_module('benchmark', run_name='__main__')"
    )
    path = os.pathsep.join([str(site), str(root), str(root / "benchmarks")])  # benchmarks/: as running it would
    env = dict(os.environ, PYTHONPATH=path, PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [sys.executable, "-c", code, str(site)], cwd=root, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not list(site.rglob("*.so")) and "identical beam-4 hypotheses: True" in proc.stdout


def test_gpu_bundle_without_an_install_says_what_to_do(tmp_path):
    import os
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        ["bash", str(root / "benchmarks" / "gpu_bundle.sh")],
        capture_output=True,
        text=True,
        env=dict(os.environ, VENV=str(tmp_path / "no-venv")),
    )
    assert proc.returncode == 1 and "run 'bash scripts/install.sh' first" in proc.stderr


def test_gpu_benchmark_without_a_gpu_says_so_in_one_line(tmp_path):
    """benchmarks/gpu_benchmark.sh on a machine without CUDA: one line, exit 1, no output folder."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(
        ["bash", str(root / "benchmarks" / "gpu_benchmark.sh"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 1 and not (tmp_path / "out").exists()
    assert proc.stderr.strip().splitlines() == [
        "error: python3 here has no torch with a usable CUDA GPU: run this on the GPU machine (on a CPU: "
        "python benchmarks/benchmark.py --preset cpu, docs/speed.md)"
    ]


def test_counts_that_measure_nothing_are_refused_up_front(cli, script):
    """--updates 0 used to end the training process on a ZeroDivisionError while the parent waited
    for its result forever; --batch-size 0 and --generate 0 silently meant the preset's."""
    proc = cli("benchmark", "--preset", "tiny", "--updates", 0)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == ["error: --updates must be >= 1, got 0"]
    bench = script("benchmark")
    for args, message in [
        (["--repeats", "0"], "--repeats must be >= 1, got 0"),
        (["--warmup", "-1"], "--warmup must be >= 0, got -1"),
        (["--batch-size", "0"], "--batch-size must be >= 1, got 0: leave it out for the preset's"),
        (["--generate", "-4"], "--generate must be >= 1, got -4: leave it out for the preset's"),
        (
            ["--peak-tflops", "0"],
            "--peak-tflops must be > 0, got 0.0: leave it out when the device's peak is not known",
        ),
        (
            ["--batching", "fresh", "--updates", "40"],
            "--batching fresh has 215 batch shapes and 2 x (--warmup + --repeats x --updates) = 244 steps "
            "would need more: fewer --updates or --repeats",
        ),
        (
            ["--cuda-graph", "--batched-search"],
            "--cuda-graph graphs the step of --batched-search with --static-cache: add both",
        ),
    ]:
        with pytest.raises(SystemExit, match=f"^error: {re.escape(message)}$"):
            bench.main(["--preset", "tiny", *args])
    with pytest.raises(ValueError, match="--updates must be >= 1, got 0"):  # the library function too
        bench.run("tiny", updates=0)


def test_a_failing_or_dying_worker_ends_the_parent_in_one_line(script):
    bench = script("benchmark")
    ctx = bench.mp.get_context("spawn")
    assert bench.in_process(ctx, int, "12") == 12  # the control
    with pytest.raises(
        PluginError,
        match=re.escape(
            "the int process failed: ValueError: invalid literal for int() with base 10: 'x': rerun with "
            "ATTN_ONLY_TRACEBACK=1 for its traceback"
        ),
    ):
        bench.in_process(ctx, int, "x")
    with pytest.raises(PluginError, match=re.escape("the _exit process died (exit status 3) without a result")):
        bench.in_process(ctx, os._exit, 3)
    # the original hang: the training process's ZeroDivisionError with no update to divide by
    with pytest.raises(PluginError, match="the train_speed process failed: ZeroDivisionError: "):
        bench.in_process(ctx, bench.train_speed, bench.PRESETS["tiny"], "cpu", False, 0, 0, 1, 2, "random", "recipe")


def test_peak_memory_with_checkpoint_activations(cli, tmp_path):
    """--checkpoint-activations measures ours's training peak memory once more, recomputing layers."""
    out = tmp_path / "bench.json"
    proc = cli(
        "benchmark",
        "--preset",
        "tiny",
        "--parts",
        "training",
        "--updates",
        "1",
        "--warmup",
        "0",
        "--repeats",
        "1",
        "--batch-size",
        "4",
        "--checkpoint-activations",
        "--out",
        out,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    ours = json.loads(out.read_text())["training"]["ours"]
    assert ours["peak_mib_checkpointed"] > 0 and ours["peak_mib"] > 0
    assert "training peak memory, ours with --checkpoint-activations: " in proc.stdout


def test_sdpa_backends_restrict_torch_and_reach_the_measuring_processes(script, monkeypatch):
    """--sdpa-backends: the flags torch.backends.cuda reads, set here and, through the environment,
    in each measuring process (processes._worker); unset, torch's are left alone."""
    import torch

    script("benchmark")
    import benchmark_parts.processes as processes

    on = torch.backends.cuda
    saved = (on.cudnn_sdp_enabled(), on.flash_sdp_enabled(), on.mem_efficient_sdp_enabled(), on.math_sdp_enabled())
    try:
        monkeypatch.delenv(processes.SDPA_ENV, raising=False)
        processes.restrict_sdpa()
        assert (
            on.cudnn_sdp_enabled(),
            on.flash_sdp_enabled(),
            on.mem_efficient_sdp_enabled(),
            on.math_sdp_enabled(),
        ) == saved
        monkeypatch.setenv(processes.SDPA_ENV, "efficient,math")
        processes.restrict_sdpa()
        assert not on.cudnn_sdp_enabled() and not on.flash_sdp_enabled()
        assert on.mem_efficient_sdp_enabled() and on.math_sdp_enabled()
        processes.restrict_sdpa(["cudnn"])
        assert on.cudnn_sdp_enabled() and not on.mem_efficient_sdp_enabled() and not on.math_sdp_enabled()
    finally:
        on.enable_cudnn_sdp(saved[0])
        on.enable_flash_sdp(saved[1])
        on.enable_mem_efficient_sdp(saved[2])
        on.enable_math_sdp(saved[3])


def test_sdpa_restriction_lasts_only_while_measuring(script, monkeypatch):
    """benchmark.run(sdpa=...) restricts torch's kernels through processes.sdpa_restricted: inside,
    the variable the measuring processes read and torch's flags are set; after, both are the
    caller's again (a variable the caller had set, and one it had not)."""
    import os

    import torch

    script("benchmark")
    import benchmark_parts.processes as processes

    on = torch.backends.cuda

    def flags():
        return (on.cudnn_sdp_enabled(), on.flash_sdp_enabled(), on.mem_efficient_sdp_enabled(), on.math_sdp_enabled())

    before = flags()
    for caller_env in (None, "math"):
        if caller_env is None:
            monkeypatch.delenv(processes.SDPA_ENV, raising=False)
        else:
            monkeypatch.setenv(processes.SDPA_ENV, caller_env)
        with processes.sdpa_restricted(["flash", "efficient"]):
            assert os.environ[processes.SDPA_ENV] == "flash,efficient"
            assert flags() == (False, True, True, False)
        assert os.environ.get(processes.SDPA_ENV) == caller_env
        assert flags() == before
    with processes.sdpa_restricted(()):  # none named: torch's choice, nothing touched
        assert flags() == before and os.environ.get(processes.SDPA_ENV) == "math"
    with pytest.raises(KeyError), processes.sdpa_restricted(["cudnn"]):
        raise KeyError("a failed measurement")
    assert flags() == before


def test_profile_says_where_each_step_goes(cli, tmp_path):
    """--profile: per model and part, the time of a few more steps by category, summing to the
    total (on a CPU each op's own CPU time), a top list, the busy fraction; --profile-trace a
    Chrome trace per model and part."""
    out, traces = tmp_path / "bench.json", tmp_path / "traces"
    args = ["--updates", "1", "--warmup", "0", "--repeats", "1", "--batch-size", "4", "--generate", "4"]
    proc = cli("benchmark", "--preset", "tiny", *args, "--no-ctranslate2", "--profile-trace", traces, "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(out.read_text())
    for part, steps in (("training", 3), ("generation", 1)):
        for which in ("ours", "fairseq"):
            p = r[part][which]["profile"]
            assert p["clock"] == "cpu" and p["steps"] == steps and p["launches_per_step"] is None
            kinds = p["ms_per_step"]
            assert set(kinds) == {
                "matrix_products",
                "attention",
                "norm_elementwise",
                "copies_casts",
                "optimizer",
                "other",
            }
            assert abs(sum(kinds.values()) - p["device_ms_per_step"]) <= 0.001 * len(kinds)
            assert kinds["matrix_products"] > 0 and (kinds["optimizer"] > 0) == (part == "training")
            assert 0 < p["busy_fraction"] <= 1.5 and p["kernels_per_step"] > 0
            assert 0 < len(p["top"]) <= 15 and p["top"][0]["ms_per_step"] >= p["top"][-1]["ms_per_step"] > 0
            host = [h["ms_per_step"] for h in p["host_top"]]
            assert 0 < len(host) <= 10 and host == sorted(host, reverse=True) and host[-1] >= 0
            assert abs(p["host_ms_per_step"] - p["device_ms_per_step"]) <= 0.01  # on a CPU both are the ops' own
            assert f"profile, {part}, {which}: " in proc.stdout
            assert json.loads((traces / f"{part}_{which}.json").read_text())["traceEvents"]


def test_profile_categories_of_cuda_kernels(script):
    """On CUDA each kernel goes by its own name, the op that launched it and the ops around that
    one; the optimizer's step and attention ops claim all inside them; a kernel the profiler linked
    to no op goes by its name; the device's spans of scopes are not work."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    script("benchmark")
    from benchmark_parts.profile import category, summary

    def op(name, parent=None, kernels=(), own_us=1.0):
        kernels = [SimpleNamespace(name=k, device=0, duration=us) for k, us in kernels]
        return SimpleNamespace(
            name=name,
            device_type=DeviceType.CPU,
            cpu_parent=parent,
            kernels=kernels,
            is_async=False,
            self_cpu_time_total=own_us,
        )

    def kernel(name, us, annotation=False):
        span = SimpleNamespace(elapsed_us=lambda: us)
        return SimpleNamespace(name=name, device_type=DeviceType.CUDA, time_range=span, is_user_annotation=annotation)

    gemm, add, copy = "sm90_xmma_gemm_f16f16_f16f32", "vectorized_elementwise_kernel<CUDAFunctor_add>", "direct_copy"
    step = op("optimizer step")
    step.is_user_annotation = True  # record_function's scope: a span, not an op of its own
    events = [
        op("aten::mm", kernels=[(gemm, 30.0)]),
        op("aten::add_", parent=op("Optimizer.step#Adam.step", parent=step), kernels=[(add, 4.0)]),
        op("aten::add", kernels=[(add, 6.0)]),
        op("aten::copy_", parent=op("aten::_to_copy", parent=op("aten::to")), kernels=[(copy, 2.0)]),
        op("cudaLaunchKernel", own_us=3.0),
        op("cudaLaunchKernel", own_us=5.0),
        op("cudaGraphInstantiate", own_us=40.0),
        op("cudaGraphLaunch", own_us=2.0),
        step,
        kernel(gemm, 30.0),
        kernel(add, 4.0),
        kernel(add, 6.0),
        kernel(copy, 2.0),
        kernel("fmha_cutlassF_f16_aligned_64x64_rf_sm80", 8.0),  # replayed in a graph: no op
        kernel("Memcpy HtoD (Pageable -> Device)", 2.0),
        kernel("optimizer step", 50.0, annotation=True),
    ]
    p = summary(events, 2, 1e-4, "cuda")
    assert p["clock"] == "cuda" and p["launches_per_step"] == 1.5 and p["kernels_per_step"] == 3
    assert p["ms_per_step"] == dict(
        optimizer=0.002, attention=0.004, copies_casts=0.002, matrix_products=0.015, norm_elementwise=0.003, other=0
    )
    assert p["device_ms_per_step"] == 0.026 and p["wall_ms_per_step"] == 0.05 and p["busy_fraction"] == 0.52
    assert p["top"][0] == dict(
        name=gemm, op="aten::mm", category="matrix_products", ms_per_step=0.015, calls_per_step=0.5
    )
    # the host: each op's and CUDA call's own time, per step, most first; the scope's span is no op
    assert p["host_top"][:2] == [
        dict(name="cudaGraphInstantiate", ms_per_step=0.02, calls_per_step=0.5),
        dict(name="cudaLaunchKernel", ms_per_step=0.004, calls_per_step=1.0),
    ]
    assert p["host_ms_per_step"] == 0.027 and len(p["host_top"]) == 7
    assert category(["Memset (Device)"]) == "copies_casts" and category(["aten::topk"]) == "other"
    assert category(["elementwise_kernel<masked_fill_kernel>", "aten::masked_fill_"]) == "norm_elementwise"


def test_varlen_check_compares_the_packed_and_padded_paths(script, monkeypatch):
    """--varlen-attention's check in the benchmark: with a CPU reference of the kernel, every
    attention call of the packed pass takes it, the two passes agree, and the model comes back as
    it was (dropout rates, the lever on, no gradients)."""
    script("benchmark")
    from attn_only_plugin.modules import varlen
    from benchmark_parts.common import build_pair, make_batches
    from benchmark_parts.training import varlen_check
    from helpers import reference_varlen

    monkeypatch.setattr(varlen, "kernel_runs", lambda x: True)
    monkeypatch.setattr(varlen, "KERNEL", reference_varlen)
    shape = dict(d_model=32, d_ff=64, heads=4, layers=2, vocab=50, levers={"varlen": True})
    _, ours, d = build_pair(shape)
    ours.train()
    rates = [m.p for m in ours.modules() if hasattr(m, "apply_during_inference") and hasattr(m, "p")]
    check = varlen_check(ours, make_batches(d, 1, 4)[0], "cpu", False, d.pad(), None)
    assert check["packed_attention_calls"] == 3 * 2  # per layer: the encoder's, the decoder's two
    assert check["loss_relative_difference"] < 1e-6 and check["gradient_relative_difference_max"] < 1e-4
    assert [m.p for m in ours.modules() if hasattr(m, "apply_during_inference") and hasattr(m, "p")] == rates
    assert 0.1 in rates
    assert ours.encoder.varlen and ours.decoder.varlen and varlen.KERNEL is reference_varlen
    assert all(p.grad is None for p in ours.parameters())


def test_reorder_check_where_the_kernel_cannot_run(script, monkeypatch):
    """--beam-reorder-kernel's check in the benchmark on a CPU without Triton's interpreter: not
    run, and the row's cell says so (test_reorder_check_runs_the_kernel: where it runs, the kernel's
    reorders of a test buffer equal torch's and its calls are counted)."""
    import torch

    script("benchmark")
    levers = script("gpu_levers")
    from benchmark_parts.generation import reorder_check

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    shape = dict(d_model=32, heads=4)
    assert reorder_check(shape, "cpu", torch.float32, rows=16) == dict(kernel_runs=False, equal=None, calls=0)
    assert levers.reorder_cell(dict(kernel_runs=False)) == "; reorder kernel: cannot run here (torch's ops)"


def test_reorder_check_runs_the_kernel(script, monkeypatch):
    """The check with the kernel run by Triton's interpreter (where Triton is installed)."""
    import pytest
    import torch

    pytest.importorskip("triton")
    script("benchmark")
    levers = script("gpu_levers")
    from attn_only_plugin.modules import beam_reorder
    from benchmark_parts.generation import counting_kernel_calls, reorder_check

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    shape = dict(d_model=32, heads=4)
    check = reorder_check(shape, "cpu", torch.float16, rows=16, positions=8)
    assert check == dict(kernel_runs=True, equal=True, calls=0)
    monkeypatch.setattr(beam_reorder, "reorder_within_groups", beam_reorder.reorder_within_groups)  # put back after
    counting_kernel_calls(check, "beam_reorder", "reorder_within_groups")
    buffer = torch.zeros(8, 1, 4, 2)
    beam_reorder.reorder_within_groups(buffer, torch.arange(8), 4, torch.zeros(1, dtype=torch.long))
    assert check["calls"] == 1
    assert levers.reorder_cell(check) == "; reorder kernel: equal to torch's reorder, 1 calls"


def test_decode_check_compares_the_kernel_with_torchs_attention(script, monkeypatch):
    """--decode-attention-kernel's check in the benchmark: where the kernel cannot run (a CPU without
    Triton's interpreter) not run, and the cell says so; run by the interpreter (where Triton is
    installed), its output within float rounding of torch's attention at three steps, its calls
    counted, and the cell says so."""
    import pytest
    import torch

    script("benchmark")
    levers = script("gpu_levers")
    from attn_only_plugin.modules import decode_attention
    from benchmark_parts.generation import counting_kernel_calls, decode_check

    shape = dict(d_model=32, heads=4)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert decode_check(shape, "cpu", torch.float32, rows=8) == dict(
        kernel_runs=False, max_abs_difference=None, calls=0
    )
    assert levers.decode_cell(dict(kernel_runs=False)) == "; decode kernel: cannot run here (torch's)"
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    check = decode_check(shape, "cpu", torch.float32, rows=8, positions=64)
    assert check["kernel_runs"] and check["max_abs_difference"] < 1e-5 and check["calls"] == 0
    monkeypatch.setattr(decode_attention, "attend", decode_attention.attend)  # put back after
    counting_kernel_calls(check, "decode_attention", "attend")
    q, k = torch.zeros(2, 1, 1, 4), torch.zeros(2, 1, 64, 4)
    decode_attention.attend(q, k, k, torch.zeros(1, 1, 1, 64))
    assert check["calls"] == 1
    assert levers.decode_cell(dict(check, max_abs_difference=2e-7)) == (
        "; decode kernel: 2.0e-07 from torch's attention, 1 calls"
    )


def test_compile_report_says_what_torch_compile_made(script, dynamo_counters):
    """The compiled levers' line: graphs, graph breaks by reason, frames sent back to eager by the
    recompile limit, counted by torch.compile itself (here a function that breaks once: two graphs)."""
    import torch

    script("benchmark")
    from benchmark_parts.report import table
    from benchmark_parts.training import compile_report

    def breaks_once(x):
        x = x + 1
        torch._dynamo.graph_break()
        return x * 2

    torch.compile(breaks_once, backend="eager")(torch.ones(3))
    made = compile_report()
    assert made["graphs"] == 2 and made["graph_breaks"] == 1
    assert made["recompile_limit_hits"] == made["frames_left_eager"] == 0
    (reason,) = made["graph_break_reasons"]
    ours = dict(tokens_per_s=2.0, peak_mib=1.0, flops_per_s=1e9, step_ms=1.0, optimizer_ms=0.1, mfu=None)
    ours.update(pad_share=dict(src=0.0, tgt=0.0), optimizer="paper_adam", torch_compile=made)
    theirs = dict(ours, optimizer="adam")
    r = dict(preset="tiny", shape={}, device="cpu", amp=False, batching="random", batch_size=4)
    text = table(dict(r, training=dict(ours=ours, fairseq=theirs), generation=None))
    assert f"ours: 2 graphs, 1 graph breaks (1 x {reason}), 0 recompile limits hit, 0 frames left eager" in text
    scale = torch.compile(lambda x, k: x * k, backend="eager")
    with torch._dynamo.config.patch(recompile_limit=1, automatic_dynamic_shapes=False):
        for k in (2, 3, 4):  # a constant each: the second is past the limit, and the frame runs eagerly since
            scale(torch.ones(3), k)
    made = compile_report()
    assert made["recompile_limit_hits"] == made["frames_left_eager"] == 1


def test_varlen_check_leaves_the_compiled_layers_whole(script, monkeypatch, dynamo_counters):
    """With --compile-layers the check runs the eager layers, so the timed steps after it run
    compiled: no recompile limit hit, no frame left eager (its counting of the calls, run
    compiled, made torch.compile recompile at every call of a 6-layer stack), the check's counts
    and the compiled layers as before."""
    script("benchmark")
    from attn_only_plugin.modules import compiled, varlen
    from benchmark_parts.common import build_pair, make_batches
    from benchmark_parts.training import compile_report, smoothed_loss, varlen_check
    from helpers import traceable_varlen

    monkeypatch.setattr(varlen, "kernel_runs", lambda x: True)
    monkeypatch.setattr(varlen, "KERNEL", traceable_varlen)
    monkeypatch.setattr(compiled, "BACKEND", "eager")
    shape = dict(d_model=32, d_ff=64, heads=4, layers=6, vocab=50, levers={"varlen": True, "compile": "eager"})
    _, ours, d = build_pair(shape)
    ours.train()
    tables = [ours.encoder.compiled, ours.decoder.compiled]
    batches = make_batches(d, 4, 8)
    assert varlen_check(ours, batches[0], "cpu", False, d.pad(), None)["packed_attention_calls"] == 3 * 6
    assert dynamo_counters["stats"]["unique_graphs"] == 0  # nothing compiled by the check
    assert [ours.encoder.compiled, ours.decoder.compiled] == tables and len(tables[0]) == 6
    for b in batches:
        smoothed_loss(ours, b, "cpu", False, d.pad(), None).backward()
    made = compile_report()
    assert made["graphs"] > 0 and made["graph_breaks"] == made["recompile_limit_hits"] == made["frames_left_eager"] == 0


def test_a_graphed_search_says_the_graphs_it_captured_per_repeat(script, monkeypatch):
    """The benchmark's generation counts the CUDA graphs our graphed search captures in each
    repeat (through the stand-in for torch.cuda of tests/tasks/test_decoder_step.py): the first
    repeat captures its chunks' graphs, the second, on the same batch, replays them; the built-in
    captures none. gpu_levers.py's table says them."""
    script("benchmark")
    from benchmark_parts.generation import generation
    from helpers import fake_cuda

    fake_cuda(monkeypatch)
    levers = dict(static_cache=True, batched_search=True, graph_search=True)
    shape = dict(d_model=32, d_ff=64, heads=4, layers=2, vocab=50, levers=levers)
    result = generation(shape, "cpu", 4, 4, "sorted", repeats=2, ct2=False)
    first, second = result["graphs_captured_per_repeat"]
    assert first > 0 and second == 0 and result["identical_sentences"] == result["sentences"] == 4
    row = dict(status="ok", result=dict(training=None, generation=result))
    assert script("gpu_levers").cells(row)[-1] == f"4 of 4; graphs captured per repeat: {first}, 0"
    result["graphs_captured_per_repeat"] = [0, 0]  # a search without graphs
    assert script("gpu_levers").cells(row)[-1] == "4 of 4"
