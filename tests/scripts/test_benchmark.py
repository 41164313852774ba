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
    proc = cli("benchmark", "--preset", "tiny", "--generate", "4", "--batch-size", "4", "--parts", "generation",
               "--batching", "sorted")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "generation sentences/s" in proc.stdout and "training tokens/s" not in proc.stdout


def test_batches_follow_fairseq_layout(script):
    """Left-padded sources, right-padded targets, prev_output_tokens = eos + target without its
    eos; "sorted" batches have no source pads and targets of varying length, like fairseq's."""
    from helpers import make_dictionary
    bench, d = script("benchmark"), make_dictionary(50)
    for batching in ("random", "sorted"):
        for b in bench.make_batches(d, 3, 8, batching=batching):
            src, prev, tgt = b["src"], b["prev"], b["tgt"]
            assert src[:, -1].eq(d.eos()).all() and b["lengths"].equal(src.ne(d.pad()).sum(1))
            assert prev[:, 0].eq(d.eos()).all() and prev[:, 1:][tgt[:, 1:].ne(d.pad())].equal(tgt[:, :-1][tgt[:, 1:].ne(d.pad())])
            assert prev.eq(d.pad()).equal(tgt.eq(d.pad())) and (tgt.eq(d.eos()).sum(1) == 1).all()
    sorted_pads = bench.pad_share(bench.make_batches(d, 4, 16, batching="sorted"), d.pad())
    random_pads = bench.pad_share(bench.make_batches(d, 4, 16, batching="random"), d.pad())
    assert sorted_pads["src"] == 0 and 0.05 < sorted_pads["tgt"] < 0.3 and random_pads["src"] > 0.15
