"""Python API on an exported CTranslate2 model (attn-only-export-ctranslate2): the same translate()
as load()'s (hub.py), with its input checks and length check, at CTranslate2's speed.

    import attn_only_plugin
    mt = attn_only_plugin.load_ctranslate2("work/quickstart/ct2", spm_model="work/quickstart/spm/spm.model")
    mt.translate(["Click OK.", "Choose Tools - Options."], beam=4, lenpen=0.6)

Decoding is fairseq-generate's, section 6.1's settings by default: beam search whose finished
hypotheses are ranked by log P / |Y|^lenpen (|Y| with </s>), </s> not allowed first, sentences
batched by length, and at most min(max_len_a S + max_len_b, P_tgt - 1) output tokens for a batch
whose longest source has S tokens with </s> (fairseq's cap). A float32 export then gives
fairseq-generate's hypotheses (tests/export/test_ctranslate2.py), except where a hypothesis reaches
that cap: fairseq forces </s> there and counts its probability, CTranslate2 stops.
"""

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import List, Optional, Tuple, Union

from attn_only_tools.guards.errors import PluginError

from .hub import _batch, _check_sentence, _not_bytes, _whole, check_decoding, check_device, too_long

FAIRSEQ_SPECIALS = 4  # <s> <pad> </s> <unk> open every fairseq dictionary


def load_ctranslate2(
    model_dir: Union[str, Path],
    spm_model: Optional[Union[str, Path]] = None,
    device: str = "cpu",
    compute_type: str = "default",
    inter_threads: int = 1,
    intra_threads: int = 0,
):
    """Load an exported model folder with the sentencepiece model `spm_model` (None: input is
    already segmented). compute_type: CTranslate2's ("default" = as exported; "int8", "float16",
    ...); inter_threads batches translated in parallel, intra_threads threads each (0: all cores)."""
    from ..export import INFO_FILE, require_ctranslate2

    ctranslate2 = require_ctranslate2()
    check_device(device)
    _whole(inter_threads, "inter_threads", 1)
    _whole(intra_threads, "intra_threads", 0)
    model_dir = Path(model_dir)
    if not (model_dir / "model.bin").is_file():
        raise PluginError(
            f"no CTranslate2 model in {model_dir} (no model.bin): give the --out folder of attn-only-export-ctranslate2"
        )
    if not (model_dir / INFO_FILE).is_file():
        raise PluginError(
            f"{model_dir} is a CTranslate2 model but not one attn-only-export-ctranslate2 wrote (no "
            f"{INFO_FILE}): export the checkpoint with it"
        )
    info = _read_json(model_dir / INFO_FILE)
    sp = _sentencepiece(spm_model) if spm_model is not None else None
    if str(device).startswith("cuda") and ctranslate2.get_cuda_device_count() == 0:
        raise PluginError(
            f"device={device!r}: this machine has no usable CUDA GPU: pass device='cpu' to "
            "load_ctranslate2 (attn-only-translate-ctranslate2: --device cpu)"
        )
    if sp is not None:
        from ..guards.input_checks import check_spm_matches_dictionary

        vocab = SimpleNamespace(symbols=_source_vocabulary(model_dir), nspecial=FAIRSEQ_SPECIALS)
        check_spm_matches_dictionary(sp, vocab, spm_model, f"the source vocabulary of {model_dir}")
    try:
        translator = ctranslate2.Translator(
            str(model_dir),
            device=str(device).split(":")[0],
            device_index=int(str(device).partition(":")[2] or 0),
            compute_type=compute_type,
            inter_threads=inter_threads,
            intra_threads=intra_threads,
        )
    except (ValueError, RuntimeError) as e:  # an unknown or unsupported compute_type, a broken model.bin
        raise PluginError(
            f"CTranslate2 cannot load {model_dir} with device={device!r}, compute_type="
            f"{compute_type!r}: {(str(e).strip().splitlines() or ['?'])[0][:200]}: a compute_type this machine "
            "cannot run (float32 runs everywhere), or a model.bin damaged or cut short since the export "
            "(export it again with attn-only-export-ctranslate2)"
        ) from None
    return CTranslate2Translator(translator, sp, info)


