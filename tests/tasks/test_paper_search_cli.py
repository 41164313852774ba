"""`--beam-stop paper` in the real CLIs: fairseq-generate and fairseq-interactive on a toy model
trained for a few updates (tests/helpers.py), its scores as fairseq prints them, the two
rules compared by benchmarks/compare_search.py, and an unknown rule refused by fairseq's parser."""

import subprocess
import sys

import pytest

from attn_only_plugin.tasks.batched_search import BatchedBeamSearch
from attn_only_plugin.tasks.paper_search import StoppingRuleGenerator
from attn_only_plugin.tasks.translation_paper import gnmt_length_penalty
from attn_only_tools import generate_log
from attn_only_tools.guards.errors import PluginError
from helpers import BIN, ENV, PLUGIN, ROOT, TIMEOUT, one_line_error, run, toy_data, train_args

DECODE = ["--task", "translation_paper", "--beam", 4, "--lenpen", 0.6, "--lenpen-style", "gnmt"]
DECODE += ["--max-len-a", 1, "--max-len-b", 5, "--cpu", "--user-dir", PLUGIN]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("paper_search")
    data = toy_data(root, n_test=20)
    run(BIN / "fairseq-train", *train_args(data, root / "ckpt", 30, 0.0, "--task", "translation_paper"))
    return data, root / "ckpt" / "checkpoint_last.pt"


def test_generate_prints_paper_scores_never_below_fairseqs(trained, tmp_path):
    """H- = the sum of the P- column / lp(|Y|) (EOS counted; fairseq prints both in log2), and
    compare_search.py finds no sentence where fairseq's rule scores higher."""
    data, checkpoint = trained
    logs = {}
    for rule in ("fairseq", "paper"):
        args = [data, "--path", checkpoint, "--gen-subset", "test", "--beam-stop", rule, *DECODE]
        logs[rule] = tmp_path / f"{rule}.txt"
        logs[rule].write_text(run(BIN / "fairseq-generate", *args).stdout)
    out = logs["paper"].read_text()
    sentences = generate_log.parse(out.splitlines())
    assert len(sentences) == 20
    for s in sentences.values():
        score, text = s.hypotheses[0]
        per_token = s.positional[0]
        assert len(per_token) == len(text.split()) + 1
        assert score == pytest.approx(sum(per_token) / gnmt_length_penalty(len(per_token), 0.6), abs=2e-3)
    compare = [sys.executable, ROOT / "benchmarks" / "compare_search.py", logs["fairseq"], logs["paper"]]
    proc = subprocess.run([str(c) for c in compare], capture_output=True, text=True, env=ENV, timeout=TIMEOUT)
    assert proc.returncode == 0 and proc.stdout.startswith("20 sentences;"), proc.stdout + proc.stderr
    (fairseq_row,) = [line for line in proc.stdout.splitlines() if line.startswith(f"| {logs['fairseq']} |")]
    assert fairseq_row.endswith("| 0 |")  # higher on no sentence


