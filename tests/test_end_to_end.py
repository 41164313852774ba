"""The real fairseq CLIs with --user-dir attn_only_plugin on a tiny synthetic task (reverse a
string of digits): preprocess -> train (each architecture, shrunk by flags) -> generate
--beam 4 --lenpen 0.6 -> interactive -> resume; one run learns the task to >= 90% exact match;
bad input gives one-line errors."""

import pytest
import torch

from attn_only_tools import generate_log
from helpers import PLUGIN, ROOT, TINY, one_line_error, preprocess, reversal_data, run, train, write_reversal


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("reverse")
    reversal_data(root, 4000)
    return root


@pytest.mark.parametrize("arch", ["transformer_base", "transformer_big", "transformer_parse"])
def test_each_architecture_trains_and_generates(data, tmp_path, arch):
    train(data / "bin", tmp_path, "--arch", arch, *TINY, "--warmup-updates", 10)
    assert (tmp_path / "checkpoint_last.pt").exists()
    gen = run(
        "fairseq-generate",
        data / "bin",
        "--user-dir",
        PLUGIN,
        "--path",
        tmp_path / "checkpoint_last.pt",
        "--beam",
        4,
        "--lenpen",
        0.6,
        "--batch-size",
        50,
        "--cpu",
        "--max-len-a",
        1,
        "--max-len-b",
        50,
    )
    assert sum(line.startswith("H-") for line in gen.stdout.splitlines()) == 100


def test_learns_interactive_and_resume(data, tmp_path):
    """The whole loop really learns: >= 90% of reversed strings exactly right.

    Eq. (3) at d_model=64 peaks at 64^-0.5 * 150^-0.5 = 0.010, high enough that this tiny model's
    training spikes (exact match 100% at update 600, 57% at 800, 100% at 1000); at half that rate
    (--lr-multiplier 0.5) it climbs steadily (98-100% from update 600 on). On one thread, as run() runs
    it: the trajectory depends on the thread count (docs/development.md, "Measurements behind test
    thresholds")."""
    save = tmp_path / "ckpt"
    args = [
        "--arch",
        "transformer_base",
        "--encoder-layers",
        2,
        "--decoder-layers",
        2,
        "--d-model",
        64,
        "--d-ff",
        256,
        "--heads",
        4,
        "--dropout",
        0.0,
        "--warmup-updates",
        150,
        "--lr-multiplier",
        0.5,
        "--no-epoch-checkpoints",
    ]
    train(data / "bin", save, *args, max_update=400)
    resumed = train(data / "bin", save, *args, max_update=800)  # resume from checkpoint_last.pt
    log = resumed.stdout + resumed.stderr
    assert "Loaded checkpoint" in log and "@ 400 updates" in log, log[-2000:]
    assert "num_updates 800" in log or "num_updates=800" in log

    def generate(*extra):  # the test split, 100 sentences in one batch, beam 4
        return run(
            "fairseq-generate",
            data / "bin",
            "--user-dir",
            PLUGIN,
            "--path",
            save / "checkpoint_last.pt",
            "--beam",
            4,
            "--batch-size",
            100,
            "--cpu",
            *extra,
        )

    gen = generate("--lenpen", 0.6)
    sentences = generate_log.parse(gen.stdout.splitlines())
    hyps = {i: s.hypothesis for i, s in sentences.items()}
    exact = sum(s.hypothesis == s.target for s in sentences.values()) / len(sentences)
    print(f"exact match after 800 updates: {exact:.1%}")
    assert exact >= 0.9
    half = generate("--lenpen", 0.6, "--fp16")  # the model in float16
    half_hyps = {i: s.hypothesis for i, s in generate_log.parse(half.stdout.splitlines()).items()}
    same = sum(half_hyps[i] == hyps[i] for i in hyps) / len(hyps)
    print(f"--fp16: {same:.0%} of hypotheses as in float32")
    assert same >= 0.95
    import torch

    import attn_only_plugin  # noqa: F401  (safe loading of the checkpoint)

    state = torch.load(save / "checkpoint_last.pt", weights_only=True)  # paper_adam's defaults, no flags given
    group = state["last_optimizer_state"]["param_groups"][0]
    assert (group["betas"], group["eps"], group["weight_decay"], group["fused"]) == ((0.9, 0.98), 1e-9, 0.0, True)
    aligned = generate("--print-alignment")
    align = [line.split("\t")[1].split() for line in aligned.stdout.splitlines() if line.startswith("A-")]
    assert len(align) == 100
    anti = sum(a == [f"{len(a) - 1 - i}-{i}" for i in range(len(a))] for a in align)  # reversal
    assert anti >= 50, f"only {anti} of 100 alignments are the anti-diagonal"
    inter = run(
        "fairseq-interactive",
        data / "bin",
        "--user-dir",
        PLUGIN,
        "--path",
        save / "checkpoint_last.pt",
        "--source-lang",
        "src",
        "--target-lang",
        "tgt",
        "--beam",
        4,
        "--lenpen",
        0.6,
        "--cpu",
        stdin="1 2 3 4\n7 7 0 5 9\n",
    )
    outs = [s.hypothesis for s in generate_log.parse(inter.stdout.splitlines()).values()]
    assert outs == ["4 3 2 1", "9 5 0 7 7"]


