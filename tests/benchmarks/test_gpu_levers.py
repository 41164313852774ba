"""benchmarks/gpu_levers.py, the prepared GPU measurement of every speed lever, in its CPU smoke mode
(--device cpu --preset tiny): every row runs end to end through benchmarks/benchmark.py with its lever
on, and one results file holds them all. (Speeds themselves are never asserted.)"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


# every lever once; the graphed search in its profiled row, which is gen_cuda_graph with --profile
SMOKE_ROWS = [
    "train_bucket_compile_fresh",
    "profile_gen_cuda_graph",
    "train_bf16_seen",
    "train_varlen_fresh",
    "gen_cuda_graph_search_reorder",
    "gen_cuda_graph_search_decode",
    "train_fused_loss_seen",
]


def test_smoke_mode_runs_a_row_of_every_lever(script, tmp_path):
    """Six rows that between them turn on every lever (compile, buckets, the fixed decoding cache,
    the batched search, its graphed decoder step and its whole step graphed, eager on a CPU, the beam
    reorder and decode attention kernels, torch's ops on a CPU, bf16,
    attention on packed rows, the padded path on a CPU, with its check, the loss from the logits)
    and --profile, each through its
    benchmark and measuring processes: minutes, more on busy cores. The other rows differ only in
    their flags, which the --help and flag tests of benchmark.py cover."""
    out = tmp_path / "levers.json"
    cmd = [sys.executable, str(BENCHMARKS / "gpu_levers.py"), "--device", "cpu", "--preset", "tiny", "--out", str(out)]
    proc = subprocess.run(
        [*cmd, "--rows", *SMOKE_ROWS],
        capture_output=True,
        text=True,
        env={k: v for k, v in dict(os.environ, PYTHONWARNINGS="ignore").items() if k != "TRITON_INTERPRET"},
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(out.read_text())
    rows = script("gpu_levers").ROWS
    assert sorted(r["rows"]) == sorted(SMOKE_ROWS) and all(row["status"] == "ok" for row in r["rows"].values())
    levers = {name: row["result"]["shape"].get("levers", {}) for name, row in r["rows"].items()}
    assert levers["train_bucket_compile_fresh"] == {"compile": "aot_eager", "pad_to": 8}
    assert levers["profile_gen_cuda_graph"] == {"static_cache": True, "batched_search": True, "cuda_graph": True}
    assert levers["train_bf16_seen"] == {"half": "bfloat16"}
    assert levers["train_varlen_fresh"] == {"varlen": True}
    both = {"static_cache": True, "batched_search": True, "graph_search": True, "reorder_kernel": True}
    assert levers["gen_cuda_graph_search_reorder"] == both
    assert levers["train_fused_loss_seen"] == {"fused_loss": True}
    check = r["rows"]["train_varlen_fresh"]["result"]["training"]["ours"]["varlen_check"]
    assert check["packed_attention_calls"] == 0 and check["loss_relative_difference"] == 0.0  # a CPU: padded
    assert "varlen check: loss 0.0e+00 apart" in r["table"]
    # what torch.compile made of ours's layers: whole layers, none sent back to eager
    made = r["rows"]["train_bucket_compile_fresh"]["result"]["training"]["ours"]["torch_compile"]
    assert made["graphs"] > 0 and made["graph_breaks"] == made["recompile_limit_hits"] == made["frames_left_eager"] == 0
    assert (
        f"compile: {made['graphs']} graphs, 0 graph breaks, 0 recompile limits hit, 0 frames left eager" in r["table"]
    )
    for name, row in r["rows"].items():
        result = row["result"]
        if name.startswith("train"):
            assert result["training"]["ours"]["peak_mib"] > 0 and not result["generation"]
            assert result["batching"] == ("fresh" if name.endswith("fresh") else "random")
        else:
            assert result["generation"]["identical_sentences"] == result["generation"]["sentences"] == 4
        assert f"| {name} | {rows[name][0]} |" in r["table"] and f"| {name} |" in proc.stdout
    assert r["rows"]["gen_cuda_graph_search_reorder"]["result"]["generation"]["reorder_kernel_check"]["calls"] == 0
    assert "4 of 4; reorder kernel: cannot run here (torch's ops)" in r["table"]  # a CPU, no interpreter
    decode = {"static_cache": True, "batched_search": True, "graph_search": True, "decode_kernel": True}
    assert levers["gen_cuda_graph_search_decode"] == decode
    assert "4 of 4; decode kernel: cannot run here (torch's)" in r["table"]
    # the profiled row's second table: one line per model, its categories summing to the device time,
    # then the host's own time and the names that took most of it
    lines = [line.split(" | ") for line in r["table"].splitlines()]
    profiled = [cells for cells in lines if cells[0] == "| profile_gen_cuda_graph" and cells[2] == "cpu"]
    assert [cells[1:3] for cells in profiled] == [["ours", "cpu"], ["fairseq", "cpu"]]
    for line in profiled:
        cells = [float(c.strip(" |%")) for c in line[3:-1]]  # wall, device, busy, kernels, categories, host
        kinds, host = cells[4:-1], cells[-1]
        assert abs(sum(kinds) - cells[1]) < 0.1 * len(kinds) and cells[1] > 0
        assert abs(host - cells[1]) < 0.1 * len(kinds)  # on a CPU the ops' own time is the host's
        assert line[-1].startswith("aten::") and line[-1].count(", ") == 2
    assert [cells[0] for cells in lines if len(cells) > 2 and cells[2] == "cpu"] == ["| profile_gen_cuda_graph"] * 2


def test_out_of_budget_rows_are_skipped_and_said(cli, tmp_path):
    out = tmp_path / "levers.json"
    proc = cli("gpu_levers", "--device", "cpu", "--preset", "tiny", "--budget-s", "1", "--out", out)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1].startswith("error: 24 of 24 rows did not")
    r = json.loads(out.read_text())
    assert all(row["status"].startswith("skipped: ") for row in r["rows"].values())
    again = cli("gpu_levers", "--device", "cpu", "--preset", "tiny", "--budget-s", "1", "--out", out)
    assert again.returncode == 1 and "already exists: pass --force" in again.stderr


def test_a_row_past_its_limit_is_stopped_and_said(script, tmp_path, monkeypatch):
    levers = script("gpu_levers")
    monkeypatch.setitem(levers.SETTINGS["cpu"]["limit"], "generation", 1)
    start = time.perf_counter()
    row = levers.run_row("gen_eager", "tiny", "cpu", tmp_path, seconds_left=100)
    assert row["status"] == "timed out after 1 s" and time.perf_counter() - start < 30


def test_profile_rows_come_last_with_the_time_their_profile_needs(script):
    """The profile rows run after the measured ones (a run out of budget skips them first) and get
    the seconds of their kind plus the profile's."""
    levers = script("gpu_levers")
    assert list(levers.ROWS)[-3:] == ["profile_train", "profile_gen_cuda_graph", "profile_gen_cuda_graph_search"]
    cuda = levers.SETTINGS["cuda"]["limit"]
    assert levers.limit("profile_train", "cuda") == cuda["training"] + cuda["profile"]
    assert levers.limit("profile_gen_cuda_graph", "cuda") == cuda["generation"] + cuda["profile"]
    assert levers.limit("train_eager_seen", "cuda") == cuda["training"]
    assert (
        levers.limit("train_fused_loss_seen", "cuda") == cuda["compile"] == levers.limit("train_compile_seen", "cuda")
    )
    command = levers.command("profile_train", "big", "cuda", "out.json")
    assert command[-5:] == ["--repeats", "1", "--profile", "--out", "out.json"]


def test_the_bundle_goes_on_the_path_only_where_fairseq_is_missing(tmp_path, monkeypatch):
    """.gpu_bundle/site is built for the GPU machine's Python: on a machine with its own fairseq
    (this one) the measuring processes of gpu_levers.py and cli_train.py keep that; without one
    they get the bundle's."""
    import benchmark_parts.processes as processes

    (tmp_path / ".gpu_bundle" / "site").mkdir(parents=True)
    monkeypatch.setattr(processes, "REPO", tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert "PYTHONPATH" not in processes.bundle_environment()
    monkeypatch.setattr(processes.importlib.util, "find_spec", lambda name: None)
    bundle = tmp_path / ".gpu_bundle" / "site"
    assert processes.bundle_environment()["PYTHONPATH"] == os.pathsep.join([str(bundle), str(tmp_path)])
