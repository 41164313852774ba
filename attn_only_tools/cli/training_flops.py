"""Training cost in floating-point operations, Table 2 of Vaswani et al. (2017), two ways.

    attn-only-training-flops --model base          # Table 2: 3.3e18 (and the analytic count)
    attn-only-training-flops --model big           # Table 2: 2.3e19
    attn-only-training-flops --hours 10 --gpus 4 --gpu H100 --precision bf16 \\
        --layers 6 --d-model 512 --d-ff 2048 --vocab 37000 --steps 100000 --tokens-per-step 25000

(a) The paper's estimate (Table 2 footnote): "multiplying the training time, the number of GPUs
used, and an estimate of the sustained single-precision floating-point capacity of each GPU".
Its figures for K80, K40, M40 and P100 are kept. Departure: for V100, A100 and H100 (SXM) the
table holds the vendors' PEAK DENSE rates (no 2:4 sparsity), not sustained ones, so the estimate
is an upper bound on the work done:

    TFLOPS   fp32   tf32   bf16      source
    K80       2.8     -      -       paper (Table 2 footnote)
    K40       3.7     -      -       paper
    M40       6.0     -      -       paper
    P100      9.5     -      -       paper
    V100     15.7     -    125       NVIDIA V100 SXM2 data sheet (bf16 column: FP16 tensor cores;
                                     V100 has no BF16)
    A100     19.5   156    312       NVIDIA A100 SXM data sheet
    H100     67     495    989       NVIDIA H100 SXM data sheet
    H200     67     495    989       NVIDIA H200 SXM data sheet (the H100's compute, more memory)

(b) Analytic: 2 FLOPs per multiply-add, backward = 2 x forward, so training = 3 x forward:

    C = 6 (P_enc D_src + P_dec D_tgt) + 3 A
    P_enc = N (4 d^2 + 2 d d_ff)              weight matrices a source token goes through
    P_dec = N (8 d^2 + 2 d d_ff) + V d        ... a target token (self + encoder-decoder attention,
                                              feed-forward, the pre-softmax projection)
    A = 4 N d (S D_src + (T + S) D_tgt)       attention scores QK^T and weighted sum AV: 2 x 2 d
                                              FLOPs per query per key per layer, S keys for encoder
                                              self-attention and cross-attention, T for decoder
                                              self-attention (masked, but computed in full)

with N layers, d = d_model, V the (shared) vocabulary, S and T the average source and target
sentence lengths, D_src and D_tgt the source and target tokens seen in training (steps x tokens
per step). Biases, layer norms, softmax and embedding lookups (O(d) per token) are left out. With
D_src = D_tgt = D this is the familiar C = 6 P D + 3 A, P = P_enc + P_dec (~63M for base with
V = 37000, against the 65M of Table 3 that also counts biases, norms and the tied embedding
once). --params P replaces the shape-derived P (then C = 6 P D_tgt + 3 A, i.e. D_src = D_tgt);
--tokens D replaces steps x tokens per step on each side. The paper's batches (section 5.1) held
~25000 source and ~25000 target tokens.
"""

import math
import sys

from attn_only_tools.guards.errors import install_excepthook

from . import command_parser

TFLOPS = {
    "fp32": {"K80": 2.8, "K40": 3.7, "M40": 6.0, "P100": 9.5, "V100": 15.7, "A100": 19.5, "H100": 67.0, "H200": 67.0},
    "tf32": {"A100": 156.0, "H100": 495.0, "H200": 495.0},
    "bf16": {"V100": 125.0, "A100": 312.0, "H100": 989.0, "H200": 989.0},
}
PAPER_RUNS = {  # section 5.2 (8 P100): base 100k steps in 12 hours, big 300k steps in 3.5 days
    "base": dict(hours=12.0, gpus=8, gpu="P100", layers=6, d_model=512, d_ff=2048, steps=100_000),
    "big": dict(hours=3.5 * 24, gpus=8, gpu="P100", layers=6, d_model=1024, d_ff=4096, steps=300_000),
}
DEFAULTS = dict(precision="fp32", vocab=37000, tokens_per_step=25000, src_len=25.0, tgt_len=25.0)


def paper_flops(hours: float, gpus: int, gpu: str, precision: str = "fp32") -> float:
    """Table 2's estimate: hours x 3600 x GPUs x TFLOPS x 1e12."""
    table = TFLOPS[precision]
    if gpu not in table:
        raise ValueError(f"no {precision} figure for GPU {gpu!r}: choose one of {', '.join(table)}")
    return hours * 3600 * gpus * table[gpu] * 1e12


def layer_params(layers: int, d_model: int, d_ff: int, vocab: int):
    """(P_enc, P_dec): weight-matrix entries a source / target token is multiplied with."""
    d = d_model
    return layers * (4 * d * d + 2 * d * d_ff), layers * (8 * d * d + 2 * d * d_ff) + vocab * d


