"""fairseq's transformer's flag names as aliases of ours (models/fairseq_names.py):
parsed by fairseq's own option parser as fairseq-train parses them."""

from types import SimpleNamespace

import pytest

from attn_only_tools.guards.errors import PluginError
from helpers import make_dictionary

# a tiny fairseq translation-example command in the built-in's names
FAIRSEQ_FLAGS = [
    "--encoder-embed-dim",
    "32",
    "--decoder-embed-dim",
    "32",
    "--encoder-ffn-embed-dim",
    "64",
    "--decoder-ffn-embed-dim",
    "64",
    "--encoder-attention-heads",
    "4",
    "--decoder-attention-heads",
    "4",
    "--encoder-layers",
    "2",
    "--decoder-layers",
    "3",
    "--activation-dropout",
    "0.1",
    "--attention-dropout",
    "0.1",
    "--activation-fn",
    "relu",
]


def parse(*argv):
    from fairseq import options

    return options.parse_args_and_arch(options.get_training_parser(), ["data", "--user-dir", "attn_only_plugin", *argv])


def build(args):
    from fairseq.models import ARCH_MODEL_REGISTRY

    d = make_dictionary()
    task = SimpleNamespace(source_dictionary=d, target_dictionary=d)
    return ARCH_MODEL_REGISTRY[args.arch].build_model(args, task)


def n_params(model) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


@pytest.mark.parametrize(
    "extra",
    [
        ["--share-all-embeddings"],
        ["--share-decoder-input-output-embed"],
        [
            "--share-all-embeddings",
            "--encoder-normalize-before",
            "--decoder-normalize-before",
            "--encoder-learned-pos",
            "--decoder-learned-pos",
        ],
    ],
)
def test_same_model_as_fairseqs_transformer(extra):
    """The built-in's command with our --arch: the same sizes, norm placement, positions and sharing,
    hence the same parameter count as fairseq's transformer built from the same flags, but for
    learned positions: fairseq's tables have padding_idx + 1 = 2 rows more (never used, positions
    start after the pad index), two tables of d_model = 32."""
    ours, theirs = (
        parse("--arch", "transformer_base", *FAIRSEQ_FLAGS, *extra),
        parse("--arch", "transformer", *FAIRSEQ_FLAGS, *extra),
    )
    assert (ours.d_model, ours.d_ff, ours.heads, ours.encoder_layers, ours.decoder_layers, ours.relu_dropout) == (
        32,
        64,
        4,
        2,
        3,
        0.1,
    )
    assert ours.embedding_sharing == ("decoder" if "--share-decoder-input-output-embed" in extra else "all")
    assert getattr(ours, "pre_norm", False) == ("--encoder-normalize-before" in extra)
    assert not hasattr(ours, "encoder_embed_dim")  # the stored config holds our names only
    unused_rows = 2 * 2 * 32 if "--encoder-learned-pos" in extra else 0
    assert n_params(build(ours)) + unused_rows == n_params(build(theirs))


def test_aliases_do_not_override_presets():
    big = parse("--arch", "transformer_big")
    assert (big.d_model, big.d_ff, big.heads, big.dropout) == (1024, 4096, 16, 0.3)
    narrow = parse("--arch", "transformer_big", "--encoder-embed-dim", "512")  # as fairseq's presets read it
    assert (narrow.d_model, narrow.d_ff, narrow.heads) == (512, 4096, 16)
    assert parse("--arch", "transformer_parse", "--share-all-embeddings").d_model == 1024


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--encoder-embed-dim", "512", "--decoder-embed-dim", "256"],
            "--encoder-embed-dim 512 and --decoder-embed-dim 256 differ: the paper's model has one d_model",
        ),
        (
            ["--encoder-attention-heads", "4", "--decoder-attention-heads", "8"],
            "differ: the paper's model has one h for the encoder and decoder",
        ),
        (["--encoder-embed-dim", "256", "--d-model", "512"], "--encoder-embed-dim 256 disagrees with --d-model 512"),
        (
            ["--activation-dropout", "0.1", "--relu-dropout", "0"],
            "--activation-dropout 0.1 disagrees with --relu-dropout",
        ),
        (["--encoder-normalize-before"], "--encoder-normalize-before without --decoder-normalize-before"),
        (
            ["--encoder-attention-heads", "4"],
            "--encoder-attention-heads 4 without --decoder-attention-heads: fairseq's "
            "transformer keeps the other side at its default",
        ),
        (["--decoder-embed-dim", "256"], "--decoder-embed-dim 256 without --encoder-embed-dim"),
        (["--decoder-learned-pos"], "--decoder-learned-pos without --encoder-learned-pos"),
        (
            ["--share-all-embeddings", "--embedding-sharing", "none"],
            "--share-all-embeddings disagrees with --embedding-sharing none",
        ),
        (["--activation-fn", "gelu"], "--activation-fn gelu: the paper's position-wise FFN uses ReLU"),
    ],
)
def test_refused_in_one_line(argv, message):
    with pytest.raises(PluginError, match=message.replace("+", "\\+")) as caught:
        parse("--arch", "transformer_base", *argv)
    assert "\n" not in str(caught.value)


def test_config_files_and_overrides():
    """Outside the command line (YAML, --model-overrides) an alias sets a field left at its default."""
    from omegaconf import OmegaConf

    from attn_only_plugin.models.transformer import full_config

    cfg = full_config(OmegaConf.create({"encoder_embed_dim": 256, "share_decoder_input_output_embed": True}))
    assert (cfg.d_model, cfg.embedding_sharing, cfg.encoder_embed_dim) == (256, "decoder", None)
    assert full_config(OmegaConf.create({"encoder_embed_dim": 512, "d_model": 512})).d_model == 512
    with pytest.raises(PluginError, match="--encoder-embed-dim 256 disagrees with --d-model 1024"):
        full_config(OmegaConf.create({"encoder_embed_dim": 256, "d_model": 1024}))
