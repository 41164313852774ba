"""The files beside MarianMTModel's weights that make `AutoTokenizer.from_pretrained(DIR)` and a bare
`model.generate(**inputs)` do what our translate() does (hub.py): MarianConfig, the tokenizer and
the generation config.

- Tokens: MarianTokenizer with our joint sentencepiece model as source.spm and target.spm and
  vocab.json = fairseq's dictionary, piece -> fairseq's id (<s> 0, <pad> 1, </s> 2, <unk> 3,
  madeupword padding entries included); a piece outside the dictionary is <unk> on both sides, and
  </s> is appended to the source, as fairseq's encode_line does. Two dictionaries (no
  --joined-dictionary) are vocab.json and target_vocab.json (`separate_vocabs`).
- Decoding (section 6.1, fairseq-generate's conventions): the decoder starts from </s>, <pad> is
  never produced, </s> is not allowed first (fairseq's min_len 1), beam 4 whose finished hypotheses
  are ranked by log P / |Y|^0.6, |Y| counting </s> (transformers divides by the generated length,
  </s> included, as fairseq does), a sentence done once 4 hypotheses have ended (`early_stopping`
  True, fairseq's rule). Departure: fairseq stops a hypothesis at input length + 50 tokens
  (--max-len-a 1 --max-len-b 50); a generation config holds only fixed lengths, so generate() stops
  at the position table instead (max_target_positions tokens with </s>, forced there, as fairseq
  forces it at its cap). Only a hypothesis that runs past input + 50 differs.
"""

import json
import warnings
from pathlib import Path

from ..models.transformer import TransformerConfig

BEAM, LENPEN = 4, 0.6  # section 6.1: beam size 4, length penalty alpha = 0.6


def marian_config(cfg: TransformerConfig, src_dict, tgt_dict):
    """MarianConfig of our post-norm, sinusoidal model: section 3's sizes, ReLU FFN (Eq. 2),
    embeddings x sqrt(d_model) (section 3.4), the sharing of section 3.4 as trained, fairseq's ids."""
    from transformers import MarianConfig

    return MarianConfig(
        vocab_size=len(src_dict),
        decoder_vocab_size=len(tgt_dict),
        max_position_embeddings=max(cfg.max_source_positions, cfg.max_target_positions),
        encoder_layers=cfg.encoder_layers,
        decoder_layers=cfg.decoder_layers,
        d_model=cfg.d_model,
        encoder_ffn_dim=cfg.d_ff,
        decoder_ffn_dim=cfg.d_ff,
        encoder_attention_heads=cfg.heads,
        decoder_attention_heads=cfg.heads,
        activation_function="relu",
        scale_embedding=True,
        dropout=cfg.dropout,
        attention_dropout=cfg.attention_dropout,
        activation_dropout=cfg.relu_dropout,
        encoder_layerdrop=cfg.encoder_layerdrop,
        decoder_layerdrop=cfg.decoder_layerdrop,
        share_encoder_decoder_embeddings=cfg.embedding_sharing == "all",
        tie_word_embeddings=cfg.embedding_sharing != "none",
        pad_token_id=tgt_dict.pad(),
        eos_token_id=tgt_dict.eos(),
        bos_token_id=tgt_dict.bos(),
        decoder_start_token_id=tgt_dict.eos(),
        forced_eos_token_id=tgt_dict.eos(),
        architectures=["MarianMTModel"],
    )


def generation_config(cfg: TransformerConfig, tgt_dict):
    """Section 6.1's decoding as fairseq-generate --beam 4 --lenpen 0.6 runs it (module docstring)."""
    from transformers import GenerationConfig

    return GenerationConfig(
        num_beams=BEAM,
        length_penalty=LENPEN,
        early_stopping=True,
        do_sample=False,
        max_length=cfg.max_target_positions + 1,  # with the decoder's start token: P outputs, </s> included
        min_new_tokens=1,
        bad_words_ids=[[tgt_dict.pad()]],
        forced_eos_token_id=tgt_dict.eos(),
        decoder_start_token_id=tgt_dict.eos(),
        eos_token_id=tgt_dict.eos(),
        pad_token_id=tgt_dict.pad(),
        bos_token_id=tgt_dict.bos(),
    )


def _vocab(dictionary) -> dict:
    """piece -> fairseq id, in the dictionary's order."""
    return {symbol: i for i, symbol in enumerate(dictionary.symbols)}


def save_tokenizer(folder: Path, spm_model, src_dict, tgt_dict, max_source_positions: int) -> None:
    """MarianTokenizer's files in `folder`: source.spm, target.spm, vocab.json (target_vocab.json),
    tokenizer_config.json."""
    from transformers import MarianTokenizer

    separate = list(src_dict.symbols) != list(tgt_dict.symbols)
    (folder / "vocab.json").write_text(json.dumps(_vocab(src_dict), ensure_ascii=False, indent=0) + "\n")
    if separate:
        (folder / "target_vocab.json").write_text(json.dumps(_vocab(tgt_dict), ensure_ascii=False, indent=0) + "\n")
    with warnings.catch_warnings():  # its Moses normalizer is never applied when tokenizing: no need for it
        warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")
        tokenizer = MarianTokenizer(
            source_spm=str(spm_model),
            target_spm=str(spm_model),
            vocab=str(folder / "vocab.json"),
            target_vocab_file=str(folder / "target_vocab.json") if separate else None,
            separate_vocabs=separate,
            unk_token=tgt_dict.unk_word,
            eos_token=tgt_dict.eos_word,
            pad_token=tgt_dict.pad_word,
            bos_token=tgt_dict.bos_word,  # never added (Marian appends </s> only); decode() skips it, as fairseq does
            model_max_length=max_source_positions,
            clean_up_tokenization_spaces=False,
        )
    tokenizer.save_pretrained(str(folder))