def test_bad_input_one_line_errors(data, tmp_path):
    one_line_error(
        train(data / "bin", tmp_path / "a", "--arch", "transformer_base", *TINY[:-2], "--heads", 5, ok=False),
        "not divisible by h=5",
    )
    unknown = train(data / "bin", tmp_path / "b", "--arch", "transformer_huge", ok=False)
    assert unknown.returncode == 2 and "invalid choice: 'transformer_huge'" in unknown.stderr
    # a checkpoint of another shape in the save dir: refused, and left as it was
    train(data / "bin", tmp_path / "c", "--arch", "transformer_base", *TINY, max_update=2)
    before = (tmp_path / "c" / "checkpoint_last.pt").read_bytes()
    one_line_error(
        train(
            data / "bin",
            tmp_path / "c",
            "--arch",
            "transformer_base",
            *TINY[:6],
            "--d-model",
            64,
            max_update=4,
            ok=False,
        ),
        "checkpoint does not fit this model",
    )
    assert (tmp_path / "c" / "checkpoint_last.pt").read_bytes() == before


def test_input_longer_than_positions(data, tmp_path):
    """A test sentence longer than the model's positions: one line naming fairseq's skip flag."""
    train(
        data / "bin",
        tmp_path,
        "--arch",
        "transformer_base",
        *TINY,
        "--max-source-positions",
        6,
        "--max-target-positions",
        6,
        "--skip-invalid-size-inputs-valid-test",
        max_update=2,
    )
    gen = run(
        "fairseq-generate",
        data / "bin",
        "--user-dir",
        PLUGIN,
        "--path",
        tmp_path / "checkpoint_last.pt",
        "--beam",
        4,
        "--cpu",
        ok=False,
    )
    one_line_error(gen, "--skip-invalid-size-inputs-valid-test")
    skipped = run(
        "fairseq-generate",
        data / "bin",
        "--user-dir",
        PLUGIN,
        "--path",
        tmp_path / "checkpoint_last.pt",
        "--beam",
        4,
        "--cpu",
        "--skip-invalid-size-inputs-valid-test",
    )
    assert 0 < sum(line.startswith("H-") for line in skipped.stdout.splitlines()) < 100


def test_shared_embeddings_need_joined_dictionary(tmp_path):
    write_reversal(tmp_path, 200)
    for split in ("train", "valid", "test"):  # target side in letters: two different dictionaries
        tgt = tmp_path / f"{split}.tgt"
        tgt.write_text(tgt.read_text().translate(str.maketrans("0123456789", "abcdefghij")))
    preprocess(tmp_path, tmp_path / "bin", joined=False)
    proc = train(tmp_path / "bin", tmp_path / "ckpt", "--arch", "transformer_base", *TINY, ok=False)
    one_line_error(proc, "--joined-dictionary")
    train(
        tmp_path / "bin",
        tmp_path / "ckpt",
        "--arch",
        "transformer_base",
        *TINY,
        "--embedding-sharing",
        "decoder",
        max_update=2,
    )


@pytest.mark.parametrize(
    "variant",
    [[], ["model.attention_window=2", "model.relative_positions=3", "model.no_absolute_positions=true"]],
    ids=["paper", "variants"],
)
def test_hydra_yaml_config(data, tmp_path, variant):
    """The same model from fairseq-hydra-train and the commented YAML in examples/hydra; its
    restricted self-attention and relative positions fields (docs/attention_variants.md) too."""
    run(
        "fairseq-hydra-train",
        "--config-dir",
        ROOT / "examples" / "hydra",
        "--config-name",
        "transformer_base",
        f"task.data={data / 'bin'}",
        f"common.user_dir={PLUGIN}",
        "model.encoder_layers=1",
        "model.decoder_layers=1",
        "model.d_model=32",
        "model.d_ff=64",
        "model.heads=4",
        "optimization.max_update=3",
        f"checkpoint.save_dir={tmp_path}",
        "common.cpu=true",
        f"hydra.run.dir={tmp_path / 'hydra'}",
        *variant,
    )
    import torch

    import attn_only_plugin  # noqa: F401  (safe loading of the checkpoint)

    state = torch.load(tmp_path / "checkpoint_last.pt", weights_only=True)
    assert state["cfg"]["model"]["_name"] == "attn_only_transformer" and state["cfg"]["model"]["d_model"] == 32
    model = state["cfg"]["model"]
    assert (model["attention_window"], model["relative_positions"], model["no_absolute_positions"]) == (
        (2, 3, True) if variant else (None, None, False)
    )
    assert ("encoder.layers.0.self_attn.relative.a_k" in state["model"]) == bool(variant)
    assert state["model"]["encoder.embed.tokens.weight"].shape[1] == 32
    group = state["last_optimizer_state"]["param_groups"][0]  # section 5.3, from the YAML's paper_adam
    assert state["cfg"]["optimizer"]["_name"] == "paper_adam" and group["betas"] == (0.9, 0.98) and group["eps"] == 1e-9


