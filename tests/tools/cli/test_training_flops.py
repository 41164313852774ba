"""attn-only-training-flops: Table 2 of Vaswani et al. (2017), the paper's estimate and the analytic count."""

import re

import pytest


def test_table2_paper_estimates(script):
    m = script("training_flops")
    assert m.paper_flops(12, 8, "P100") == pytest.approx(12 * 3600 * 8 * 9.5e12)
    assert f"{m.paper_flops(12, 8, 'P100'):.1e}" == "3.3e+18"  # base, Table 2
    assert f"{m.paper_flops(3.5 * 24, 8, 'P100'):.1e}" == "2.3e+19"  # big, Table 2
    assert f"{m.paper_flops(1, 1, 'K80'):.3g}" == f"{3600 * 2.8e12:.3g}"
    with pytest.raises(ValueError, match="no bf16 figure for GPU 'P100'"):
        m.paper_flops(1, 1, "P100", "bf16")


def test_analytic_by_hand(script):
    m = script("training_flops")
    # N=1, d=2, d_ff=4, V=10; 3 steps of 5 tokens per side; S = 2, T = 3
    p_enc = 4 * 2 * 2 + 2 * 2 * 4  # Q, K, V, O projections + two feed-forward matrices = 32
    p_dec = 8 * 2 * 2 + 2 * 2 * 4 + 10 * 2  # two attention blocks, feed-forward, pre-softmax = 68
    assert m.layer_params(1, 2, 4, 10) == (p_enc, p_dec)
    d_src = d_tgt = 3 * 5
    attn = 2 * 2 * 2 * (2 * d_src + (3 + 2) * d_tgt)  # 2 FLOPs x (QK^T + AV) x d x keys, per query
    assert m.attention_flops(1, 2, 2, 3, d_src, d_tgt) == attn == 840
    expected = 6 * (32 * 15 + 68 * 15) + 3 * 840  # 9000 + 2520
    est = m.estimate(
        dict(
            hours=1,
            gpus=1,
            gpu="P100",
            precision="fp32",
            layers=1,
            d_model=2,
            d_ff=4,
            vocab=10,
            steps=3,
            tokens_per_step=5,
            src_len=2,
            tgt_len=3,
        )
    )
    assert est["analytic"] == expected == 11520 and est["params"] == 100


def test_base_analytic_matches_paper_parameter_count(script):
    m = script("training_flops")
    p_enc, p_dec = m.layer_params(6, 512, 2048, 37000)
    assert 60e6 < p_enc + p_dec < 65e6  # Table 3: 65M, which adds biases, norms, positions
    est = m.estimate({**m.DEFAULTS, **m.PAPER_RUNS["base"]})
    assert est["analytic"] == pytest.approx(6 * (p_enc + p_dec) * 2.5e9 + est["attention"])
    assert est["analytic"] < est["paper"]  # peak-rate estimate is an upper bound


def test_cli_prints_both(cli):
    base = cli("training_flops", "--model", "base")
    assert base.returncode == 0, base.stderr
    assert "= 3.3e+18 FLOPs" in base.stdout and "analytic count" in base.stdout
    big = cli("training_flops", "--model", "big")
    assert "= 2.3e+19 FLOPs" in big.stdout
    own = cli(
        "training_flops",
        "--hours",
        2,
        "--gpus",
        4,
        "--gpu",
        "H100",
        "--precision",
        "bf16",
        "--params",
        1e8,
        "--tokens",
        1e9,
    )
    assert own.returncode == 0, own.stderr
    assert f"= {2 * 3600 * 4 * 989e12:.2g} FLOPs" in own.stdout and f"= {6e17:.2g} FLOPs" in own.stdout
    bad = cli("training_flops", "--hours", 1, "--gpus", 1, "--gpu", "K80", "--precision", "tf32", "--model", "base")
    assert bad.returncode == 1 and bad.stderr.strip().startswith("error: no tf32 figure")


def test_counts_not_above_zero_are_refused(cli, script):
    """--hours -3 used to print negative FLOPs; every count and size must be a number > 0."""
    bad = cli("training_flops", "--model", "base", "--hours", -3)
    assert bad.returncode == 1 and bad.stderr.strip().splitlines() == ["error: --hours must be a number > 0, got -3"]
    assert not bad.stdout
    m = script("training_flops")
    for name, value in [
        ("gpus", 0),
        ("d_model", -512),
        ("steps", 0),
        ("tokens", float("nan")),
        ("tgt_len", float("inf")),
        ("params", -1e8),
    ]:
        with pytest.raises(
            ValueError,
            match=f"^{re.escape(f'--{name}'.replace('_', '-'))} must be a number > 0, got {re.escape(f'{value:g}')}$",
        ):
            m.estimate({**m.DEFAULTS, **m.PAPER_RUNS["base"], name: value})
