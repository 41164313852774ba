"""The transformers export computes our model's function (attn_only_plugin/export/transformers.py):
MarianMTModel's log-probabilities, loaded back from the exported folder, equal ours to 1e-4 for
every variant it accepts (random weights, then a checkpoint of each architecture, an averaged one
among them); on a trained model, greedy and beam-4 generate() with the folder's own config give
fairseq-generate's hypotheses, and a raw string through AutoTokenizer + generate() gives our
translate()'s; what Marian cannot compute is refused in one line."""

import os
import re
import sys
from pathlib import Path

import pytest
import torch

from attn_only_tools import generate_log

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported: nothing is fetched, ever
import attn_only_plugin  # noqa: E402
from attn_only_plugin.models.transformer import full_config  # noqa: E402
from attn_only_tools.guards.errors import PluginError  # noqa: E402
from helpers import BIN, PLUGIN, build_model, make_dictionary, run, tool, toy_data, train_args  # noqa: E402

transformers = pytest.importorskip("transformers")
from attn_only_plugin.export import TRANSFORMERS_VERSION  # noqa: E402
from attn_only_plugin.export.marian_weights import marian_order  # noqa: E402
from attn_only_plugin.export.transformers import build_model as build_marian  # noqa: E402
from attn_only_plugin.export.transformers import check_expressible  # noqa: E402

TOLERANCE = 1e-4


def load_folder(folder):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder)), AutoModelForSeq2SeqLM.from_pretrained(str(folder)).eval()


def random_pairs(src_dict, tgt_dict, n: int, seed: int):
    """n (source, target) id lists of 2 to 9 non-special symbols, each ending with </s>."""
    g = torch.Generator().manual_seed(seed)

    def draw(d):
        n = int(torch.randint(2, 10, (1,), generator=g))
        return [int(i) for i in torch.randint(d.nspecial, len(d), (n,), generator=g)] + [d.eos()]

    return [(draw(src_dict), draw(tgt_dict)) for _ in range(n)]


def largest_difference(hf, model, src_dict, tgt_dict, seed=0) -> float:
    """max |log P_Marian - log P_ours| over the tokens of random pairs of different lengths, which
    Marian reads as one right-padded batch (fairseq: each alone, the decoder input </s> + target)."""
    pairs = random_pairs(src_dict, tgt_dict, 5, seed)
    S, T = max(len(s) for s, _ in pairs), max(len(t) for _, t in pairs)
    src = torch.full((len(pairs), S), src_dict.pad())  # (B, S)
    prev = torch.full((len(pairs), T), tgt_dict.pad())  # (B, T)
    for i, (s, t) in enumerate(pairs):
        src[i, : len(s)] = torch.tensor(s)
        prev[i, : len(t)] = torch.tensor([tgt_dict.eos()] + t[:-1])
    with torch.no_grad():
        theirs = hf(input_ids=src, attention_mask=src.ne(src_dict.pad()), decoder_input_ids=prev).logits.log_softmax(-1)
    worst = 0.0
    for i, (s, t) in enumerate(pairs):
        with torch.no_grad():
            ours = (
                model(torch.tensor([s]), torch.tensor([len(s)]), prev[i : i + 1, : len(t)])[0].float().log_softmax(-1)
            )
        worst = max(worst, (ours[0] - theirs[i, : len(t)]).abs().max().item())  # (T, |V|) every entry
    return worst


def test_the_permutation_puts_our_sinusoids_in_marians_order():
    """Section 3.5 interleaved (ours) and Marian's [sin | cos] are one table up to marian_order."""
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    from attn_only_plugin.modules.embedding import sinusoid_table

    assert marian_order(6).tolist() == [0, 2, 4, 1, 3, 5]
    for d_model in (6, 32, 7):
        theirs = MarianSinusoidalPositionalEmbedding(50, d_model).create_weight()  # (P, d_model)
        assert torch.allclose(sinusoid_table(50, d_model)[:, marian_order(d_model)], theirs, atol=1e-6)
        assert not torch.allclose(sinusoid_table(50, d_model), theirs, atol=1e-2)  # unpermuted: another function