@pytest.mark.parametrize(
    "flags",
    [["--attention-window", 2], ["--relative-positions", 2, "--no-absolute-positions"]],
    ids=["window", "relative"],
)
def test_attention_variants_through_the_clis(data, tmp_path, flags):
    """docs/attention_variants.md: fairseq-train, checkpoint averaging, fairseq-generate (beam 4),
    fairseq-interactive, the Python API and its attention weights; the fairseq converter refuses."""
    train(
        data / "bin",
        tmp_path,
        "--arch",
        "transformer_base",
        *TINY,
        "--warmup-updates",
        10,
        *flags,
        "--save-interval-updates",
        2,
        "--no-epoch-checkpoints",
        max_update=4,
    )
    run(
        "attn-only-average-checkpoints",
        "--inputs",
        tmp_path / "checkpoint_1_2.pt",
        tmp_path / "checkpoint_1_4.pt",
        "--output",
        tmp_path / "avg.pt",
    )
    gen = run(
        "fairseq-generate",
        data / "bin",
        "--user-dir",
        PLUGIN,
        "--path",
        tmp_path / "avg.pt",
        "--beam",
        4,
        "--lenpen",
        0.6,
        "--batch-size",
        50,
        "--cpu",
        "--max-len-a",
        1,
        "--max-len-b",
        10,
    )
    assert sum(line.startswith("H-") for line in gen.stdout.splitlines()) == 100
    inter = run(
        "fairseq-interactive",
        data / "bin",
        "--user-dir",
        PLUGIN,
        "--path",
        tmp_path / "avg.pt",
        "--beam",
        4,
        "--cpu",
        "--max-len-b",
        10,
        stdin="1 2 3 4 5 6\n",
    )
    assert sum(line.startswith("H-") for line in inter.stdout.splitlines()) == 1
    import attn_only_plugin

    mt = attn_only_plugin.load(tmp_path, checkpoint_file="avg.pt", data=data / "bin")
    att = mt.attention("1 2 3 4 5 6", target="6 5 4 3 2 1")  # 7 source and 7 target positions with </s>
    assert att["encoder"].shape[-2:] == (7, 7) and att["decoder"].shape[-2:] == (7, 7)
    if "--attention-window" in flags:  # R = 2: nothing beyond 2 positions, and the decoder's only backwards
        far = (torch.arange(7)[:, None] - torch.arange(7)[None, :]).abs() > 2
        assert torch.all(att["encoder"][..., far] == 0) and torch.all(att["decoder"][..., far] == 0)
    assert torch.all(att["decoder"].triu(diagonal=1) == 0)
    proc = run(
        "attn-only-convert-checkpoint",
        "--to",
        "fairseq",
        tmp_path / "avg.pt",
        tmp_path / "fs.pt",
        ok=False,
    )
    assert proc.returncode == 1 and not (tmp_path / "fs.pt").exists()
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: this model uses " + flags[0]) and "does not convert" in last


def test_python_api_translates(data, tmp_path):
    train(data / "bin", tmp_path, "--arch", "transformer_base", *TINY, "--warmup-updates", 10, max_update=5)
    import attn_only_plugin
    from attn_only_tools.guards.errors import PluginError

    mt = attn_only_plugin.load(tmp_path, data=data / "bin")
    out = mt.translate(["1 2 3", "4 5"], beam=4)
    assert isinstance(out, list) and len(out) == 2 and all(isinstance(s, str) for s in out)
    assert isinstance(mt.translate("7 8 9"), str)
    with pytest.raises(PluginError, match="empty or whitespace"):
        mt.translate(["1 2", "   "])
    with pytest.raises(PluginError, match="no checkpoint"):
        attn_only_plugin.load(tmp_path, checkpoint_file="missing.pt")