def attention_flops(
    layers: int, d_model: int, src_len: float, tgt_len: float, src_tokens: float, tgt_tokens: float
) -> float:
    """Forward FLOPs of QK^T and AV over training: 4 N d (S D_src + (T + S) D_tgt)."""
    return 4 * layers * d_model * (src_len * src_tokens + (tgt_len + src_len) * tgt_tokens)


def analytic_flops(p_enc: float, p_dec: float, src_tokens: float, tgt_tokens: float, attention: float) -> float:
    """Training FLOPs: 6 (P_enc D_src + P_dec D_tgt) + 3 x attention forward FLOPs."""
    return 6 * (p_enc * src_tokens + p_dec * tgt_tokens) + 3 * attention


POSITIVE = (
    "hours",
    "gpus",
    "params",
    "layers",
    "d_model",
    "d_ff",
    "vocab",
    "tokens",
    "steps",
    "tokens_per_step",
    "src_len",
    "tgt_len",
)  # every count and size: 0, negative or not finite gives a meaningless figure


def check_positive(v: dict) -> None:
    for name in POSITIVE:
        value = v.get(name)
        if value is not None and not (value > 0 and math.isfinite(value)):
            raise ValueError(f"--{name.replace('_', '-')} must be a number > 0, got {value:g}")


def estimate(v: dict) -> dict:
    """Both estimates from the settings in v (see parse_args); a setting that is not > 0 is refused."""
    check_positive(v)
    if v.get("params") is not None:
        p_enc, p_dec = 0.0, float(v["params"])  # P with D_src = D_tgt: all of it against D_tgt
    else:
        p_enc, p_dec = layer_params(v["layers"], v["d_model"], v["d_ff"], v["vocab"])
    tokens = v["tokens"] if v.get("tokens") is not None else v["steps"] * v["tokens_per_step"]
    attention = 0.0  # left out when only --params is known
    if v.get("layers") is not None and v.get("d_model") is not None:
        attention = attention_flops(v["layers"], v["d_model"], v["src_len"], v["tgt_len"], tokens, tokens)
    return dict(
        paper=paper_flops(v["hours"], v["gpus"], v["gpu"], v["precision"]),
        params=p_enc + p_dec,
        tokens=tokens,
        attention=3 * attention,
        analytic=analytic_flops(p_enc, p_dec, tokens, tokens, attention),
    )


def report(v: dict) -> str:
    e = estimate(v)
    rate = TFLOPS[v["precision"]][v["gpu"]]
    return "\n".join(
        [
            f"paper's estimate (Table 2): {v['hours']:g} h x {v['gpus']} GPUs x {rate:g} TFLOPS "
            f"({v['gpu']}, {v['precision']}) = {e['paper']:.2g} FLOPs",
            f"analytic count: 6 x {e['params']:.3g} params x {e['tokens']:.3g} tokens per side "
            f"+ attention {e['attention']:.2g}"
            + ("" if e["attention"] else " (no --layers/--d-model)")
            + f" = {e['analytic']:.2g} FLOPs",
            f"analytic / paper's estimate: {e['analytic'] / e['paper']:.0%} (the utilisation of the quoted "
            "rate that the analytic count implies)",
        ]
    )


def parse_args(argv=None) -> dict:
    p = command_parser(__doc__)
    p.add_argument("--model", choices=sorted(PAPER_RUNS), help="the paper's run (section 5.2) as defaults")
    p.add_argument("--hours", type=float, help="training time")
    p.add_argument("--gpus", type=int, help="number of GPUs")
    p.add_argument("--gpu", help=f"GPU type: {', '.join(TFLOPS['fp32'])}")
    p.add_argument("--precision", choices=sorted(TFLOPS), help="which rate column (default fp32)")
    p.add_argument("--params", type=float, help="parameters P (instead of counting them from the shape)")
    p.add_argument("--layers", type=int, help="N (encoder = decoder layers)")
    p.add_argument("--d-model", type=int)
    p.add_argument("--d-ff", type=int)
    p.add_argument("--vocab", type=int, help="shared vocabulary (default 37000, section 5.1)")
    p.add_argument("--tokens", type=float, help="training tokens per side (instead of steps x tokens per step)")
    p.add_argument("--steps", type=int)
    p.add_argument("--tokens-per-step", type=int, help="per side (default 25000, section 5.1)")
    p.add_argument("--src-len", type=float, help="average source length for the attention term (default 25)")
    p.add_argument("--tgt-len", type=float, help="average target length (default 25)")
    a = vars(p.parse_args(argv))
    values = {**DEFAULTS, **PAPER_RUNS.get(a.pop("model"), {})}
    values.update({k: v for k, v in a.items() if v is not None})
    needed = ["hours", "gpus", "gpu"] + ([] if "params" in values else ["layers", "d_model", "d_ff"])
    needed += [] if "tokens" in values else ["steps"]
    missing = [k for k in needed if k not in values]
    if missing:
        p.error(f"missing --{missing[0].replace('_', '-')} (or give --model base|big)")
    return values


def main(argv=None) -> int:
    install_excepthook()  # an error that ends the command is one `error:` line
    try:
        print(report(parse_args(argv)))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
