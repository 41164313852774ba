"""scripts/benchmark.py on the tiny preset: it runs, both models decode the same hypotheses, and
the table and JSON carry every measure. (Speeds themselves are never asserted.)"""
import json


def test_tiny_benchmark_runs_and_hypotheses_match(cli, tmp_path):
    out = tmp_path / "bench.json"
    proc = cli("benchmark", "--preset", "tiny", "--updates", "1", "--warmup", "0", "--repeats", "1",
               "--batch-size", "4", "--generate", "4", "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "identical beam-4 hypotheses: True" in proc.stdout
    r = json.loads(out.read_text())
    assert r["generation"]["identical_hypotheses"] is True
    for which in ("ours", "fairseq"):
        assert r["training"][which]["tokens_per_s"] > 0 and r["training"][which]["peak_mib"] > 0
        assert r["generation"][which]["sentences_per_s"] > 0


def test_generation_only(cli):
    proc = cli("benchmark", "--preset", "tiny", "--generate", "4", "--batch-size", "4", "--parts", "generation")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "generation sentences/s" in proc.stdout and "training tokens/s" not in proc.stdout
