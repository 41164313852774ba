"""fairseq's features with our model against fairseq's own transformer, on the same tiny data
(docs/fairseq_features.md has the table). One module-scoped pair of models, trained
by the real fairseq-train on helpers.toy_data's digit-reversal data: fairseq's `--arch transformer`
command (d_model 32, 2 + 2 layers, in fairseq's flag names) and the same command with
`--user-dir attn_only_plugin --arch transformer_base`. Each test runs a fairseq CLI, or
fairseq_cli in-process, on both and compares what fairseq's transformer does with ours.
"""

import re
import subprocess
import sys
from itertools import pairwise

import pytest

from attn_only_tools import generate_log
from helpers import BIN, ENV, PLUGIN, ROOT, TIMEOUT, run, toy_data

# a command written for fairseq's transformer (its flag names), tiny
BUILTIN_ARCH = [
    "--encoder-embed-dim",
    32,
    "--decoder-embed-dim",
    32,
    "--encoder-ffn-embed-dim",
    64,
    "--decoder-ffn-embed-dim",
    64,
    "--encoder-attention-heads",
    4,
    "--decoder-attention-heads",
    4,
    "--encoder-layers",
    2,
    "--decoder-layers",
    2,
    "--share-all-embeddings",
    "--dropout",
    0.1,
]
OPTIM = [
    "--optimizer",
    "adam",
    "--lr",
    0.005,
    "--lr-scheduler",
    "inverse_sqrt",
    "--warmup-updates",
    10,
    "--criterion",
    "label_smoothed_cross_entropy",
    "--label-smoothing",
    0.1,
    "--batch-size",
    16,
    "--cpu",
    "--seed",
    1,
    "--log-format",
    "simple",
    "--num-workers",
    0,
]
TRAIN = [*OPTIM, "--max-update", 40, "--no-epoch-checkpoints", "--log-interval", 10]
OURS = ["--user-dir", PLUGIN, "--arch", "transformer_base"]
SOURCES = "1 2 3 4\n5 6 7\n8 9 0 1 2\n"


def hypotheses(output: str) -> list:
    """The H- lines of fairseq-generate/-interactive output, as (id, score, text), sorted by id."""
    return sorted((i, *h) for i, s in generate_log.parse(output.splitlines()).items() for h in s.hypotheses)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """data-bin, and the checkpoints of fairseq's transformer ("builtin") and ours ("ours")
    trained for 40 updates by the same command (ours with --user-dir and our --arch)."""
    root = tmp_path_factory.mktemp("fairseq_features")
    data = toy_data(root, n_train=200, n_test=10)
    paths = {"data": data}
    for name, arch in (("builtin", ["--arch", "transformer"]), ("ours", OURS)):
        save = root / name
        run(BIN / "fairseq-train", data, *arch, *BUILTIN_ARCH, *TRAIN, "--save-dir", save)
        paths[name] = save / "checkpoint_last.pt"
    return paths


# every generation below runs in one process (fairseq_cli in-process) for both models -------------------

IN_PROCESS = """
import contextlib, io, json, logging, sys, traceback
from fairseq import options
from fairseq_cli import generate, interactive
runs, out = json.loads(sys.argv[1]), sys.argv[2]
for name, (cli, argv, stdin) in runs.items():
    text = io.StringIO()
    log = logging.StreamHandler(text)  # the run's log lines too
    logging.getLogger().addHandler(log)
    try:
        parser = (options.get_generation_parser if cli == "generate" else options.get_interactive_generation_parser)()
        args = options.parse_args_and_arch(parser, argv)
        sys.stdin = io.StringIO(stdin or "")
        with contextlib.redirect_stdout(text):
            (generate if cli == "generate" else interactive).main(args)
    except BaseException as e:
        text.write("FAILED " + "".join(traceback.format_exception_only(type(e), e)))
    logging.getLogger().removeHandler(log)
    with open(f"{out}/{name}.txt", "w") as f:
        f.write(text.getvalue())
"""