def test_interactive_and_the_python_api_decode_alike_and_refuse_an_unknown_rule(trained, monkeypatch):
    """fairseq-interactive --beam-stop paper and translate(..., beam_stop="paper") give the same
    hypotheses; the task's own setting is back after the call; "best" is refused by both."""
    import attn_only_plugin

    data, checkpoint = trained
    cmd = [BIN / "fairseq-interactive", data, "--path", checkpoint, "--beam-stop", "paper", *DECODE]
    cmd += ["--source-lang", "src", "--target-lang", "tgt"]
    proc = subprocess.run(
        [str(c) for c in cmd], input="1 2 3\n4 5\n", capture_output=True, text=True, env=ENV, timeout=TIMEOUT
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    hypos = generate_log.parse(proc.stdout.splitlines())
    mt = attn_only_plugin.load(checkpoint.parent, checkpoint_file=checkpoint.name, data=str(data))
    calls, generate = [], StoppingRuleGenerator._generate
    monkeypatch.setattr(
        StoppingRuleGenerator, "_generate", lambda self, *a, **k: calls.append(1) or generate(self, *a, **k)
    )
    paper = mt.translate(["1 2 3", "4 5"], lenpen_style="gnmt", beam_stop="paper", max_len_b=5)
    assert paper == [hypos[0].hypothesis, hypos[1].hypothesis] and calls  # through the paper's search
    assert str(mt.hub.task.cfg.beam_stop) == "fairseq" and str(mt.hub.task.cfg.lenpen_style) == "fairseq"
    with pytest.raises(attn_only_plugin.PluginError, match="beam_stop='best' is not one of its values"):
        mt.translate("1 2", beam_stop="best")
    cmd[cmd.index("paper")] = "best"
    proc = subprocess.run([str(c) for c in cmd], input="", capture_output=True, text=True, env=ENV, timeout=TIMEOUT)
    assert proc.returncode == 2 and "invalid choice: 'best'" in proc.stderr, proc.stderr[-2000:]


def generated(*args) -> dict:
    """fairseq-generate's hypotheses, by sentence (generate_log.parse)."""
    return generate_log.parse(run(BIN / "fairseq-generate", *args).stdout.splitlines())


@pytest.mark.parametrize("rule", ["fairseq", "paper"])
def test_batched_search_prints_what_fairseqs_search_prints(trained, rule, monkeypatch):
    """fairseq-generate --batched-search (tasks/batched_search.py) with 2-best lists, and with the
    fixed-size caches and --cuda-graph-decoding or --cuda-graph-search (eager on a CPU; with
    --decode-attention-kernel and --beam-reorder-kernel, torch's ops where Triton cannot run) in batches
    of 2 sources padded to multiples of 8 (batches of one shape, which search in the last one's
    buffers): the same hypotheses as without, scores as fairseq prints them (4 decimals) within
    one unit of the last digit; the Python API's
    translate(..., batched_search=True) the same translations; a refused option in one line."""
    data, checkpoint = trained
    args = [data, "--path", checkpoint, "--gen-subset", "test", "--beam-stop", rule, "--nbest", 2, *DECODE]
    static = ["--batched-search", "--model-overrides", "{'static_decoding_cache': True}"]
    shaped = [*args, "--batch-size", 2, "--required-seq-len-multiple", 8]  # a longer length cap: S counts the pads
    references = {id(args): generated(*args), id(shaped): generated(*shaped)}
    for common, extra in [
        (args, ["--batched-search"]),
        (shaped, [*static, "--cuda-graph-decoding", "--decode-attention-kernel"]),
        (shaped, [*static, "--cuda-graph-search", "--beam-reorder-kernel"]),
    ]:
        reference, ours = references[id(common)], generated(*common, *extra)
        assert sorted(ours) == sorted(reference) and len(reference) == 20
        assert sum(len(sentence.hypotheses) for sentence in reference.values()) >= 38  # 2-best lists, but a few
        for i, ref in reference.items():
            got = ours[i]
            assert len(got.hypotheses) == len(ref.hypotheses) == len(got.positional) == len(ref.positional) >= 1
            for (score, text), (ref_score, ref_text) in zip(got.hypotheses, ref.hypotheses, strict=True):
                assert text == ref_text and score == pytest.approx(ref_score, abs=2e-4)
            for per_token, ref_per_token in zip(got.positional, ref.positional, strict=True):
                assert per_token == pytest.approx(ref_per_token, abs=2e-4)
    import attn_only_plugin

    mt = attn_only_plugin.load(checkpoint.parent, checkpoint_file=checkpoint.name, data=str(data))
    plain = mt.translate(["1 2 3", "4 5 6 7"], beam_stop=rule, max_len_b=5)
    calls, search = [], BatchedBeamSearch._generate
    monkeypatch.setattr(BatchedBeamSearch, "_generate", lambda self, *a, **k: calls.append(1) or search(self, *a, **k))
    assert mt.translate(["1 2 3", "4 5 6 7"], beam_stop=rule, max_len_b=5, batched_search=True) == plain and calls
    static = attn_only_plugin.load(
        checkpoint.parent, checkpoint_file=checkpoint.name, data=str(data), static_decoding_cache=True
    )
    paths = dict(batched_search=True, cuda_graph_search=True, beam_reorder_kernel=True, decode_attention_kernel=True)
    assert static.translate(["1 2 3", "4 5 6 7"], beam_stop=rule, max_len_b=5, **paths) == plain and len(calls) == 2
    with pytest.raises(PluginError, match="^--beam-reorder-kernel works on the fixed-size caches: add"):
        mt.translate(["1 2 3"], batched_search=True, beam_reorder_kernel=True)
    refused = run(BIN / "fairseq-generate", *args, "--batched-search", "--diverse-beam-groups", 2, ok=False)
    one_line_error(refused, "--batched-search does not support --diverse-beam-groups: drop one of them")