VARIANTS = {
    "base shape (shared all)": {},
    "N = 1 + 3": dict(encoder_layers=1, decoder_layers=3),
    "N = 2 + 1, d_ff 48": dict(encoder_layers=2, decoder_layers=1, d_ff=48),
    "sharing decoder": dict(embedding_sharing="decoder"),
    "sharing none": dict(embedding_sharing="none"),
    "d_k < d_v < d_model/h": dict(d_k=5, d_v=7),
    "d_k = d_v < d_model/h, h 2": dict(heads=2, d_k=6, d_v=6),
    "attention and ReLU dropout (inactive at inference)": dict(attention_dropout=0.2, relu_dropout=0.1),
}


@pytest.mark.parametrize("overrides", list(VARIANTS.values()), ids=list(VARIANTS))
def test_saved_folder_gives_our_log_probs(tmp_path, overrides):
    from transformers import AutoModelForSeq2SeqLM

    src_dict = make_dictionary(20)
    tgt_dict = src_dict if overrides.get("embedding_sharing", "all") == "all" else make_dictionary(27)
    model = build_model(src_dict, tgt_dict, **overrides)
    with torch.no_grad():  # LayerNorms and biases away from their initial 1 and 0, so that they count
        g = torch.Generator().manual_seed(1)
        for name, p in model.named_parameters():
            if "norm" in name or "bias" in name:
                p.add_(0.3 * torch.randn(p.shape, generator=g))
    build_marian(full_config(model.cfg), model.state_dict(), src_dict, tgt_dict).save_pretrained(str(tmp_path))
    hf = AutoModelForSeq2SeqLM.from_pretrained(str(tmp_path)).eval()
    assert type(hf).__name__ == "MarianMTModel"
    assert largest_difference(hf, model, src_dict, tgt_dict) < TOLERANCE
    tied = hf.lm_head.weight.data_ptr() == hf.model.decoder.embed_tokens.weight.data_ptr()
    assert tied == (overrides.get("embedding_sharing", "all") != "none")  # section 3.4's sharing, as trained


REFUSED = [
    (dict(learned_pos=True), "--learned-pos: Marian has no learned position table"),
    (dict(pre_norm=True), "--pre-norm: Marian's layers are post-norm only"),
    (dict(attention_window=2), "--attention-window 2: Marian has no restricted self-attention"),
    (dict(relative_positions=3), "--relative-positions 3: Marian has no relative positions"),
    (dict(relative_positions=3, no_absolute_positions=True), "--relative-positions 3"),
    (dict(d_k=12), "--d-k 12: wider than Marian's heads, d_model/h = 8"),
    (dict(d_v=9), "--d-v 9: wider than Marian's heads, d_model/h = 8"),
]


@pytest.mark.parametrize("overrides, refused", REFUSED, ids=[r for _, r in REFUSED])
def test_what_marian_cannot_compute_is_refused_in_one_line(overrides, refused):
    d = make_dictionary(20)
    model = build_model(d, **overrides)
    with pytest.raises(
        PluginError,
        match=re.escape(refused) + r".*; MarianMTModel cannot compute it; export this "
        r"model with attn-only-export-ctranslate2$",
    ):
        build_marian(full_config(model.cfg), model.state_dict(), d, d)


def test_no_absolute_positions_and_the_parser_are_refused():
    cfg = full_config(build_model(make_dictionary(20)).cfg)
    cfg.no_absolute_positions = True
    with pytest.raises(PluginError, match="^--no-absolute-positions: Marian always adds its sinusoids"):
        check_expressible(cfg)
    with pytest.raises(PluginError, match="^--task constituency_parsing: MarianTokenizer reads sentencepiece pieces"):
        check_expressible(full_config(build_model(make_dictionary(20)).cfg), "constituency_parsing")


# Checkpoints that fairseq-train wrote, exported with the script --------------------------------


