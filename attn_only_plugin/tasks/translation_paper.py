"""fairseq's translation task plus the length penalty the paper used, registered as
`translation_paper`.

Section 6.1 of Vaswani et al. (2017): "beam search with a beam size of 4 and length penalty
alpha = 0.6 [38]". Reference [38] (Wu et al. 2016, GNMT) and tensor2tensor define
lp(Y) = ((5 + |Y|) / 6)^alpha and rank finished hypotheses by log P(Y|X) / lp(Y). fairseq's
--lenpen divides by |Y|^alpha instead, which favours long hypotheses more strongly.
`--lenpen-style gnmt` gives the paper's penalty with alpha = --lenpen; the default keeps
fairseq's. |Y| counts the end-of-sentence token in both (as tensor2tensor's beam search does).
`--beam-stop paper` gives tensor2tensor's beam search stopping rule, `--beam-patience p` fairseq's
rule with a patience factor (both in tasks/paper_search.py). `--batched-search` (off by default,
speed only) decodes with either rule and either penalty over a batch that keeps its size
(tasks/batched_search.py): the same hypotheses and scores, shapes that repeat step after step;
`--cuda-graph-decoding` replays its decoder step as a CUDA graph (tasks/decoder_step.py),
`--cuda-graph-search` its whole step, decoder and search (tasks/beam_step.py).

Every option that changes how hypotheses are ranked applies, or the generator is refused in one
line (check_ranking_options): the GNMT penalty ranks beam search, sampling, --print-alignment's
generator alike; --unnormalized (no length normalisation at all) and --score-reference (the
reference scored by its mean log-probability per token) would drop --lenpen or the GNMT penalty
without a word, so with either of them a length penalty is refused.
"""

import math
from dataclasses import dataclass, field

from fairseq.dataclass import ChoiceEnum
from fairseq.sequence_generator import SequenceGenerator, SequenceGeneratorWithAlignment
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from attn_only_tools.guards.errors import PluginError

from . import batched_search
from .paper_search import BEAM_STOPS, stopping_rule

LENPEN_STYLES = ChoiceEnum(["fairseq", "gnmt"])
# --batched-search's speed paths: the task's option -> BatchedBeamSearch's argument
SPEED_PATHS = {
    "cuda_graph_decoding": "cuda_graph",
    "cuda_graph_search": "graph_search",
    "beam_reorder_kernel": "reorder_kernel",
    "decode_attention_kernel": "decode_kernel",
}


def gnmt_length_penalty(length, alpha: float):
    """lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016, Eq. 14)."""
    return ((5.0 + length) / 6.0) ** alpha


def gnmt_exponent(length: int, alpha: float) -> float:
    """The exponent e with length^e = lp(length). fairseq's finalize step divides a finished
    hypothesis' summed log-probability by length^len_penalty; with e in len_penalty's place it
    divides by lp(length), and the per-token (positional) scores stay the model's. Length 1:
    lp(1) = 1 = 1^e."""
    return alpha * math.log((5.0 + length) / 6.0) / math.log(length) if length > 1 else 0.0


class GNMTSequenceGenerator(SequenceGenerator):
    """fairseq's beam search, hypotheses normalised by the GNMT length penalty."""

    def finalize_hypos(self, step, *args, **kwargs):
        alpha = self.len_penalty
        self.len_penalty = gnmt_exponent(step + 1, alpha)  # fairseq divides by (step + 1)^len_penalty
        try:
            return super().finalize_hypos(step, *args, **kwargs)
        finally:
            self.len_penalty = alpha


class GNMTSequenceGeneratorWithAlignment(GNMTSequenceGenerator, SequenceGeneratorWithAlignment):
    """fairseq's beam search with --print-alignment, hypotheses normalised by the GNMT length
    penalty (the alignments are computed on the hypotheses found, whatever ranked them)."""


def check_ranking_options(cfg, args, seq_gen_cls=None) -> None:
    """Refuse, in one line, a generation set-up in which --lenpen or --lenpen-style would be dropped
    without a word: each option that ranks hypotheses applies, or the command stops here."""
    gnmt = str(cfg.lenpen_style) == "gnmt"
    lenpen = getattr(args, "lenpen", 1)
    penalty = "--lenpen-style gnmt" if gnmt else f"--lenpen {lenpen:g}"
    if not gnmt and lenpen == 1:
        return  # fairseq's default: scores divided by |Y|, as the two options below do too
    if getattr(args, "score_reference", False):
        raise PluginError(
            f"{penalty} has no effect with --score-reference, which scores the reference by its mean "
            "log-probability per token (no length penalty): drop --lenpen and --lenpen-style to score references"
        )
    if getattr(args, "unnormalized", False):
        raise PluginError(
            f"{penalty} has no effect with --unnormalized, which ranks hypotheses by their summed "
            "log-probability alone: drop one of them"
        )
    if gnmt and seq_gen_cls is not None and not issubclass(seq_gen_cls, GNMTSequenceGenerator):
        raise PluginError(
            f"--lenpen-style gnmt cannot rank hypotheses of the generator {seq_gen_cls.__name__} this caller "
            "asks for: drop --lenpen-style gnmt, or build the generator without seq_gen_cls"
        )


