"""The CTranslate2 export computes our model's function (attn_only_plugin/export/ctranslate2.py):
CTranslate2's score_batch log-probabilities equal ours to 1e-4 for every variant (random weights,
then a checkpoint of each architecture, an averaged one among them); on a trained model,
load_ctranslate2's beam-4 hypotheses are fairseq-generate's for every test sentence; an int8
export loads and translates."""

import re
from pathlib import Path

import pytest
import torch

import attn_only_plugin  # noqa: E402
from attn_only_plugin.models.transformer import full_config  # noqa: E402
from attn_only_tools import generate_log
from attn_only_tools.guards.errors import PluginError  # noqa: E402
from helpers import BIN, PLUGIN, build_model, make_dictionary, run, tool, toy_data, train_args  # noqa: E402

ctranslate2 = pytest.importorskip("ctranslate2")
from attn_only_plugin.export.ctranslate2 import build_spec, export, model_info, save_spec  # noqa: E402

TOLERANCE = 1e-4


def our_log_probs(model, src_dict, tgt_dict, source, target) -> torch.Tensor:
    """log P(y_t | y_<t, x) of each target token and the final </s>: fairseq's source ends with
    </s>, its decoder input starts with </s>."""
    src = torch.tensor([[src_dict.index(w) for w in source] + [src_dict.eos()]])  # (1, S)
    tgt = [tgt_dict.index(w) for w in target] + [tgt_dict.eos()]
    prev = torch.tensor([[tgt_dict.eos()] + tgt[:-1]])  # (1, T)
    with torch.no_grad():
        logits, _ = model(src, torch.tensor([src.size(1)]), prev)  # (1, T, |V|)
    return logits.float().log_softmax(-1)[0, torch.arange(len(tgt)), torch.tensor(tgt)]  # (T,)


def sentences(dictionary, n: int, seed: int):
    """n random token sequences of 2 to 9 of the dictionary's own (non-special) symbols."""
    g = torch.Generator().manual_seed(seed)
    words = [s for s in dictionary.symbols[dictionary.nspecial :] if not s.startswith("madeupword")]
    return [
        [words[i] for i in torch.randint(len(words), (int(torch.randint(2, 10, (1,), generator=g)),), generator=g)]
        for _ in range(n)
    ]


def largest_difference(model_dir, model, src_dict, tgt_dict, seed=0) -> float:
    """max |CTranslate2's score_batch log-probability - ours| over a batch of random pairs of
    different lengths (CTranslate2 pads them in one batch)."""
    sources, targets = sentences(src_dict, 5, seed), sentences(tgt_dict, 5, seed + 1)
    translator = ctranslate2.Translator(str(model_dir), device="cpu", compute_type="float32")
    results = translator.score_batch(sources, targets)
    worst = 0.0
    for source, target, result in zip(sources, targets, results, strict=True):
        ours = our_log_probs(model, src_dict, tgt_dict, source, target)
        assert len(result.log_probs) == len(ours)  # the target's tokens and </s>
        worst = max(worst, (ours - torch.tensor(result.log_probs)).abs().max().item())
    return worst


VARIANTS = {
    "post-norm, sinusoids, shared all": {},
    "pre-norm": dict(pre_norm=True),
    "learned positions": dict(learned_pos=True),
    "sharing decoder": dict(embedding_sharing="decoder"),
    "sharing none": dict(embedding_sharing="none", learned_pos=True, pre_norm=True),
    "N = 1 + 3": dict(encoder_layers=1, decoder_layers=3),
    "d_k < d_v": dict(d_k=6, d_v=10),
    "d_k > d_v": dict(d_k=12, d_v=5),
    "h d_k != d_model": dict(d_model=30, heads=4, d_k=9, d_v=9),
    "relative positions K=3, no sinusoids": dict(relative_positions=3, no_absolute_positions=True),
    "relative positions, d_k < d_v, pre-norm": dict(
        relative_positions=2, no_absolute_positions=True, d_k=6, d_v=10, pre_norm=True
    ),
}


