"""Table 3 of Vaswani et al. (2017) at a CPU's scale: the rows of `SMALL=1 bash examples/table3.sh`
gathered into the table of docs/table3.md and its figure.

    attn-only-table3-report work/table3_small --out table3.md --figure table3.png
    attn-only-table3-report --params     # parameter counts: Table 3's, the formula's, SMALL=1's
    attn-only-table3-report --rates WORK_0.25 WORK_0.5 ...   # each row's learning rate chosen on valid

Reads WORK/ROW/seedS/result.json (one per finished row and seed) and the paper's numbers from
`examples/table3.sh --list`. Per row: dev perplexity (per subword) and BLEU as mean and spread over
seeds (sample standard deviation), the difference of the means from base beside the paper's
difference, whether the direction agrees, and the mean minutes a run took (result.json's seconds:
the last invocation's, so a resumed run counts its resumed part only).

Agreement is judged against the seed spread: a row whose seed range overlaps base's is "inside the
spread", no measurable change, and agrees only with a paper row that moved by at most TOLERANCE
(0.1 PPL or BLEU, the paper's last printed digit); a row outside the spread agrees when it moved the
paper's way and the paper's row moved by more than that. A row or base with fewer than 2 seeds is
not judged. The figure plots, per row, the paper's PPL and BLEU differences against ours (point:
the mean; bar: the seed range of the row minus base's mean; shaded: base's own seed range).
"""

import json
import math
import re
import statistics
import subprocess
import sys
from pathlib import Path

from attn_only_tools.guards import atomic
from attn_only_tools.guards.errors import PluginError

from . import command_parser

ROOT = Path(__file__).resolve().parents[2]  # the checkout (installed editable): examples/table3.sh lists the rows
TOLERANCE = 0.1  # the paper prints PPL and BLEU to 0.1 (BLEU) or 0.01 (PPL): 0.1 is "no change"
PAPER_PARAMS = {"base": 65, "B1": 58, "B2": 60, "C1": 36, "C2": 50, "C3": 80, "C4": 28, "C5": 168, "C6": 53, "C7": 90}
FIELDS = {  # table3.sh flag -> shape field
    "--encoder-layers": "N",
    "--d-model": "d_model",
    "--d-ff": "d_ff",
    "--heads": "h",
    "--d-k": "d_k",
    "--d-v": "d_v",
}


def paper_rows(small: bool):
    """{row: (paper PPL, paper BLEU, flags)} in the table's order, from `table3.sh --list`."""
    env = {"SMALL": "1" if small else "0", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        ["bash", str(ROOT / "examples" / "table3.sh"), "--list"], capture_output=True, text=True, env=env, check=True
    ).stdout
    rows = {}
    for line in out.splitlines():  # base  PPL 4.92 BLEU 25.8  flags: --d-model 128 ...
        m = re.match(r"(\S+)\s+PPL (\S+) BLEU (\S+)\s+flags: (.*)$", line)
        rows[m.group(1)] = (float(m.group(2)), float(m.group(3)), "" if m.group(4) == "(none)" else m.group(4))
    return rows


