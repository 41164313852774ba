"""examples/table3.sh SMALL=1 (Table 3 of Vaswani et al. 2017 on a CPU): every row's scaled flags
build the model they mean, whose parameter count the Table 3 formula gives (and that formula gives
the paper's "params x10^6" column at the paper's scale); one row end to end on a tiny slice; and
attn-only-table3-report (attn_only_tools/cli/table3_report.py)'s table, agreement rule and figure."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from attn_only_tools.cli import table3_report as report
from helpers import BIN

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

VOCAB = 4000  # the recipe's joint sentencepiece vocabulary, fairseq's 4 specials included


def build(tmp_path, flags):
    """The model fairseq-train builds from `--arch transformer_base FLAGS` on a VOCAB-type dictionary."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    for lang in ("en", "de"):
        (tmp_path / f"dict.{lang}.txt").write_text("".join(f"w{i} 1\n" for i in range(VOCAB - 4)))
    parser = options.get_training_parser()
    argv = [str(tmp_path), "--user-dir", str(ROOT / "attn_only_plugin"), "--arch", "transformer_base"]
    argv += ["--criterion", "paper_label_smoothed_ce"]  # rows D3, D4 set its --label-smoothing
    args = options.parse_args_and_arch(parser, argv + ["-s", "en", "-t", "de", "--cpu", *flags.split()])
    cfg = convert_namespace_to_omegaconf(args)
    return tasks.setup_task(cfg.task).build_model(cfg.model)