@pytest.mark.parametrize("overrides", list(VARIANTS.values()), ids=list(VARIANTS))
def test_score_batch_equals_our_log_probs(tmp_path, overrides):
    src_dict = make_dictionary(20)
    tgt_dict = src_dict if overrides.get("embedding_sharing", "all") == "all" else make_dictionary(27)
    model = build_model(src_dict, tgt_dict, **overrides)
    with torch.no_grad():  # LayerNorms and biases away from their initial 1 and 0, so that they count
        g = torch.Generator().manual_seed(1)
        for name, p in model.named_parameters():
            if "norm" in name or "bias" in name:
                p.add_(0.3 * torch.randn(p.shape, generator=g))
    cfg = full_config(model.cfg)
    save_spec(build_spec(cfg, model.state_dict(), src_dict, tgt_dict), tmp_path / "ct2", info=model_info(cfg))
    assert largest_difference(tmp_path / "ct2", model, src_dict, tgt_dict) < TOLERANCE


@pytest.mark.parametrize(
    "overrides, refused",
    [
        (dict(attention_window=2), "--attention-window 2 (restricted self-attention) has no equivalent"),
        (dict(relative_positions=3), "--relative-positions 3 with the sinusoids"),
    ],
    ids=["window", "relative with sinusoids"],
)
def test_what_ctranslate2_cannot_compute_is_refused_in_one_line(overrides, refused):
    d = make_dictionary(20)
    model = build_model(d, **overrides)
    with pytest.raises(PluginError, match=re.escape(refused)):
        build_spec(full_config(model.cfg), model.state_dict(), d, d)


def test_the_position_table_is_what_makes_it_exact(tmp_path):
    """Left unset, CTranslate2 generates its own sinusoids ([sin | cos]): another function."""
    d = make_dictionary(20)
    model = build_model(d)
    spec = build_spec(full_config(model.cfg), model.state_dict(), d, d)
    for side in (spec.encoder, spec.decoder):
        side.position_encodings.encodings = "__optional"  # ctranslate2.specs.model_spec.OPTIONAL
    save_spec(spec, tmp_path / "ct2")
    assert largest_difference(tmp_path / "ct2", model, d, d) > 0.01


ARCHS = {  # fairseq-train flags beyond the tiny sizes; parse: its own task and two dictionaries
    "transformer_base": [],
    "transformer_big": ["--learned-pos", "--pre-norm"],
    "transformer_parse": [
        "--task",
        "constituency_parsing",
        "--source-lang",
        "words",
        "--target-lang",
        "tree",
        "--embedding-sharing",
        "decoder",
        "--max-target-positions",
        96,
    ],
}


def _parse_like_data(root: Path) -> Path:
    """Words -> bracketed sequences, two dictionaries (as examples/wsj_parsing.sh prepares them)."""
    rows = [[f"w{(i * 7 + j) % 11}" for j in range(2 + i % 5)] for i in range(60)]
    for split in ("train", "valid"):
        (root / f"{split}.words").write_text("".join(" ".join(r) + "\n" for r in rows))
        (root / f"{split}.tree").write_text("".join("(S " + " ".join("XX" for _ in r) + " )S\n" for r in rows))
    run(
        BIN / "fairseq-preprocess",
        "--source-lang",
        "words",
        "--target-lang",
        "tree",
        "--trainpref",
        root / "train",
        "--validpref",
        root / "valid",
        "--destdir",
        root / "bin",
        "--workers",
        1,
    )
    return root / "bin"