def shape(flags: str, base=(6, 512, 2048, 8)):
    """{N, d_model, d_ff, h, d_k, d_v} of transformer_base (N, d_model, d_ff, h = base) with FLAGS."""
    s = dict(zip(("N", "d_model", "d_ff", "h"), base, strict=True))
    words = flags.split()
    for flag, value in zip(words, words[1:], strict=False):
        if flag in FIELDS:
            s[FIELDS[flag]] = int(value)
    s.setdefault("d_k", s["d_model"] // s["h"])  # d_k = d_v = d_model / h unless given
    s.setdefault("d_v", s["d_model"] // s["h"])
    return s


def parameters(s, vocab: int) -> int:
    """Parameters of the paper's model of shape S with one shared embedding of VOCAB types (section
    3.4): per attention W^Q, W^K, W^V (h d_k, h d_k, h d_v columns) and W^O with their biases, the
    feed-forward W_1, W_2 with biases (Eq. 2), a LayerNorm (gain and bias) after every sub-layer.
    Sinusoids have none; learned positions (row E) are not counted here."""
    d, h = s["d_model"], s["h"]
    attention = d * h * (2 * s["d_k"] + s["d_v"]) + h * (2 * s["d_k"] + s["d_v"]) + h * s["d_v"] * d + d
    ffn = 2 * d * s["d_ff"] + s["d_ff"] + d
    norm = 2 * d
    encoder = attention + ffn + 2 * norm
    decoder = 2 * attention + ffn + 3 * norm
    return s["N"] * (encoder + decoder) + vocab * d


def read_results(work: Path, need_base: bool = True):
    """{row: [result dict, ...]} from WORK/ROW/seed*/result.json, seeds in order."""
    results = {}
    for path in sorted(work.glob("*/seed*/result.json")):
        try:
            r = json.loads(path.read_text())
            row = r["row"]
        except (ValueError, KeyError) as e:
            raise PluginError(f"{path} is no result.json of table3.sh ({e}): remove it or rerun that row") from None
        if row != path.parent.parent.name:
            raise PluginError(f"{path} holds row {row}'s result, not {path.parent.parent.name}'s: move it back")
        results.setdefault(row, []).append(r)
    if need_base and "base" not in results:
        raise PluginError(f"no base row in {work} (WORK/base/seed*/result.json): run SMALL=1 table3.sh base first")
    return results


def summary(values):
    """(mean, sample standard deviation or nan with one value, min, max)."""
    spread = statistics.stdev(values) if len(values) > 1 else math.nan
    return statistics.fmean(values), spread, min(values), max(values)


def agreement(ours, base, paper_delta: float, lower_is_better: bool) -> str:
    """'yes', 'no' or 'not judged' for one metric: OURS and BASE are the seed values."""
    if len(ours) < 2 or len(base) < 2:
        return "not judged (1 seed)"
    inside = max(ours) >= min(base) and min(ours) <= max(base)  # the seed ranges overlap
    paper_still = abs(paper_delta) <= TOLERANCE + 1e-9
    if inside:
        return "yes (both ~0)" if paper_still else "no (ours inside the spread)"
    if paper_still:
        return "no (paper ~0)"
    delta = statistics.fmean(ours) - statistics.fmean(base)
    return "yes" if (delta > 0) == (paper_delta > 0) else "no (opposite)"


def table(results, paper):
    """The markdown table of docs/table3.md, one line per row present in RESULTS."""
    base = {m: [r[m] for r in results["base"]] for m in ("ppl", "bleu")}
    lines = [
        "| row | seeds | PPL (dev) | BLEU (dev) | ΔPPL ours | ΔPPL paper | PPL agrees"
        " | ΔBLEU ours | ΔBLEU paper | BLEU agrees | minutes a run |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row, (p_ppl, p_bleu, _) in paper.items():
        if row not in results:
            continue
        cells, ours = [row, str(len(results[row]))], {m: [r[m] for r in results[row]] for m in ("ppl", "bleu")}
        for m in ("ppl", "bleu"):
            mean, spread, _, _ = summary(ours[m])
            cells.append(f"{mean:.2f}" + ("" if math.isnan(spread) else f" ± {spread:.2f}"))
        for m, p_row, p_base in (("ppl", p_ppl, paper["base"][0]), ("bleu", p_bleu, paper["base"][1])):
            if row == "base":
                cells += ["", "", ""]
                continue
            delta = statistics.fmean(ours[m]) - statistics.fmean(base[m])
            cells += [
                f"{delta:+.2f}",
                f"{p_row - p_base:+.2f}",
                agreement(ours[m], base[m], p_row - p_base, m == "ppl"),
            ]
        seconds = [r["seconds"] for r in results[row] if "seconds" in r]  # the last invocation's, resumed or not
        cells.append(f"{statistics.fmean(seconds) / 60:.1f}" if seconds else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def multiplier(result) -> float:
    """The noam schedule's --lr-multiplier a row was trained with, from its result.json's flags."""
    m = re.search(r"--lr-multiplier (\S+)", result.get("flags", ""))
    if m is None:
        raise PluginError(f"row {result['row']} seed {result['seed']}: its result.json names no --lr-multiplier")
    return float(m.group(1))


def read_rates(works):
    """{(row, multiplier): [result, ...]} from several WORK folders, one run length among them all."""
    by_rate = {}
    for work in works:
        for row, results in read_results(work, need_base=False).items():
            for r in results:
                m = multiplier(r)
                runs = by_rate.setdefault((row, m), [])
                if any(other["seed"] == r["seed"] for other in runs):
                    raise PluginError(
                        f"row {row} seed {r['seed']} at multiplier {m:g} is in two WORK folders: give one"
                    )
                runs.append(r)
    if len({r["updates"] for results in by_rate.values() for r in results}) > 1:
        raise PluginError("the WORK folders hold runs of different lengths (UPDATES): compare rates at one length")
    return by_rate


def rates_table(works, paper) -> str:
    """Each row's dev perplexity at every learning-rate multiplier found in WORKS (one WORK per
    multiplier, as table3.sh refuses to mix them), the multiplier with the lowest dev perplexity
    chosen (on the seeds that every rate of the row has), and the rows' differences from base when
    each is trained at its own chosen rate. Rows tried at one rate only are left out; base is not."""
    by_rate = read_rates(works)
    rates = sorted({m for _, m in by_rate})
    tried = {row: sum(key[0] == row for key in by_rate) for row in paper}
    lines = [
        "| row | N | " + " | ".join(f"× {m:g}" for m in rates) + " | chosen | BLEU there | ΔPPL ours | ΔPPL paper |"
    ]
    lines.append("|---|---|" + "---|" * len(rates) + "---|---|---|---|")
    base_ppl = None  # base's mean at its chosen rate: what every other row is compared with
    for row in (r for r in paper if tried[r] > 1 or r == "base" and tried[r]):
        ppl = {m: statistics.fmean(r["ppl"] for r in by_rate[row, m]) for m in rates if (row, m) in by_rate}
        shared = set.intersection(*({r["seed"] for r in by_rate[row, m]} for m in ppl))  # choose on like seeds
        on = {m: statistics.fmean(r["ppl"] for r in by_rate[row, m] if r["seed"] in shared or not shared) for m in ppl}
        best = min(on, key=on.get)
        cells = [row, str(shape(paper[row][2])["N"])]
        for m in rates:
            n = len(by_rate.get((row, m), ()))
            text = f"{ppl[m]:.2f}" + (f" ({n} seeds)" if n > 1 else "") if m in ppl else ""
            cells.append(f"**{text}**" if m == best else text)
        bleu = statistics.fmean(r["bleu"] for r in by_rate[row, best])
        cells += [f"{best:g}", f"{bleu:.2f}"]
        if row == "base":
            base_ppl = ppl[best]
        if row == "base" or base_ppl is None:
            cells += ["", ""]
        else:
            cells += [f"{ppl[best] - base_ppl:+.2f}", f"{paper[row][0] - paper['base'][0]:+.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def params_table(vocab: int = 4000) -> str:
    """Table 3's "params x10^6" beside the formula's count at the paper's scale (37,000 shared types)
    and at SMALL=1's (VOCAB types), each also as a ratio to its base: what the scaling keeps."""
    paper, small = paper_rows(small=False), paper_rows(small=True)
    full = {r: parameters(shape(paper[r][2]), 37000) for r in paper}
    little = {r: parameters(shape(small[r][2]), vocab) for r in small}
    lines = [
        "| row | paper params x10^6 | formula, paper scale x10^6 | / base | SMALL=1 x10^6 | / base |",
        "|---|---|---|---|---|---|",
    ]
    for r in paper:
        shown = PAPER_PARAMS.get(r, "")
        cells = [r, str(shown), f"{full[r] / 1e6:.1f}", f"{full[r] / full['base']:.2f}"]
        cells += [f"{little[r] / 1e6:.3f}", f"{little[r] / little['base']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def figure(results, paper, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 5), dpi=100)
    for ax, (m, i, label) in zip(axes, (("ppl", 0, "dev perplexity"), ("bleu", 1, "dev BLEU")), strict=True):
        base_values = [r[m] for r in results["base"]]
        base_mean = statistics.fmean(base_values)
        spread = (min(base_values) - base_mean, max(base_values) - base_mean)
        ax.axhspan(*spread, color="C1", alpha=0.15, label="ours: base's seed range")
        ax.axhline(0, color="grey", lw=0.5)
        ax.axvline(0, color="grey", lw=0.5)
        ax.axvspan(-TOLERANCE, TOLERANCE, color="grey", alpha=0.15, label=f"paper: |Δ| ≤ {TOLERANCE}")
        for row, values in paper.items():
            if row == "base" or row not in results:
                continue
            ours = [r[m] - base_mean for r in results[row]]
            x, y = values[i] - paper["base"][i], statistics.fmean(ours)
            ax.errorbar([x], [y], yerr=[[y - min(ours)], [max(ours) - y]], fmt="o", ms=4, capsize=3, color="C0")
            ax.annotate(row, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=8)
        ax.set_xlabel(f"paper: Δ {label} from base (Table 3)")
        ax.set_ylabel(f"ours: Δ {label} from base (mean, seed range)")
        if m == "ppl":  # a row that never learns (hundreds) beside rows a few points apart
            ax.set_yscale("symlog", linthresh=10)
            ax.set_ylabel("ours: Δ dev perplexity (mean, seed range; log past ±10)")
        ax.legend(loc="best", fontsize=8)
    fig.suptitle("Table 3 rows: the paper's differences from base against ours (SMALL=1)")
    fig.tight_layout()
    with atomic.atomic_output(out, "wb") as f:  # never a half-written PNG
        fig.savefig(f, format="png")
    plt.close(fig)


def main(argv=None) -> int:
    p = command_parser(__doc__)
    p.add_argument("work", type=Path, nargs="*", help="the WORK folder of SMALL=1 table3.sh (ROW/seedS/result.json)")
    p.add_argument("--params", action="store_true", help="print the parameter counts of every row instead")
    p.add_argument(
        "--rates",
        action="store_true",
        help="each row across WORKs of different LR_MULTIPLIER: the rate chosen on valid",
    )
    p.add_argument("--out", type=Path, help="write the markdown table here (default: stdout)")
    p.add_argument("--figure", type=Path, help="write the PNG figure here")
    p.add_argument("--force", action="store_true", help="replace an existing --out or --figure")
    a = p.parse_args(argv)
    if a.params:
        sys.stdout.write(params_table())
        return 0
    for work in a.work or [None]:
        if work is None or not work.is_dir():
            raise PluginError(f"{work} is not a folder: give the WORK folder of SMALL=1 examples/table3.sh")
    if len(a.work) > 1 and not a.rates or a.rates and a.figure is not None:
        raise PluginError("one WORK folder makes the table and figure; several are for --rates, which draws no figure")
    inputs = sorted(p for work in a.work for p in work.glob("*/seed*/result.json"))
    for out, flag in ((a.out, "--out"), (a.figure, "--figure")):
        if out is not None:
            atomic.check_output(out, inputs, a.force, flag)
    paper = paper_rows(small=True)
    if a.rates:
        text = rates_table(a.work, paper)
    else:
        results = read_results(a.work[0])
        text = table(results, paper)
    if a.out is None:
        sys.stdout.write(text)
    else:
        with atomic.atomic_output(a.out, "w", encoding="utf-8") as f:
            f.write(text)
    if a.figure is not None:
        figure(results, paper, a.figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