CONSTRAINED = "1 2 3 4\t4 3\n5 6 7 8\t6\n"
# name: (cli, flags); every one runs with fairseq's transformer and with ours
FEATURES = {
    "beam": ("generate", []),
    "batch1": ("generate", ["--batch-size", 1]),
    "nbest": ("generate", ["--nbest", 3]),
    "topk": ("generate", ["--sampling", "--sampling-topk", 3, "--beam", 1, "--seed", 3]),
    "topp": ("generate", ["--sampling", "--sampling-topp", 0.6, "--beam", 1, "--temperature", 0.7, "--seed", 3]),
    "diversity_rate": ("generate", ["--diversity-rate", 0.5, "--nbest", 2]),
    "prefix": ("generate", ["--prefix-size", 1]),
    "match_source_len": ("generate", ["--match-source-len"]),
    "alignment": ("generate", ["--print-alignment"]),
    "score_reference": ("generate", ["--score-reference"]),
    "constraints": ("interactive", ["--constraints"]),
    "constraints_unordered": ("interactive", ["--constraints", "unordered"]),
    "ensemble": ("generate", []),  # --path ours:builtin, set below
}
DROPOUT_05 = ["--model-overrides", "{'dropout': 0.5}"]
# runs that the tests after them read
OTHER_RUNS = {
    "seed1": ("generate", ["--seed", 1, *DROPOUT_05]),
    "seed2": ("generate", ["--seed", 2, *DROPOUT_05]),
    "retain_seed1": ("generate", ["--seed", 1, *DROPOUT_05, "--retain-dropout"]),
    "retain_seed2": ("generate", ["--seed", 2, *DROPOUT_05, "--retain-dropout"]),
    "retain_none": (
        "generate",
        ["--seed", 1, *DROPOUT_05, "--retain-dropout", "--retain-dropout-modules", "NoSuchModule"],
    ),
    "pruned": ("generate", ["--model-overrides", "{'encoder_layers_to_keep': '0', 'decoder_layers_to_keep': '1'}"]),
    "diverse_groups": ("generate", ["--diverse-beam-groups", 2, "--diverse-beam-strength", 0.5, "--nbest", 4]),
    "nbest4": ("generate", ["--nbest", 4]),
    "no_repeat": ("generate", ["--nbest", 4, "--no-repeat-ngram-size", 2]),
}