@pytest.mark.parametrize("arch", list(ARCHS))
def test_checkpoint_of_each_architecture_exports_exactly(tmp_path, arch):
    data = _parse_like_data(tmp_path) if arch == "transformer_parse" else toy_data(tmp_path, n_train=40)
    args = train_args(data, tmp_path / "ckpt", 2, 0.1, "--save-interval-updates", 1, *ARCHS[arch])
    args[args.index("--arch") + 1] = arch
    run(BIN / "fairseq-train", *args)
    checkpoint = tmp_path / "ckpt" / "checkpoint_last.pt"
    if arch == "transformer_base":  # an averaged checkpoint (section 6.1) exports as well
        checkpoint = tmp_path / "ckpt" / "checkpoint_avg.pt"
        tool("average_checkpoints").main(
            ["--inputs", str(tmp_path / "ckpt"), "--num-update-checkpoints", "2", "--output", str(checkpoint)]
        )
    tool("export_ctranslate2").main([str(checkpoint), "--data", str(data), "--out", str(tmp_path / "ct2")])
    hub = attn_only_plugin.load(checkpoint.parent, checkpoint.name, data=data).hub
    model = hub.models[0]
    assert model.cfg.embedding_sharing == ("decoder" if arch == "transformer_parse" else "all")
    assert largest_difference(tmp_path / "ct2", model, hub.src_dict, hub.tgt_dict) < TOLERANCE


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Digit reversal learned by a d_model 32 model (about 80 BLEU after 400 updates, ~10 s), its
    float32 and int8 exports and fairseq-generate's beam-4 output on 50 test sentences."""
    root = tmp_path_factory.mktemp("trained")
    data = toy_data(root, n_train=1000, n_test=50)
    args = train_args(data, root / "ckpt", 400, 0.0, "--no-epoch-checkpoints", "--lr-multiplier", 0.5)
    args[args.index("--warmup-updates") + 1] = 100
    run(BIN / "fairseq-train", *args)
    checkpoint = root / "ckpt" / "checkpoint_last.pt"
    gen = run(
        BIN / "fairseq-generate",
        data,
        "--user-dir",
        PLUGIN,
        "--path",
        checkpoint,
        "--gen-subset",
        "test",
        "--beam",
        4,
        "--lenpen",
        0.6,
        "--max-len-a",
        1,
        "--max-len-b",
        50,
        "--batch-size",
        50,
        "--cpu",
    )
    export(checkpoint, data, root / "ct2")
    export(checkpoint, data, root / "ct2-int8", quantization="int8")

    sentences = generate_log.parse(gen.stdout.splitlines())
    return root, {i: s.source for i, s in sentences.items()}, {i: s.hypothesis for i, s in sentences.items()}


def test_trained_model_gives_fairseq_generates_hypotheses(trained):
    root, sources, hypotheses = trained
    ids = sorted(sources)
    assert len(ids) == 50
    cap = max(len(sources[i].split()) for i in ids) + 1 + 50  # fairseq's: max_len_a S + max_len_b
    assert all(len(hypotheses[i].split()) < cap for i in ids)  # none cut at the cap, where the two differ
    mt = attn_only_plugin.load_ctranslate2(root / "ct2", compute_type="float32")
    ours = mt.translate([sources[i] for i in ids], beam=4, lenpen=0.6, batch_size=50)
    assert ours == [hypotheses[i] for i in ids]
    reference = [" ".join(reversed(sources[i].split())) for i in ids]
    assert sum(o == r for o, r in zip(ours, reference, strict=True)) >= 25  # it did learn the task


def test_int8_export_loads_and_translates(trained):
    root, sources, hypotheses = trained
    ids = sorted(sources)
    mt = attn_only_plugin.load_ctranslate2(root / "ct2-int8")
    assert mt.info["quantization"] == "int8"
    ours = mt.translate([sources[i] for i in ids])
    # close to float32's, not exact: int8 moves this barely trained d_model 32 model's scores enough to
    # change about a third of the hypotheses (docs/development.md, "Measurements behind test
    # thresholds"), so the test asks for most hypotheses kept and most of
    # what float32 got right still right; a broken quantization (wrong scales, transposed weights)
    # scores near 0 on both
    reference = [" ".join(reversed(sources[i].split())) for i in ids]
    float32 = attn_only_plugin.load_ctranslate2(root / "ct2", compute_type="float32").translate(
        [sources[i] for i in ids]
    )
    right = lambda outputs: sum(o == r for o, r in zip(outputs, reference, strict=True))  # noqa: E731
    assert sum(o == hypotheses[i] for o, i in zip(ours, ids, strict=True)) >= 30  # of 50
    assert right(ours) >= right(float32) - 8 and right(float32) >= 25


def test_export_leaves_the_models_weights_alone(tmp_path):
    """The spec's int8 quantization rewrites its arrays in place: they must be copies."""
    d = make_dictionary(20)
    model = build_model(d)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = full_config(model.cfg)
    save_spec(build_spec(cfg, model.state_dict(), d, d), tmp_path / "ct2", "int8", info=model_info(cfg))
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