def spm_data(root: Path, n_train: int, n_test: int):
    """toy_data's digit reversal as raw text, segmented by a sentencepiece model trained on it
    (pieces ▁0 ... ▁9) and binarized with one joined dictionary: (data-bin, spm.model)."""
    toy_data(root, n_train=n_train, n_test=n_test)  # raw train/valid/test.{src,tgt} in root (its bin unused)
    spm_model = tool("spm_prepare").prepare(root, "src", "tgt", 22, root / "spm")
    run(
        BIN / "fairseq-preprocess",
        "--source-lang",
        "src",
        "--target-lang",
        "tgt",
        "--trainpref",
        root / "spm/train",
        "--validpref",
        root / "spm/valid",
        "--testpref",
        root / "spm/test",
        "--destdir",
        root / "spm-bin",
        "--joined-dictionary",
        "--workers",
        1,
    )
    return root / "spm-bin", spm_model


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return spm_data(tmp_path_factory.mktemp("spm"), n_train=40, n_test=5)


ARCHS = {  # (arch, fairseq-train flags beyond the tiny sizes of train_args, averaged)
    "transformer_base, averaged": ("transformer_base", [], True),
    "transformer_big": ("transformer_big", ["--heads", 8], False),  # d_k = d_v = 4
    "transformer_parse shape": ("transformer_parse", ["--d-ff", 48], False),  # its preset's dropouts, translation data
    "N = 1": ("transformer_base", ["--encoder-layers", 1, "--decoder-layers", 1], False),
}


@pytest.mark.parametrize("arch, flags, averaged", list(ARCHS.values()), ids=list(ARCHS))
def test_checkpoint_of_each_architecture_exports_exactly(tmp_path, data, arch, flags, averaged):
    bin_dir, spm_model = data
    args = train_args(bin_dir, tmp_path / "ckpt", 2, 0.1, "--save-interval-updates", 1, *flags)
    args[args.index("--arch") + 1] = arch
    run(BIN / "fairseq-train", *args)
    checkpoint = tmp_path / "ckpt" / "checkpoint_last.pt"
    if averaged:  # section 6.1's averaging
        checkpoint = tmp_path / "ckpt" / "checkpoint_avg.pt"
        tool("average_checkpoints").main(
            ["--inputs", str(tmp_path / "ckpt"), "--num-update-checkpoints", "2", "--output", str(checkpoint)]
        )
    tool("export_transformers").main(
        [str(checkpoint), "--data", str(bin_dir), "--spm-model", str(spm_model), "--out", str(tmp_path / "hf")]
    )
    hub = attn_only_plugin.load(checkpoint.parent, checkpoint.name, data=bin_dir).hub
    _, hf = load_folder(tmp_path / "hf")
    assert largest_difference(hf, hub.models[0], hub.src_dict, hub.tgt_dict) < TOLERANCE


# A trained model: decoding through generate() with the folder's own config --------------------


CAP = 3  # fairseq-generate --max-len-a 0 --max-len-b 3: 3 pieces at most, then </s>


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Digit reversal learned by a d_model 32 model on sentencepiece pieces (as test_ctranslate2.py's,
    400 updates), its export, and fairseq-generate's beam-4 and greedy pieces on 50 test sentences."""
    root = tmp_path_factory.mktemp("trained")
    bin_dir, spm_model = spm_data(root, n_train=1000, n_test=50)
    args = train_args(bin_dir, root / "ckpt", 400, 0.0, "--no-epoch-checkpoints", "--lr-multiplier", 0.5)
    args[args.index("--warmup-updates") + 1] = 100
    run(BIN / "fairseq-train", *args)
    checkpoint = root / "ckpt" / "checkpoint_last.pt"
    hyps = {}
    for name, beam, max_len_a, max_len_b in ((4, 4, 1, 50), (1, 1, 1, 50), ("capped", 1, 0, CAP)):
        gen = run(
            BIN / "fairseq-generate",
            bin_dir,
            "--user-dir",
            PLUGIN,
            "--path",
            checkpoint,
            "--gen-subset",
            "test",
            "--beam",
            beam,
            "--lenpen",
            0.6,
            "--max-len-a",
            max_len_a,
            "--max-len-b",
            max_len_b,
            "--batch-size",
            50,
            "--cpu",
        )
        hyps[name] = {i: s.hypothesis for i, s in generate_log.parse(gen.stdout.splitlines()).items()}
    tool("export_transformers").main(
        [
            str(checkpoint),
            "--data",
            str(bin_dir),
            "--spm-model",
            str(spm_model),
            "--out",
            str(root / "hf"),
            "--bleu",
            "BLEU = 80.0 (test)",
        ]
    )
    raw = (root / "test.src").read_text().splitlines()  # fairseq's ids follow the file's lines
    return root, checkpoint, bin_dir, spm_model, raw, hyps


