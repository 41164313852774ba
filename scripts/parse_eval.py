#!/usr/bin/env python
"""Score fairseq-generate output of a parsing model with EVALB (COLLINS.prm), as section 6.3 /
Table 4 of Vaswani et al. (2017) report F1, next to a right-branching baseline.

    python scripts/parse_eval.py GENERATE_LOG --data work/wsj/text --split test [--out pred.trees]

GENERATE_LOG is fairseq-generate's stdout (its H- lines: predicted bracket sequences, in any
order). --data holds SPLIT.words / .gold / .tags from prepare_ptb.py. Malformed outputs are
repaired deterministically (attn_only_plugin/parsing/linearize.py) and counted.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def read_hypotheses(log: Path, n: int):
    hyps = {}
    for line in log.read_text(encoding="utf-8").splitlines():
        if line.startswith("H-"):
            sid, _score, text = (line.split("\t") + [""])[:3]
            hyps[int(sid[2:])] = text.split()
    missing = [i for i in range(n) if i not in hyps]
    if missing:
        raise SystemExit(f"error: {log} has no hypothesis for sentence {missing[0]} ({len(missing)} missing): "
                         "was it generated on this split, without --skip-invalid-size-inputs-valid-test?")
    return [hyps[i] for i in range(n)]


def evaluate(log: Path, data: Path, split: str, out: Path = None) -> str:
    from attn_only_plugin.parsing.data import right_branching_baseline, score_predictions

    def lines(ext):
        path = data / f"{split}.{ext}"
        if not path.is_file():
            raise SystemExit(f"error: {path} not found: run scripts/prepare_ptb.py first")
        return path.read_text(encoding="utf-8").splitlines()

    words = [l.split() for l in lines("words")]
    tags = [l.split() for l in lines("tags")]
    gold = lines("gold")
    result, repaired, trees = score_predictions(read_hypotheses(log, len(words)), words, gold, tags)
    baseline = right_branching_baseline(words, gold, tags)
    if out is not None:
        out.write_text("\n".join(trees) + "\n", encoding="utf-8")
    t, b = result.all, baseline.all
    return (f"EVALB (COLLINS.prm) on {split}, {len(words)} sentences ({t.valid} valid): F1 {t.fmeasure:.2f} "
            f"(recall {t.recall:.2f}, precision {t.precision:.2f}, complete match "
            f"{t.per_valid(t.complete):.2f}); {repaired} outputs repaired\n"
            f"right-branching baseline: F1 {b.fmeasure:.2f}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("log", type=Path, help="fairseq-generate output")
    p.add_argument("--data", type=Path, required=True, help="prepare_ptb.py output folder")
    p.add_argument("--split", default="test")
    p.add_argument("--out", type=Path, help="also write the predicted trees, one per line")
    a = p.parse_args(argv)
    print(evaluate(a.log, a.data, a.split, a.out))


if __name__ == "__main__":
    main()