@pytest.mark.parametrize("row", list(report.paper_rows(small=True)))
def test_every_scaled_row_builds_the_intended_shape(tmp_path, row):
    flags = report.paper_rows(small=True)[row][2]
    paper = report.shape(report.paper_rows(small=False)[row][2])  # the intended shape: the paper's, widths / 4
    s = {k: v // 4 if k in ("d_model", "d_ff", "d_k", "d_v") else v for k, v in paper.items()}
    model = build(tmp_path, flags)
    n = sum(p.numel() for p in model.parameters())
    learned = sum(p.numel() for name, p in model.named_parameters() if "positions" in name)
    assert (learned > 0) == ("--learned-pos" in flags), row  # row E's learned positions, no other row's
    assert n - learned == report.parameters(s, VOCAB), (row, n, s)  # the formula counts the rest
    assert (len(model.encoder.layers), len(model.decoder.layers)) == (s["N"], s["N"])
    d, h, d_k, d_v = s["d_model"], s["h"], s["d_k"], s["d_v"]
    for layer in (model.encoder.layers[0], model.decoder.layers[-1]):
        attn = layer.self_attn
        assert (attn.h, attn.d_k, attn.d_v) == (h, d_k, d_v), row
        assert tuple(attn.qkv.weight.shape) == (h * (2 * d_k + d_v), d), row  # [W^Q | W^K | W^V]
        assert tuple(attn.out.weight.shape) == (d, h * d_v), row  # W^O
        assert tuple(layer.ffn.w1.weight.shape) == (s["d_ff"], d), row  # W_1 of Eq. 2
    cross = model.decoder.layers[0].cross_attn
    assert tuple(cross.q.weight.shape) == (h * d_k, d) and tuple(cross.kv.weight.shape) == (h * (d_k + d_v), d)


def test_scaling_divides_every_width_by_one_factor():
    """The scaled rows are the paper's with d_model, d_ff, d_k, d_v / 4; depth, heads and the
    rest as the paper; d_k = d_model / h holds in base as in the paper's base."""
    paper, small = report.paper_rows(small=False), report.paper_rows(small=True)
    assert list(paper) == list(small) and len(small) == 19
    for row in paper:
        big, little = report.shape(paper[row][2]), report.shape(small[row][2])
        for field in ("d_model", "d_ff", "d_k", "d_v"):
            assert big[field] == 4 * little[field], (row, field)
        assert (big["N"], big["h"]) == (little["N"], little["h"]), row
        rest = lambda f: re.sub(r"--(d-model|d-ff|d-k|d-v) \d+", "", f).split()  # noqa: E731
        assert rest(paper[row][2]) == rest(small[row][2]), row
    assert report.shape(small["base"][2]) == dict(N=6, d_model=128, d_ff=512, h=8, d_k=16, d_v=16)


def test_parameter_formula_gives_table3s_column():
    """At the paper's scale (37,000 shared types) the formula lands within 7% of every
    "params x10^6" of Table 3, and under it: the paper counted a little more throughout."""
    paper = report.paper_rows(small=False)
    for row, millions in report.PAPER_PARAMS.items():
        ours = report.parameters(report.shape(paper[row][2]), 37000) / 1e6
        assert 0 < (millions - ours) / millions < 0.07, (row, ours, millions)


def table3(env, *args):
    return subprocess.run(
        ["bash", str(EXAMPLES / "table3.sh"), *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, SMALL="1", **env),
        timeout=1200,
    )


def test_one_row_end_to_end_on_a_tiny_slice(tmp_path):
    """SMALL=1 table3.sh B1 from the corpus to its line; a rerun with more updates resumes; a
    finished row is not redone; a folder holding another row's model is refused before any work."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split, n in {"train": 300, "valid": 12, "test": 5}.items():
        for lang in ("en", "de"):
            lines = (EXAMPLES / "data" / "libreoffice_en_de" / f"{split}.{lang}").read_text().splitlines()[:n]
            (corpus / f"{split}.{lang}").write_text("\n".join(lines) + "\n")
    work = tmp_path / "work"
    env = dict(CORPUS=str(corpus), WORK=str(work), VOCAB="300", SEED="2", MAX_TOKENS="512")
    proc = table3(dict(env, UPDATES="2"), "B1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = proc.stdout.strip()
    assert re.fullmatch(r"table3 B1 seed 2: ppl [0-9.]+ bleu [0-9.]+", line), proc.stdout  # stdout: the line only
    run = work / "B1" / "seed2"
    assert (run / "result.txt").read_text().strip() == line
    result = json.loads((run / "result.json").read_text())
    assert (result["row"], result["seed"], result["updates"]) == ("B1", 2, 2)
    assert f"ppl {result['ppl']} bleu {result['bleu']}" in line
    assert "--d-k 4" in result["flags"] and "--d-model 128" in result["flags"]
    assert len((run / "hyp.de").read_text().splitlines()) == 12  # the valid split, not test
    assert not list((run / "checkpoints").glob("checkpoint_*_*.pt"))  # the last checkpoint only is kept

    proc = table3(dict(env, UPDATES="3"), "B1")  # more updates: resumes from checkpoint_last.pt
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(
        r"loaded checkpoint .*checkpoint_last.pt \(epoch 1 @ 2 updates\)", (run / "train.log").read_text(), re.I
    )
    assert json.loads((run / "result.json").read_text())["updates"] == 3
    proc = table3(dict(env, UPDATES="3"), "B1")  # finished: the line again, nothing redone
    assert proc.returncode == 0 and "finished before" in proc.stderr and "fairseq-" not in proc.stderr
    assert proc.stdout.strip() == (run / "result.txt").read_text().strip()

    other = work / "A1" / "seed2"  # a folder holding B1's model, run as A1
    other.parent.mkdir()
    os.rename(run, other)
    before = sorted(p.name for p in other.iterdir())
    proc = table3(dict(env, UPDATES="3"), "A1")
    assert proc.returncode == 1 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("error: ")
    assert "row B1" in proc.stderr and "row A1" in proc.stderr
    assert sorted(p.name for p in other.iterdir()) == before


def test_rows_started_together_prepare_the_data_once(tmp_path):
    """Two queues side by side in one WORK: one prepares the shared data-bin, the other waits for it."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split, n in {"train": 200, "valid": 4, "test": 4}.items():
        for lang in ("en", "de"):
            lines = (EXAMPLES / "data" / "libreoffice_en_de" / f"{split}.{lang}").read_text().splitlines()[:n]
            (corpus / f"{split}.{lang}").write_text("\n".join(lines) + "\n")
    env = dict(os.environ, SMALL="1", CORPUS=str(corpus), WORK=str(tmp_path / "w"), VOCAB="250", UPDATES="1")
    env["MAX_TOKENS"] = "512"
    procs = [
        subprocess.Popen(
            ["bash", str(EXAMPLES / "table3.sh"), row],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for row in ("C1", "C4")
    ]
    outs = [p.communicate(timeout=1200) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    assert [out.split(":")[0] for out, _ in outs] == ["table3 C1 seed 1", "table3 C4 seed 1"]
    prepared = sorted("joint vocabulary 250" in err for _, err in outs)
    assert prepared == [False, True], [err[:500] for _, err in outs]  # one prepared, the other reused it


@pytest.mark.parametrize(
    "ours, base, paper_delta, expected",
    [
        ([5.0, 5.1, 5.2], [5.05, 5.15, 5.25], 0.05, "yes (both ~0)"),  # ranges overlap, paper ~0 (A3, E)
        ([5.0, 5.1, 5.2], [5.05, 5.15, 5.25], 0.37, "no (ours inside the spread)"),  # paper moved, we did not
        ([6.0, 6.2, 6.1], [5.0, 5.1, 5.2], 1.19, "yes"),  # C1: clearly worse, as the paper
        ([4.0, 4.2, 4.1], [5.0, 5.1, 5.2], 1.19, "no (opposite)"),
        ([6.0, 6.2, 6.1], [5.0, 5.1, 5.2], -0.01, "no (paper ~0)"),  # we moved, the paper did not
        ([4.0, 4.2, 4.1], [5.0, 5.1, 5.2], -0.26, "yes"),  # C5: better
        ([6.0], [5.0, 5.1, 5.2], 1.19, "not judged (1 seed)"),
    ],
)
def test_agreement_is_judged_against_the_seed_spread(ours, base, paper_delta, expected):
    assert report.agreement(ours, base, paper_delta, lower_is_better=True) == expected


def write_result(work, row, seed, ppl, bleu, rate=0.25, updates=500):
    folder = work / row / f"seed{seed}"
    folder.mkdir(parents=True)
    flags = f"--d-model 128 --max-tokens 2048 --warmup-updates 400 --lr-multiplier {rate}"
    result = dict(row=row, seed=seed, updates=updates, ppl=ppl, bleu=bleu, flags=flags, seconds=600 + 60 * seed)
    (folder / "result.json").write_text(json.dumps(result))


def test_report_writes_the_table_and_the_figure(tmp_path):
    work = tmp_path / "work"
    for seed, (b, c1, e) in enumerate([(5.0, 6.0, 5.05), (5.2, 6.4, 5.1), (5.1, 6.2, 5.3)], start=1):
        write_result(work, "base", seed, b, 20.0 + seed)
        write_result(work, "C1", seed, c1, 17.0 + seed)
        write_result(work, "E", seed, e, 21.0 + seed)
    out, png = tmp_path / "table.md", tmp_path / "table3.png"
    script = [str(BIN / "attn-only-table3-report"), str(work)]
    proc = subprocess.run([*script, "--out", str(out), "--figure", str(png)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = {line.split(" | ")[0]: line for line in out.read_text().splitlines()[2:]}
    assert list(lines) == ["| base", "| C1", "| E"]  # the table's order, rows present only
    assert lines["| base"].startswith("| base | 3 | 5.10 ± 0.10 | 22.00 ± 1.00 |")
    # C1: +1.10 PPL against the paper's +1.19, outside base's range: agrees; BLEU -3.00 vs -2.10
    assert lines["| C1"] == "| C1 | 3 | 6.20 ± 0.20 | 19.00 ± 1.00 | +1.10 | +1.19 | yes | -3.00 | -2.10 | yes | 12.0 |"
    # E: its range overlaps base's and the paper's PPL did not move (0.00): agrees
    assert "| +0.05 | +0.00 | yes (both ~0) |" in lines["| E"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    proc = subprocess.run([*script, "--out", str(out)], capture_output=True, text=True)  # no --force
    assert proc.returncode == 1 and proc.stderr.startswith("error: --out") and "--force" in proc.stderr
    (work / "base").rename(work / "D1")  # a folder moved: its results are not D1's
    proc = subprocess.run([*script, "--out", str(tmp_path / "other.md")], capture_output=True, text=True)
    assert proc.returncode == 1 and "holds row base's result, not D1's" in proc.stderr
    shutil.rmtree(work / "D1")  # base missing: nothing to compare with
    proc = subprocess.run([*script, "--out", str(tmp_path / "other.md")], capture_output=True, text=True)
    assert proc.returncode == 1 and "no base row" in proc.stderr and not (tmp_path / "other.md").exists()


def test_rates_choose_each_rows_learning_rate_on_valid(tmp_path):
    slow, fast = tmp_path / "lr0.25", tmp_path / "lr0.5"
    write_result(slow, "base", 1, 110.0, 1.8)
    write_result(slow, "base", 2, 130.0, 1.5)  # a seed the other rate lacks: not used to choose
    write_result(fast, "base", 1, 566.0, 0.1, rate=0.5)
    write_result(slow, "C1", 1, 48.0, 9.1)
    write_result(fast, "C1", 1, 30.0, 11.4, rate=0.5)
    write_result(slow, "E", 1, 74.0, 3.2)  # one rate only: no choice to show
    proc = subprocess.run(
        [str(BIN / "attn-only-table3-report"), "--rates", str(slow), str(fast)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "| row | N | × 0.25 | × 0.5 | chosen | BLEU there | ΔPPL ours | ΔPPL paper |"
    assert lines[2] == "| base | 6 | **120.00 (2 seeds)** | 566.00 | 0.25 | 1.65 |  |  |"
    assert lines[3] == "| C1 | 2 | 48.00 | **30.00** | 0.5 | 11.40 | -90.00 | +1.19 |"  # each row at its own rate
    assert len(lines) == 4
    write_result(tmp_path / "long", "C1", 2, 14.0, 19.1, updates=10000)
    proc = subprocess.run(
        [str(BIN / "attn-only-table3-report"), "--rates", str(slow), str(tmp_path / "long")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and "different lengths (UPDATES)" in proc.stderr
    proc = subprocess.run([str(BIN / "attn-only-table3-report"), str(slow), str(fast)], capture_output=True, text=True)
    assert proc.returncode == 1 and "several are for --rates" in proc.stderr
    proc = subprocess.run(
        [str(BIN / "attn-only-table3-report"), "--rates", str(slow), str(slow)], capture_output=True, text=True
    )
    assert proc.returncode == 1 and "seed 1 at multiplier 0.25 is in two WORK folders" in proc.stderr
    proc = subprocess.run([str(BIN / "attn-only-table3-report"), "--rates", str(fast)], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.splitlines()[2].startswith("| base | 6 |")  # base at one rate only


def test_a_queue_checks_every_row_before_running_any(tmp_path):
    work, env = tmp_path / "w", dict(WORK=str(tmp_path / "w"), CORPUS=str(tmp_path / "none"))  # a row run would stop
    proc = table3(env, "base", "Z9")
    assert proc.returncode == 1 and proc.stderr.startswith("error: unknown Table 3 row 'Z9'") and not work.exists()
    assert len(proc.stderr.splitlines()) == 1  # that line only: base was not started
    proc = table3(env)
    assert proc.returncode == 1 and proc.stderr.startswith("error: no Table 3 row given") and not work.exists()


def test_a_queue_of_seeds_runs_each_row_once_per_seed(tmp_path):
    """SEEDS="1 2" over one row: two runs of that row, each one seed (the child runs are not queues
    again); both finished here, so each prints its line without training."""
    work = tmp_path / "w"
    for seed in (1, 2):
        folder = work / "base" / f"seed{seed}"
        folder.mkdir(parents=True)
        (folder / "result.txt").write_text(f"table3 base seed {seed}: ppl 5.0 bleu 20.0\n")
        (folder / "result.json").write_text(json.dumps(dict(row="base", seed=seed, updates=7, ppl=5.0, bleu=20.0)))
    env = dict(os.environ, SMALL="1", WORK=str(work), CORPUS=str(tmp_path / "none"), SEEDS="1 2", UPDATES="7")
    proc = subprocess.run(
        ["bash", str(EXAMPLES / "table3.sh"), "base"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == [f"table3 base seed {s}: ppl 5.0 bleu 20.0" for s in (1, 2)]


def test_a_folder_made_otherwise_is_refused_before_any_work(tmp_path):
    """A WORK whose data were prepared with other settings, or a run folder whose model was trained
    with other flags, is refused in one line before anything is read or written (pipeline.sh's
    refuse_other_settings, shared with wsj_parsing.sh); other flags without a model are no refusal."""
    work, corpus = tmp_path / "work", tmp_path / "corpus"
    run = work / "B1" / "seed1"
    (run / "checkpoints").mkdir(parents=True)
    (work / "data.settings").write_text("corpus: elsewhere | sentencepiece vocabulary: 8000\n")
    env = dict(CORPUS=str(corpus), WORK=str(work), SEED="1", VOCAB="4000", MAX_TOKENS="2048")
    env.update(WARMUP="400", LR_MULTIPLIER="0.25")
    proc = table3(env, "B1")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"error: {work} holds data prepared otherwise (corpus: elsewhere | sentencepiece vocabulary: 8000), not as "
        f"now (corpus: {corpus} | sentencepiece vocabulary: 4000): give another WORK, or remove {work} to start over"
    ]
    (work / "data.settings").unlink()
    (run / "train.settings").write_text("row A1, fairseq-train: --heads 1\n")
    (run / "checkpoints" / "checkpoint_last.pt").write_bytes(b"")
    before = sorted(str(p.relative_to(work)) for p in work.rglob("*"))
    proc = table3(env, "B1")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"error: {run}/checkpoints holds a model trained otherwise (row A1, fairseq-train: --heads 1), not as now "
        "(row B1, fairseq-train: --d-model 128 --d-ff 512 --d-k 4 --max-tokens 2048 --warmup-updates 400 "
        f"--lr-multiplier 0.25): give another WORK, or remove {run} to train again"
    ]
    assert sorted(str(p.relative_to(work)) for p in work.rglob("*")) == before
    (run / "checkpoints" / "checkpoint_last.pt").unlink()  # no model yet: the corpus is the next thing checked
    proc = table3(env, "B1")
    assert proc.returncode == 1 and proc.stderr.startswith(f"error: missing {corpus}/train.en"), proc.stderr