def generated_pieces(tokenizer, model, sentences, max_len_a=1, max_len_b=50, **options):
    """generate() on one right-padded batch of raw strings, stopped where fairseq-generate
    --max-len-a A --max-len-b B stops (its cap, A S + B with S the batch's longest source with </s>:
    at most A S + B + 1 outputs with </s>); the output pieces without specials."""
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=max_len_a * batch["input_ids"].shape[1] + max_len_b + 1, **options)
    return [" ".join(tokenizer.convert_ids_to_tokens(ids, skip_special_tokens=True)) for ids in out.tolist()]


def test_generate_with_the_folders_config_gives_fairseq_generates_beam_4(trained):
    root, _, _, _, raw, hyps = trained
    tokenizer, model = load_folder(root / "hf")
    assert (model.generation_config.num_beams, model.generation_config.length_penalty) == (4, 0.6)
    ours = generated_pieces(tokenizer, model, raw)  # beam, length penalty, start, bans: the folder's own
    assert ours == [hyps[4][i] for i in range(len(raw))]  # all 50
    reference = [" ".join(reversed(p.split())) for p in (root / "spm" / "test.src").read_text().splitlines()]
    assert sum(o == r for o, r in zip(ours, reference, strict=False)) >= 25  # it did learn the task


def test_greedy_generate_gives_fairseq_generates_beam_1(trained):
    root, _, _, _, raw, hyps = trained
    tokenizer, model = load_folder(root / "hf")
    assert generated_pieces(tokenizer, model, raw, num_beams=1) == [hyps[1][i] for i in range(len(raw))]
    # At the cap fairseq forces </s>. Whether the model runs to the cap of S + 50 on its own depends
    # on its training (whose numerics change with the thread count), so a cap shorter than the
    # reversed sentences makes sure such hypotheses are compared.
    assert sum(len(hyps["capped"][i].split()) == CAP for i in range(len(raw))) >= 10
    capped = generated_pieces(tokenizer, model, raw, max_len_a=0, max_len_b=CAP, num_beams=1)
    assert capped == [hyps["capped"][i] for i in range(len(raw))]


def test_a_raw_string_through_autotokenizer_and_generate_is_our_translate(trained):
    """The call a transformers user makes, with no argument and no code of ours, gives translate()'s
    string; the tokenizer's ids are fairseq's, </s> appended, an unknown character <unk> on both sides."""
    root, checkpoint, bin_dir, spm_model, raw, _ = trained
    tokenizer, model = load_folder(root / "hf")
    mt = attn_only_plugin.load(checkpoint.parent, checkpoint.name, data=bin_dir, spm_model=spm_model)
    sentences = raw[:8] + ["7 1 x 3", "  2   5 9 "]
    for s in sentences:
        assert tokenizer(s)["input_ids"] == mt.hub.encode(s).tolist()
    assert tokenizer("1 x")["input_ids"][-3:] == [mt.hub.src_dict.unk(), mt.hub.src_dict.unk(), 2]  # ▁ x </s>
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    assert tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True) == mt.translate(sentences)
    single = tokenizer.decode(model.generate(**tokenizer(raw[0], return_tensors="pt"))[0], skip_special_tokens=True)
    assert single == mt.translate(raw[0])


def test_model_card(trained):
    card = (trained[0] / "hf" / "README.md").read_text()
    assert "Attention Is All You Need" in card and "arxiv.org/abs/1706.03762" in card
    assert "BLEU = 80.0 (test)" in card  # --bleu
    assert "--arch transformer_base" in card and "--d-model 32" in card and "--heads 4" in card
    assert "--d-k" not in card and "--embedding-sharing" not in card  # as the preset has them: not repeated
    assert "--max-update 400" in card and "--warmup-updates 100" in card and "--lr-multiplier 0.5" in card
    assert "# license:" in card  # left to the owner


