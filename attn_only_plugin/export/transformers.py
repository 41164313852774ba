"""Exact export of our Transformer (section 3 of Vaswani et al. 2017) to Hugging Face transformers'
MarianMTModel, tokenizer and decoding settings included (docs/export.md).

MarianMTModel is the paper's model: post-norm layers (LayerNorm(x + Sublayer(x)), section 3.1) with
biased projections, a ReLU FFN (Eq. 2), embeddings x sqrt(d_model) (section 3.4), source, target
and pre-softmax matrices shared or not (section 3.4; Marian's `share_encoder_decoder_embeddings`
and `tie_word_embeddings`), LayerNorm eps 1e-5 (ours, modules/layers.py), and section 3.5's
sinusoids at positions 0, 1, ... on both sides, in another order of the dimensions, which the
weights absorb (marian_weights.py). The tokenizer and generation config are marian_files.py's,
the model card model_card.py's.

Refused in one line naming the flag, because MarianMTModel cannot compute them: learned positions
(Marian saves no position table and rebuilds its sinusoids when loading), pre-norm (no
normalize_before in MarianConfig), --attention-window, --relative-positions,
--no-absolute-positions, d_k or d_v wider than d_model/h; and the parser's task (its words are not
sentencepiece pieces, which MarianTokenizer requires).
"""

from pathlib import Path
from typing import Optional

from attn_only_tools.guards.atomic import _umask
from attn_only_tools.guards.errors import PluginError

from ..models.transformer import TransformerConfig
from .common import new_out, read_checkpoint, write_folder

OTHER_TOOL = "transformers' FSMT conversion script, convert_fsmt_original_pytorch_checkpoint_to_pytorch.py"
NOT_MARIAN = "MarianMTModel cannot compute it; export this model with attn-only-export-ctranslate2"


def check_expressible(cfg: TransformerConfig, task: Optional[str] = None) -> None:
    """Refuse, in one line naming the flag, what MarianMTModel cannot compute exactly."""
    head = cfg.d_model // cfg.heads
    refusals = [
        (
            cfg.learned_pos,
            "--learned-pos: Marian has no learned position table (it rebuilds its sinusoids when loading)",
        ),
        (cfg.pre_norm, "--pre-norm: Marian's layers are post-norm only (no normalize_before)"),
        (
            cfg.attention_window is not None,
            f"--attention-window {cfg.attention_window}: Marian has no restricted self-attention",
        ),
        (
            cfg.relative_positions is not None,
            f"--relative-positions {cfg.relative_positions}: Marian has no relative positions",
        ),
        (cfg.no_absolute_positions, "--no-absolute-positions: Marian always adds its sinusoids"),
        (
            cfg.d_model % cfg.heads != 0,
            f"--d-model {cfg.d_model} with --heads {cfg.heads}: Marian's heads are d_model/h wide, which must divide",
        ),
        ((cfg.d_k or head) > head, f"--d-k {cfg.d_k}: wider than Marian's heads, d_model/h = {head}"),
        ((cfg.d_v or head) > head, f"--d-v {cfg.d_v}: wider than Marian's heads, d_model/h = {head}"),
        (
            task == "constituency_parsing",
            "--task constituency_parsing: MarianTokenizer reads sentencepiece pieces, not the parser's words",
        ),
    ]
    for refused, why in refusals:
        if refused:
            raise PluginError(f"{why}; {NOT_MARIAN}")


def build_model(cfg: TransformerConfig, weights: dict, src_dict, tgt_dict):
    """MarianMTModel (float32, eval mode) computing our model's function, with its generation config."""
    from transformers import MarianMTModel

    from .marian_files import generation_config, marian_config
    from .marian_weights import marian_state_dict

    check_expressible(cfg)
    sd = marian_state_dict(weights, cfg)
    model = MarianMTModel(marian_config(cfg, src_dict, tgt_dict)).eval()
    missing, unexpected = model.load_state_dict(sd, strict=False)
    tied = {"model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"}
    left = set(missing) - tied - {"model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"}
    if unexpected or left:  # a mapping bug, never the user's input: say what it was
        raise RuntimeError(
            f"MarianMTModel's parameters do not match the mapping: missing {sorted(left)}, "
            f"unexpected {sorted(unexpected)}"
        )
    model.generation_config = generation_config(cfg, tgt_dict)
    return model


def _task(state: dict) -> Optional[str]:
    cfg = state.get("cfg")
    task = cfg.get("task") if isinstance(cfg, dict) else None
    return (task or {}).get("_name") if isinstance(task, dict) else getattr(state.get("args"), "task", None)


def _sentencepiece(spm_model, src_dict, tgt_dict):
    """The sentencepiece model, refused in one line when missing, not a model, or not the dictionaries'."""
    import sentencepiece

    from ..guards.input_checks import check_spm_matches_dictionary, reading_sentencepiece

    with reading_sentencepiece(spm_model, "--spm-model"):
        sp = sentencepiece.SentencePieceProcessor(model_file=str(spm_model))
    for d, name in ((src_dict, "the source dictionary"), (tgt_dict, "the target dictionary")):
        check_spm_matches_dictionary(sp, d, spm_model, name)
    return sp


def export(checkpoint, data, spm_model, out, force: bool = False, bleu: Optional[str] = None) -> Path:
    """Export checkpoint (with the dictionaries in data and the sentencepiece model spm_model) to a
    transformers model folder `out`: model.safetensors, config.json, generation_config.json, the
    tokenizer's files and README.md (the model card; bleu: a line of sacreBLEU output to cite)."""
    from .model_card import model_card

    out = new_out(out, force, [checkpoint, data, spm_model])  # before the (slow) load
    read = read_checkpoint(checkpoint, data, OTHER_TOOL)
    check_expressible(read.cfg, _task(read.state))
    _sentencepiece(spm_model, read.src_dict, read.tgt_dict)
    model = build_model(read.cfg, read.weights, read.src_dict, read.tgt_dict)
    card = model_card(read, Path(checkpoint).name, bleu)

    def fill(tmp: Path):
        from .marian_files import save_tokenizer

        model.save_pretrained(str(tmp))
        save_tokenizer(tmp, spm_model, read.src_dict, read.tgt_dict, read.cfg.max_source_positions)
        (tmp / "README.md").write_text(card)
        for f in tmp.iterdir():  # safetensors writes its file 0600: the folder's files as open() makes them
            f.chmod(0o666 & ~_umask())

    return write_folder(out, force, fill)
