"""Compare two beam searches on the same split from their fairseq-generate logs (e.g. one decoded
with --beam-stop fairseq, one with --beam-stop paper, the same checkpoint and length penalty): how
many best hypotheses differ, each log's mean penalised score (the H- column), and for how many
sentences each log's hypothesis scores higher. BLEU and F1 come from attn-only-sacrebleu-detok and
attn-only-parse-eval.

    python benchmarks/compare_search.py work/gen_fairseq.txt work/gen_paper.txt

The two logs must hold the same sentence ids (H-<id> lines, one per sentence: --nbest 1), and
their scores the same penalty, or the comparison means nothing.
"""

import argparse
import sys
from pathlib import Path

from attn_only_tools import generate_log
from attn_only_tools.guards.errors import PluginError, install_excepthook


def read_hypotheses(path: Path) -> dict:
    """fairseq-generate's H- lines: sentence id -> (penalised score, hypothesis text)."""
    out = {}
    for sentence, lines in generate_log.read(path).items():
        if len(lines.hypotheses) > 1:
            raise PluginError(f"{path} has sentence {sentence} twice: decode with --nbest 1")
        if lines.hypotheses:
            out[sentence] = lines.hypotheses[0]
    if not out:
        raise PluginError(f"{path} has no H- lines: give the stdout of fairseq-generate")
    return out


def compare(a: dict, b: dict) -> dict:
    """The counts and means for two logs' {id: (score, text)} over the same ids."""
    if a.keys() != b.keys():
        raise SystemExit(f"error: the logs decode different sentences ({len(a)} and {len(b)} ids): give the same split")
    ids = sorted(a)
    return {
        "sentences": len(ids),
        "differ": sum(a[i][1] != b[i][1] for i in ids),
        "mean": (sum(a[i][0] for i in ids) / len(ids), sum(b[i][0] for i in ids) / len(ids)),
        "higher": (sum(a[i][0] > b[i][0] for i in ids), sum(b[i][0] > a[i][0] for i in ids)),
    }


def table(names, result: dict) -> str:
    n = result["sentences"]
    rows = [
        f"{n} sentences; best hypotheses differ on {result['differ']} ({100 * result['differ'] / n:.1f}%)",
        "| log | mean penalised score | scores higher on |",
        "|---|---|---|",
    ]
    rows += [
        f"| {name} | {mean:.4f} | {higher} |"
        for name, mean, higher in zip(names, result["mean"], result["higher"], strict=True)
    ]
    return "\n".join(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="example:\n" + __doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("first", type=Path, help="a fairseq-generate log (stdout)")
    p.add_argument("second", type=Path, help="the same split decoded another way")
    a = p.parse_args(argv)
    print(table([str(a.first), str(a.second)], compare(read_hypotheses(a.first), read_hypotheses(a.second))))
    return 0


if __name__ == "__main__":
    install_excepthook()  # an error that ends the run is one `error:` line
    sys.exit(main())