# The script: files, --force, atomic writing, one-line refusals ----------------------------------


def random_checkpoint(root: Path, bin_dir: Path, **overrides) -> Path:
    """A checkpoint of ours as fairseq-train lays it out, random weights on bin_dir's dictionary."""
    import dataclasses

    from fairseq.data import Dictionary

    d = Dictionary.load(str(bin_dir / "dict.src.txt"))
    model = build_model(d, max_source_positions=16, max_target_positions=16, **overrides)
    cfg = dict(dataclasses.asdict(model.cfg), _name="transformer_base")
    path = root / f"checkpoint{len(list(root.glob('checkpoint*.pt')))}.pt"
    torch.save(
        {
            "model": model.state_dict(),
            "args": None,
            "cfg": {"model": cfg, "task": {"_name": "translation", "source_lang": "src", "target_lang": "tgt"}},
        },
        path,
    )
    return path


def export(checkpoint, bin_dir, spm_model, out, *flags):
    return tool("export_transformers").main(
        [str(checkpoint), "--data", str(bin_dir), "--spm-model", str(spm_model), "--out", str(out), *flags]
    )


def leftovers(folder: Path) -> list:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith((".tmp", ".old")))


def test_the_folder_holds_safetensors_no_pickle(tmp_path, data):
    bin_dir, spm_model = data
    export(random_checkpoint(tmp_path, bin_dir), bin_dir, spm_model, tmp_path / "hf")
    names = {p.name for p in (tmp_path / "hf").iterdir()}
    assert names == {
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "README.md",
        "source.spm",
        "target.spm",
        "vocab.json",
        "tokenizer_config.json",
        ".export-manifest.json",  # what --force may replace
    }
    from safetensors.torch import load_file

    weights = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert "model.shared.weight" in weights and not any("embed_positions" in k for k in weights)
    mask = os.umask(0)
    os.umask(mask)
    assert {p.stat().st_mode & 0o777 for p in (tmp_path / "hf").iterdir()} == {0o666 & ~mask}  # as open() makes them


def test_force_replaces_only_what_the_export_wrote(tmp_path, data):
    """--force replaced a folder it judged "an earlier export" by two file names, the user's other files
    in it included (a notes.txt was lost). Now a folder is replaced only when the list the export wrote
    into it names every file there: one with a file added, or without the list, is refused in one line
    before the checkpoint is read, every file left as it was. An export made before the list existed is
    judged by the names an export writes."""
    from helpers import snapshot

    bin_dir, spm_model = data
    ckpt, out = random_checkpoint(tmp_path, bin_dir), tmp_path / "hf"
    export(ckpt, bin_dir, spm_model, out)
    (out / "notes.txt").write_text("mine")
    before = snapshot(out)
    problem = (
        f"^--out {re.escape(str(out))} holds files the export did not write \\(notes.txt\\), which --force would delete"
    )
    with pytest.raises(PluginError, match=problem):
        export(ckpt, bin_dir, spm_model, out, "--force")
    assert snapshot(out) == before and leftovers(tmp_path) == []
    (out / ".export-manifest.json").unlink()  # an export made before the list existed: its names decide
    with pytest.raises(PluginError, match=problem):
        export(ckpt, bin_dir, spm_model, out, "--force")
    assert snapshot(out) == {k: v for k, v in before.items() if k != ".export-manifest.json"}
    (out / "notes.txt").unlink()
    export(ckpt, bin_dir, spm_model, out, "--force")  # the old export alone: replaced, now with its list
    assert (out / ".export-manifest.json").is_file() and leftovers(tmp_path) == []
    again = tmp_path / "again"
    export(ckpt, bin_dir, spm_model, again)
    export(random_checkpoint(tmp_path, bin_dir, d_ff=48), bin_dir, spm_model, again, "--force")  # an export's own
    assert load_folder(again)[1].config.encoder_ffn_dim == 48 and leftovers(tmp_path) == []