@pytest.fixture(scope="module")
def generated(models, tmp_path_factory):
    """name.which -> the output (with its log lines) of each FEATURES and OTHER_RUNS run, for both
    models, all in one process: one start-up instead of one per run."""
    out = tmp_path_factory.mktemp("generated")
    runs = {}
    for which in ("builtin", "ours"):
        for name, (cli, flags) in {**FEATURES, **OTHER_RUNS}.items():
            path = f"{models['ours']}:{models['builtin']}" if name == "ensemble" else models[which]
            # --num-workers 0: a loader process would cost each run a 5 s wait for it to stop
            common = [models["data"], "--user-dir", PLUGIN, "--path", path, "--cpu", "--beam", 4, "--num-workers", 0]
            common += ["--batch-size", 16, "--gen-subset", "test"] if cli == "generate" else []
            runs[f"{name}.{which}"] = (
                cli,
                [str(a) for a in (*common, *flags)],
                CONSTRAINED if cli == "interactive" else None,
            )
    import json

    proc = subprocess.run(
        [sys.executable, "-c", IN_PROCESS, json.dumps(runs), str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=ENV,
        # a guard against a hang, not a speed target: this one process runs all 44 generations, which
        # took over 300 s (TIMEOUT, one CLI run's limit) on 2 cores shared with five other jobs
        timeout=TIMEOUT * 4,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {name: (out / f"{name}.txt").read_text() for name in runs}


def lines(output: str, tag: str) -> dict:
    """id -> list of the tab-separated fields of every `tag-id` line (S, T, H, A, ...)."""
    found = {}
    for line in output.splitlines():
        if line.startswith(tag + "-"):
            fields = line.split("\t")
            found.setdefault(int(fields[0][len(tag) + 1 :]), []).append(fields[1:])
    return found


def test_builtin_command_trains_ours(models):
    """Item 4: the command written for --arch transformer ran with our --arch (the fixture) and
    built the same model size: equal parameter counts (shared embeddings counted once)."""
    from helpers import load

    counts = {}
    for which in ("builtin", "ours"):
        state = load(models[which])
        model = state["model"]
        if which == "ours":
            assert state["cfg"]["model"]["d_model"] == 32 and state["cfg"]["model"]["heads"] == 4
        buffers = ("_float_tensor", ".version")  # fairseq's, not parameters
        distinct = {v.data_ptr(): v.numel() for k, v in model.items() if not k.endswith(buffers)}
        counts[which] = sum(distinct.values())
    assert counts["builtin"] == counts["ours"]


# fairseq_cli in-process with a text stdin (item 5) --------------------------------------------

INTERACTIVE_IN_PROCESS = """
import io, sys
from fairseq import options
from fairseq_cli import interactive
text = sys.argv.pop()
parser = options.get_interactive_generation_parser()
args = options.parse_args_and_arch(parser, sys.argv[1:])
sys.stdin = io.StringIO(text)  # text, no .buffer: how fairseq's own tests call it
interactive.main(args)
"""


@pytest.mark.parametrize("which", ["builtin", "ours"])
def test_interactive_main_in_process_with_text_stdin(models, which):
    """fairseq_cli.interactive.main with an io.StringIO stdin, the plugin loaded by --user-dir
    (for fairseq's checkpoint too): every line translated, as from a binary stdin."""
    common = [models["data"], "--user-dir", PLUGIN, "--path", models[which], "--cpu", "--beam", 2]
    proc = subprocess.run(
        [sys.executable, "-c", INTERACTIVE_IN_PROCESS, *map(str, common), SOURCES],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=ENV,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    piped = subprocess.run(
        [str(BIN / "fairseq-interactive"), *map(str, common)],
        input=SOURCES,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=ENV,
        timeout=TIMEOUT,
    )
    assert [h[0] for h in hypotheses(proc.stdout)] == [0, 1, 2]
    assert hypotheses(proc.stdout) == hypotheses(piped.stdout)


# --retain-dropout (item 1) ----------------------------------------------------------------------


@pytest.mark.parametrize("which", ["builtin", "ours"])
def test_retain_dropout(generated, which):
    """Monte-Carlo dropout at inference: two seeds give different hypotheses with --retain-dropout
    (dropout raised to 0.5 by --model-overrides), the same ones without; --retain-dropout-modules
    naming a module that holds no dropout retains nothing."""

    def hyps(name):
        assert "FAILED" not in generated[f"{name}.{which}"]
        return hypotheses(generated[f"{name}.{which}"])

    assert hyps("seed1") == hyps("seed2") and len(hyps("seed1")) == 10
    assert hyps("retain_seed1") != hyps("retain_seed2")
    assert hyps("retain_none") == hyps("seed1")


# LayerDrop, pruning, activation checkpointing (items 2 and 3) ---------------------------------------


@pytest.mark.parametrize("which", ["builtin", "ours"])
def test_layers_to_keep_by_model_overrides(generated, which):
    """Pruning a model on load with --model-overrides: the log says so, and the pruned model
    (encoder layer 0, decoder layer 1 of 2) translates differently from the full one."""
    pruned = generated[f"pruned.{which}"]
    assert "Pruning model to specified layer configuration" in pruned
    if which == "ours":
        assert "pruning the encoder to its layers 0 of 2" in pruned
    assert len(hypotheses(pruned)) == 10 and hypotheses(pruned) != hypotheses(generated[f"beam.{which}"])


def losses(output: str) -> list:
    """The training loss of every logged update."""
    return [float(m) for m in re.findall(r"train_inner \| .*?\bloss=([0-9.]+)", output)]


@pytest.mark.parametrize("which", ["builtin", "ours"])
def test_layerdrop_and_checkpoint_activations_train(models, tmp_path, which):
    """--encoder-layerdrop/--decoder-layerdrop train; --checkpoint-activations and
    --offload-activations give the losses of the run without them."""
    arch = ["--arch", "transformer"] if which == "builtin" else OURS
    short = [*OPTIM, "--max-update", 4, "--log-interval", 1, "--no-save"]

    def train(name, *extra):
        proc = run(
            BIN / "fairseq-train", models["data"], *arch, *BUILTIN_ARCH, *short, "--save-dir", tmp_path / name, *extra
        )
        found = losses(proc.stdout + proc.stderr)
        assert len(found) == 4, (proc.stdout + proc.stderr)[-2000:]
        return found

    plain = train("plain")
    assert train("checkpointed", "--checkpoint-activations") == plain
    assert train("offloaded", "--offload-activations") == plain
    dropped = train("layerdrop", "--encoder-layerdrop", 0.5, "--decoder-layerdrop", 0.5)
    assert dropped != plain


def test_overrides_reach_a_checkpoint_saved_before_the_field(models, tmp_path):
    """A checkpoint whose stored config lacks encoder_layers_to_keep (saved before the field
    existed) is pruned by --model-overrides too (fairseq_fixes.py, repair 9)."""
    import torch
    from fairseq import checkpoint_utils

    from helpers import load

    state = load(models["ours"])
    for key in ("encoder_layers_to_keep", "decoder_layers_to_keep"):
        del state["cfg"]["model"][key]
    old = tmp_path / "old.pt"
    torch.save(state, old)
    overrides = {"encoder_layers_to_keep": "1"}
    models_, _ = checkpoint_utils.load_model_ensemble([str(old)], arg_overrides=overrides)
    assert len(models_[0].encoder.layers) == 1 and len(models_[0].decoder.layers) == 2


# fairseq's own breakage on this stack, repaired in fairseq_fixes.py (item 6) ------------------------


@pytest.mark.parametrize("which", ["builtin", "ours"])
def test_diverse_beam_groups(generated, which):
    out = generated[f"diverse_groups.{which}"]
    assert "FAILED" not in out, out[-2000:]
    assert len(hypotheses(out)) == 10 * 4


@pytest.mark.parametrize("which", ["builtin", "ours"])
def test_no_repeat_ngram_size(generated, which):
    """No hypothesis repeats a bigram with --no-repeat-ngram-size 2 (the toy models, 40 updates
    in, repeat digits freely without it)."""

    def repeats(output):
        texts = [h[2].split() for h in hypotheses(output)]
        assert len(texts) == 40
        return sum(len(t) - 1 - len(set(pairwise(t))) for t in texts)

    assert repeats(generated[f"nbest4.{which}"]) > 0
    assert repeats(generated[f"no_repeat.{which}"]) == 0


# features that work alike (item 7) ----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(FEATURES))
@pytest.mark.parametrize("which", ["builtin", "ours"])
def test_feature_works_alike(generated, name, which):
    """What each feature promises, checked the same way on fairseq's transformer and on ours."""
    out = generated[f"{name}.{which}"]
    assert "FAILED" not in out, out[-2000:]
    hyps, src, ref = lines(out, "H"), lines(out, "S"), lines(out, "T")
    n = 2 if FEATURES[name][0] == "interactive" else 10
    assert sorted(hyps) == list(range(n)), out[-2000:]
    per = {"nbest": 3, "diversity_rate": 2}.get(name, 1)
    assert all(len(h) == per for h in hyps.values())
    if name == "batch1":  # batch-size independence
        beam = lines(generated[f"beam.{which}"], "H")
        assert {i: [x[1] for x in h] for i, h in hyps.items()} == {i: [x[1] for x in h] for i, h in beam.items()}
        assert all(abs(float(hyps[i][0][0]) - float(beam[i][0][0])) < 1e-4 for i in hyps)
    if name == "prefix":  # the reference's first token forced
        assert all(h[0][1].split()[0] == ref[i][0][0].split()[0] for i, h in hyps.items())
    if name == "match_source_len":  # as many tokens as the source with its </s>
        assert all(len(h[0][1].split()) == len(src[i][0][0].split()) + 1 for i, h in hyps.items())
    if name == "alignment":  # one source-target pair per hypothesis token
        alignments = lines(out, "A")
        assert sorted(alignments) == sorted(hyps)
        assert all(len(a[0][0].split()) == len(hyps[i][0][1].split()) for i, a in alignments.items())
    if name == "score_reference":
        assert all(h[0][1] == ref[i][0][0] for i, h in hyps.items())
    if name.startswith("constraints"):  # each hypothesis holds its constraint's tokens
        wanted = {0: "4 3", 1: "6"}
        assert all(wanted[i] in h[0][1] for i, h in hyps.items()), hyps


@pytest.mark.parametrize("which", ["builtin", "ours"])
def test_training_features_and_validate(models, tmp_path, which):
    """--eval-bleu with the best checkpoint chosen by BLEU, --keep-best-checkpoints,
    --patience, --store-ema and --validate-interval-updates in one short run; then
    fairseq-validate on what it saved."""
    from helpers import load

    arch = ["--arch", "transformer"] if which == "builtin" else OURS
    save = tmp_path / "ckpt"
    proc = run(
        BIN / "fairseq-train",
        models["data"],
        *arch,
        *BUILTIN_ARCH,
        *OPTIM,
        "--max-update",
        6,
        "--save-dir",
        save,
        "--eval-bleu",
        "--eval-bleu-args",
        '{"beam": 1, "max_len_b": 10}',
        "--best-checkpoint-metric",
        "bleu",
        "--maximize-best-checkpoint-metric",
        "--keep-best-checkpoints",
        2,
        "--patience",
        5,
        "--store-ema",
        "--ema-decay",
        0.9,
        "--validate-interval-updates",
        3,
        "--save-interval-updates",
        3,
        "--no-epoch-checkpoints",
    )
    log = proc.stdout + proc.stderr
    assert len(re.findall(r"valid on 'valid' subset.*\bbleu \d", log)) == 2, log[-2000:]  # updates 3 and 6
    best = list(save.glob("checkpoint.best_bleu_*.pt"))  # named by BLEU: two validations may tie
    assert (save / "checkpoint_best.pt").is_file() and 1 <= len(best) <= 2
    assert "ema" in load(save / "checkpoint_last.pt")["extra_state"]
    valid = run(
        BIN / "fairseq-validate",
        models["data"],
        "--task",
        "translation",
        "--user-dir",
        PLUGIN,
        "--path",
        save / "checkpoint_best.pt",
        "--cpu",
        "--batch-size",
        16,
    )
    assert re.search(r"valid on 'valid' subset \| loss \d", valid.stdout + valid.stderr)


@pytest.mark.parametrize("which", ["builtin", "ours"])
def test_from_pretrained_translate(models, which):
    """fairseq's hub interface: Model.from_pretrained(...).translate()."""
    from fairseq.models.transformer import TransformerModel

    from attn_only_plugin.models.transformer import AttnOnlyTransformer

    cls = TransformerModel if which == "builtin" else AttnOnlyTransformer
    hub = cls.from_pretrained(
        str(models[which].parent), checkpoint_file=models[which].name, data_name_or_path=str(models["data"])
    )
    out = hub.translate(["1 2 3 4", "5 6 7"], beam=2)
    assert len(out) == 2 and all(isinstance(t, str) and t for t in out)