@dataclass
class PaperTranslationConfig(TranslationConfig):
    lenpen_style: LENPEN_STYLES = field(
        default="fairseq",
        metadata={
            "help": "'gnmt': rank hypotheses by logP / ((5+|Y|)/6)^alpha as the paper (section 6.1, "
            "via [38]) with alpha = --lenpen; 'fairseq': logP / |Y|^alpha"
        },
    )
    beam_stop: BEAM_STOPS = field(
        default="fairseq",  # fairseq's rule, not the paper's (section 6.1's search): decodes made before reproduce
        metadata={
            "help": "'paper': tensor2tensor's beam search, as the paper decoded (section 6.1): every ended "
            "candidate kept, the best beam of them, stop when no alive hypothesis can beat them; 'fairseq': "
            "stop once beam hypotheses have ended (see tasks/paper_search.py)"
        },
    )
    # CTranslate2 calls it patience; fairseq's own --patience is training's early stopping
    beam_patience: float = field(
        default=1.0,  # fairseq's rule as it is; not in the paper (Kasai et al. 2022)
        metadata={
            "help": "with --beam-stop fairseq, stop a sentence once round(patience x beam) hypotheses have "
            "ended and return the best beam of them (Kasai et al. 2022; CTranslate2's name); 1: fairseq's rule"
        },
    )
    batched_search: bool = field(
        default=False,  # not the paper's: speed only, the same hypotheses as fairseq's SequenceGenerator
        metadata={
            "help": "beam search over a batch that keeps its size (done sentences masked, not dropped), "
            "the same hypotheses and scores as fairseq's search with --beam-stop and --lenpen-style, shapes "
            "that repeat step after step (see tasks/batched_search.py); plain beam search only"
        },
    )
    cuda_graph_decoding: bool = field(
        default=False,  # not the paper's: speed only
        metadata={
            "help": "with --batched-search and a model with --static-decoding-cache on a GPU: replay the "
            "decoder step as a CUDA graph, captured once per 64-step cache chunk; on a CPU the same step runs "
            "eagerly (see tasks/decoder_step.py)"
        },
    )
    cuda_graph_search: bool = field(
        default=False,  # not the paper's: speed only
        metadata={
            "help": "--cuda-graph-decoding with the whole search step in the graph: the decoder step, the "
            "candidates, the finished hypotheses and the beam's advance replayed as one launch a step (the "
            "same hypotheses); on a CPU eagerly (see tasks/beam_step.py)"
        },
    )
    beam_reorder_kernel: bool = field(
        default=False,  # not the paper's: speed only
        metadata={
            "help": "with --batched-search and a model with --static-decoding-cache: reorder the caches after "
            "each step by a Triton kernel, in place, reading and writing only the rows that move, once (the "
            "same hypotheses); where Triton cannot run (a CPU) by torch's ops (see modules/beam_reorder.py)"
        },
    )
    decode_attention_kernel: bool = field(
        default=False,  # not the paper's: speed only
        metadata={
            "help": "with --batched-search and a model with --static-decoding-cache: each decoding step's "
            "self-attention by a Triton kernel that reads only the positions written so far, not the whole "
            "fixed-size buffer (Eq. (1) to float rounding); where Triton cannot run (a CPU) by torch's kernel "
            "(see modules/decode_attention.py)"
        },
    )


def sequence_generator(cfg, args, seq_gen_cls, extra_gen_cls_kwargs):
    """The generator class and extra arguments of fairseq's SequenceGenerator family: the stopping
    rule's (tasks/paper_search.py), else with --lenpen-style gnmt the GNMT-ranked generator."""
    seq_gen_cls, extra_gen_cls_kwargs = stopping_rule(cfg, args, seq_gen_cls, extra_gen_cls_kwargs, gnmt_length_penalty)
    if str(cfg.lenpen_style) == "gnmt" and seq_gen_cls is None:
        seq_gen_cls = GNMTSequenceGenerator
        if getattr(args, "print_alignment", False):  # fairseq's alignment generator, GNMT-ranked
            seq_gen_cls = GNMTSequenceGeneratorWithAlignment
            extra_gen_cls_kwargs = dict(extra_gen_cls_kwargs or {}, print_alignment=args.print_alignment)
    return seq_gen_cls, extra_gen_cls_kwargs


def batched_generator(cfg, args, seq_gen_cls, extra_gen_cls_kwargs):
    """The generator class and extra arguments of --batched-search (refused in one line where it
    cannot reproduce the search asked for)."""
    batched_search.check_options(cfg, args, seq_gen_cls, extra_gen_cls_kwargs)
    stopping_rule(cfg, args, None, extra_gen_cls_kwargs, gnmt_length_penalty)  # the same checks of --beam-stop
    gnmt = str(cfg.lenpen_style) == "gnmt"
    extra = dict(extra_gen_cls_kwargs or {}, beam_stop=str(cfg.beam_stop))
    extra.update({kwarg: bool(getattr(cfg, flag, False)) for flag, kwarg in SPEED_PATHS.items()})
    if gnmt:
        extra.update(length_penalty=gnmt_length_penalty, exponent=gnmt_exponent)
    return batched_search.BatchedBeamSearch, extra


@register_task("translation_paper", dataclass=PaperTranslationConfig)
class PaperTranslationTask(TranslationTask):
    """TranslationTask whose generator can apply the paper's (GNMT) length penalty."""

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        check_ranking_options(self.cfg, args, seq_gen_cls)  # the caller's own generator class, if any
        for flag in SPEED_PATHS:
            if getattr(self.cfg, flag, False) and not getattr(self.cfg, "batched_search", False):
                name = "--" + flag.replace("_", "-")
                raise PluginError(f"{name} is a speed path of --batched-search: add --batched-search")
        choose = batched_generator if getattr(self.cfg, "batched_search", False) else sequence_generator
        seq_gen_cls, extra_gen_cls_kwargs = choose(self.cfg, args, seq_gen_cls, extra_gen_cls_kwargs)
        return super().build_generator(
            models, args, seq_gen_cls=seq_gen_cls, extra_gen_cls_kwargs=extra_gen_cls_kwargs, **kwargs
        )
