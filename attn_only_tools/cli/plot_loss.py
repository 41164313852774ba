"""Plot training and validation loss from a fairseq-train log (--log-format json or simple): the
`train_inner` lines (training loss per --log-interval updates) and the `valid` lines (validation
loss after each epoch / --validate-interval-updates), both in bits per token as fairseq logs them,
drawn into one PNG.

    attn-only-plot-loss work/quickstart/train.log work/quickstart/loss.png

An output that is the log itself (however its path is written) is refused; an existing one is
replaced only with --force.
"""

import json
import re
import sys
from pathlib import Path

from attn_only_tools.guards import atomic
from attn_only_tools.guards.errors import install_excepthook

_SIMPLE = re.compile(r"\| (train_inner|valid) \|.*")


def _fields(line: str):
    """(kind, {"loss":..., "num_updates":...}) from one log line, or None."""
    m = _SIMPLE.search(line)
    if not m:
        return None
    kind, rest = m.group(1), m.group(0)
    if "{" in rest:  # json format: | train_inner | {"epoch": 1, ...}
        values = json.loads(rest[rest.index("{") :])
        return kind, {k.replace(f"{kind}_", "").replace("valid_", ""): v for k, v in values.items()}
    values = dict(re.findall(r"(\w+)[= ]([-\d.e+]+)(?=[,| ]|$)", rest))
    return kind, values


def read_log(path: Path):
    """Returns {"train_inner": [(update, loss)], "valid": [(update, loss)]}."""
    series = {"train_inner": [], "valid": []}
    for line in Path(path).read_text(errors="replace").splitlines():
        parsed = _fields(line)
        if parsed and "loss" in parsed[1] and "num_updates" in parsed[1]:
            kind, v = parsed
            series[kind].append((int(float(v["num_updates"])), float(v["loss"])))
    return series


def plot(series, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for kind, label in (("train_inner", "training"), ("valid", "validation")):
        if series[kind]:
            x, y = zip(*series[kind], strict=True)
            ax.plot(x, y, marker="o" if kind == "valid" else None, label=f"{label} loss")
    ax.set_xlabel("update")
    ax.set_ylabel("label-smoothed loss (bits/token)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    tmp = out.with_name(out.name + ".tmp.png")
    fig.savefig(tmp)
    tmp.replace(out)


def main(argv=None) -> None:
    install_excepthook()  # an error that ends the command is one `error:` line
    argv = sys.argv[1:] if argv is None else argv
    if argv in (["-h"], ["--help"]):
        description, example = __doc__.split("\n\n")[:2]
        print(f"usage: attn-only-plot-loss TRAIN_LOG OUT.png [--force]\n\n{description}\n\nexample:\n{example}")
        return
    force = "--force" in argv
    argv = [arg for arg in argv if arg != "--force"]
    if len(argv) != 2:
        sys.exit("usage: attn-only-plot-loss TRAIN_LOG OUT.png [--force]")
    # the shared rule for outputs, without importing the package (and with it fairseq)
    atomic.check_output(argv[1], [argv[0]], force, "OUT.png")
    series = read_log(Path(argv[0]))
    if not series["train_inner"] and not series["valid"]:
        print(f"error: no training or validation loss lines in {argv[0]}: is it a fairseq-train log?", file=sys.stderr)
        sys.exit(1)
    plot(series, Path(argv[1]))
    print(f"[plot] wrote {argv[1]}", file=sys.stderr)


if __name__ == "__main__":
    main()