def test_what_a_killed_export_left_is_removed_by_the_next(tmp_path, data):
    """kill -9 during an export left its hidden temporary folder beside --out, and no rerun removed it.
    The next export into the same --out removes those of processes that no longer run (never a running
    export's, nor anything else beside it)."""
    import subprocess
    import sys

    bin_dir, spm_model = data
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)  # a process that has ended
    left = [tmp_path / f".hf.{pid}.k9x2ab.tmp", tmp_path / f".hf.{pid}.k9x2ab.tmp.old"]
    running = tmp_path / f".hf.{os.getpid()}.live01.tmp"  # this process: still running
    for folder in [*left, running, tmp_path / ".other.tmp"]:
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"half")
    export(random_checkpoint(tmp_path, bin_dir), bin_dir, spm_model, tmp_path / "hf")
    assert not any(p.exists() for p in left) and running.is_dir() and (tmp_path / ".other.tmp").is_dir()
    assert load_folder(tmp_path / "hf")[1] is not None


def test_out_is_refused_when_it_exists_replaced_with_force_and_never_half_written(tmp_path, data, monkeypatch):
    bin_dir, spm_model = data
    ckpt, out = random_checkpoint(tmp_path, bin_dir), tmp_path / "hf"
    export(ckpt, bin_dir, spm_model, out)
    before = (out / "model.safetensors").read_bytes()
    with pytest.raises(PluginError, match=f"^--out {re.escape(str(out))} already exists: pass --force to replace it"):
        export(random_checkpoint(tmp_path, bin_dir, d_ff=48), bin_dir, spm_model, out)
    assert (out / "model.safetensors").read_bytes() == before

    def save_half(self, folder, **kwargs):
        (Path(folder) / "model.safetensors").write_bytes(b"half")
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(transformers.MarianMTModel, "save_pretrained", save_half)
        for target, flags in ((tmp_path / "new", []), (out, ["--force"])):
            with pytest.raises(OSError, match="No space left"):
                export(ckpt, bin_dir, spm_model, target, *flags)
    assert not (tmp_path / "new").exists() and leftovers(tmp_path) == []
    assert (out / "model.safetensors").read_bytes() == before  # --force replaces only once complete
    export(random_checkpoint(tmp_path, bin_dir, d_ff=48), bin_dir, spm_model, out, "--force")
    assert (out / "model.safetensors").read_bytes() != before and leftovers(tmp_path) == []
    assert load_folder(out)[1].config.encoder_ffn_dim == 48


def run_script(*args, prelude=""):
    import subprocess

    code = (
        f"{prelude}\nimport runpy, sys\nsys.argv = {['export_transformers'] + [str(a) for a in args]!r}\n"
        f"runpy.run_module('attn_only_plugin.cli.export_transformers', run_name='__main__')"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONWARNINGS="ignore", HF_HUB_OFFLINE="1"),
    )


def one_line_error(proc, text):
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith("INFO:")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], proc.stderr[-2000:]


def test_refusals_are_one_line_and_write_nothing(tmp_path, data):
    bin_dir, spm_model = data
    out = tmp_path / "out"
    ckpt = random_checkpoint(tmp_path, bin_dir, learned_pos=True)
    one_line_error(
        run_script(ckpt, "--data", bin_dir, "--spm-model", spm_model, "--out", out),
        "--learned-pos: Marian has no learned position table",
    )
    ckpt = random_checkpoint(tmp_path, bin_dir)
    one_line_error(
        run_script(ckpt, "--data", bin_dir, "--spm-model", tmp_path / "no.model", "--out", out),
        f"no sentencepiece model at {tmp_path / 'no.model'}: give --spm-model the spm.model",
    )
    one_line_error(
        run_script(
            ckpt,
            "--data",
            bin_dir,
            "--spm-model",
            spm_model,
            "--out",
            out,
            prelude="import sys; sys.modules['transformers'] = None  # as if not installed",
        ),
        "transformers is not installed: run `bash scripts/install.sh` (or pip install "
        f"transformers=={TRANSFORMERS_VERSION})",
    )
    assert not out.exists() and leftovers(tmp_path) == []