def _read_json(path: Path):
    """A JSON file of the export; a damaged one (cut short, edited) as one line saying what to do."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise PluginError(
            f"{path} is damaged ({e}): the export folder was cut short or changed since; export it again with "
            "attn-only-export-ctranslate2"
        ) from None


def _sentencepiece(path):
    import sentencepiece

    from ..guards.input_checks import reading_sentencepiece

    with reading_sentencepiece(path):
        return sentencepiece.SentencePieceProcessor(model_file=str(path))


def _source_vocabulary(model_dir: Path) -> List[str]:
    for name in ("shared_vocabulary.json", "source_vocabulary.json"):  # CTranslate2 writes one of them
        if (model_dir / name).is_file():
            return _read_json(model_dir / name)
    raise PluginError(
        f"{model_dir} has no source vocabulary (shared_vocabulary.json or source_vocabulary.json): "
        "export the model again"
    )


class CTranslate2Translator:
    """Translate strings (one or a batch) with an exported model; see load_ctranslate2()."""

    def __init__(self, translator, sp, info: dict):
        self.translator, self.sp, self.info = translator, sp, info

    def translate(
        self,
        sentences: Union[str, List[str]],
        beam: int = 4,
        lenpen: float = 0.6,
        max_len_a: float = 1.0,
        max_len_b: int = 50,
        batch_size: int = 32,
        **unsupported,
    ):
        """Section 6.1 defaults: beam 4, alpha 0.6, maximum length = input length + 50. fairseq's
        other generation options (sampling, nbest, ...) are load()'s only: refused in one line."""
        if unsupported:
            raise PluginError(
                f"translate() of a CTranslate2 export takes beam, lenpen, max_len_a, max_len_b and "
                f"batch_size, not {', '.join(sorted(unsupported))}: use attn_only_plugin.load() "
                "for fairseq's other generation options"
            )
        single = isinstance(sentences, str)
        out = [
            text
            for text, _, _ in self.translate_scored(
                [sentences] if single else sentences, beam, lenpen, max_len_a, max_len_b, batch_size
            )
        ]
        return out[0] if single else out

    def translate_scored(
        self,
        sentences,
        beam: int = 4,
        lenpen: float = 0.6,
        max_len_a: float = 1.0,
        max_len_b: int = 50,
        batch_size: int = 32,
    ) -> List[Tuple[str, List[str], float]]:
        """(detokenized text, output tokens, score) per sentence, in input order; the score is the
        hypothesis' log P / |Y|^lenpen (natural log)."""
        _, tokens = self.check(sentences)
        return self.translate_tokens(tokens, beam, lenpen, max_len_a, max_len_b, batch_size)

    def translate_tokens(
        self,
        tokens: List[List[str]],
        beam: int = 4,
        lenpen: float = 0.6,
        max_len_a: float = 1.0,
        max_len_b: int = 50,
        batch_size: int = 32,
    ) -> List[Tuple[str, List[str], float]]:
        """translate_scored on source tokens that check() returned (checked and encoded once)."""
        check_decoding(beam, lenpen, max_len_a, max_len_b, batch_size)
        out = [None] * len(tokens)
        order = sorted(range(len(tokens)), key=lambda i: len(tokens[i]))  # fairseq batches by length too
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            longest = max(len(tokens[i]) for i in chunk) + 1  # with </s>
            cap = min(int(max_len_a * longest + max_len_b), self.info["max_target_positions"] - 1)
            results = self.translator.translate_batch(
                [tokens[i] for i in chunk],
                beam_size=beam,
                length_penalty=lenpen,
                min_decoding_length=1,
                max_decoding_length=max(1, cap),
                max_input_length=0,
                return_scores=True,
            )
            for i, r in zip(chunk, results, strict=True):
                out[i] = (self.decode(r.hypotheses[0]), r.hypotheses[0], r.scores[0])
        return out

    def check(self, sentences) -> Tuple[List[str], List[List[str]]]:
        """(sentences, their source tokens), after load()'s input checks and the length check
        against the position table (CTranslate2 itself would truncate or fail)."""
        batch = _batch(sentences)
        for i, s in enumerate(batch):
            _check_sentence(_not_bytes(s, f"sentence {i}"), f"sentence {i}")
        tokens = [self.encode(s) for s in batch]
        positions = self.info["max_source_positions"]
        for i, t in enumerate(tokens):
            if len(t) + 1 > positions:
                raise too_long(i, len(t) + 1, positions)
        return batch, tokens

    def encode(self, sentence: str) -> List[str]:
        """Source tokens: sentencepiece pieces, or the whitespace-separated tokens without a model."""
        return self.sp.encode(sentence, out_type=str) if self.sp is not None else sentence.split()

    def decode(self, tokens: List[str]) -> str:
        """fairseq's sentencepiece decoding (pieces joined, "▁" -> space), or tokens joined by spaces."""
        if self.sp is None:
            return " ".join(tokens)
        return "".join(tokens).replace("\u2581", " ").strip()


def log2(score: float) -> float:
    """A natural-log score in base 2, as fairseq-generate prints its H- lines."""
    return score / math.log(2)
