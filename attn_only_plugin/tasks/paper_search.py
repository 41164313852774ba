"""The paper's beam search stopping rule, `--beam-stop paper`, and a patience factor, `--beam-patience`.

Section 6.1 of Vaswani et al. (2017): "beam search with a beam size of 4 and length penalty
alpha = 0.6 [38]", run by tensor2tensor's utils/beam_search.py. Its search and fairseq 0.12's
`SequenceGenerator` grow the same alive hypotheses (each step: the 2 x beam best extensions by
log-probability, the best beam of them that do not end become the alive ones), but they keep and
stop differently:

- fairseq ends a hypothesis only when its end-of-sentence is among the first beam of the
  2 x beam candidates, and a sentence is done as soon as beam hypotheses have ended ("first come,
  first served", Kasai et al. 2022);
- tensor2tensor ends EVERY candidate that is an end-of-sentence, keeps the best beam finished
  hypotheses by log P / lp(|Y|) over all steps (a later better one displaces an earlier worse
  one), and stops a sentence only when its best alive hypothesis, divided by the most favourable
  penalty any of its continuations could get, cannot beat the worst finished one (or at the
  length cap).

`--beam-stop paper` gives tensor2tensor's rule; the length cap stays fairseq's (--max-len-a/b;
tensor2tensor's was input length + 50), and a sentence with nothing finished at the cap keeps
what fairseq's forced end-of-sentence at the cap gives. A sentence may return fewer than beam
hypotheses: it stops once no alive one can beat the worst finished one, however many finished.
fairseq's rule stays the default, so that decodes made before reproduce.

`--beam-patience p` (Kasai et al. 2022; CTranslate2's `patience`, renamed because fairseq's
`--patience` is training's early stopping) keeps fairseq's rule but waits for round(p x beam)
finished hypotheses, then returns the best beam of them; it is refused with the paper's rule,
whose stop is a bound, not a count.

How, without copying fairseq's search loop: `EndsFirst` wraps the search object and stably moves
the end-of-sentence candidates to the front of the 2 x beam (a beam holds one end-of-sentence
candidate at most, so they all fit in the first beam, where fairseq takes them; the other
candidates keep their order, so the alive hypotheses are fairseq's), and it records each
sentence's best alive log P. `StoppingRuleGenerator` keeps the best finished hypotheses and
decides when a sentence stops.

Layout: B sentences still decoding (fairseq removes finished ones: row r is the r-th sentence of
the batch not yet finished), beam k, 2k candidates per sentence, (B, 2k) candidate tensors in
score order, (B * k, ...) hypothesis buffers; scores are summed log-probabilities, penalised
scores are those divided by lp(|Y|), |Y| counting the end-of-sentence.
"""

import math
from typing import Callable, List, Optional

import torch
from fairseq.dataclass import ChoiceEnum
from fairseq.search import BeamSearch, Search
from fairseq.sequence_generator import SequenceGenerator

from attn_only_tools.guards.errors import PluginError

BEAM_STOPS = ChoiceEnum(["fairseq", "paper"])
NOT_BEAM = (
    "--beam-stop paper and --beam-patience change plain beam search: drop --sampling, --diverse-beam-groups, "
    "--diversity-rate, --match-source-len, --constraints and the like"
)


class EndsFirst(Search):
    """The wrapped search's candidates, the end-of-sentence ones first (stable: both groups keep
    their score order); `best_alive` is each sentence's best other candidate, (B,)."""

    def __init__(self, search: Search):
        torch.nn.Module.__init__(self)  # Search.__init__ wants a dictionary: the wrapped one's fields instead
        self.search = search
        self.eos, self.pad, self.unk, self.vocab_size = search.eos, search.pad, search.unk, search.vocab_size
        self.supports_constraints = search.supports_constraints
        self.stop_on_max_len = search.stop_on_max_len
        self.best_alive: Optional[torch.Tensor] = None

    def step(self, step, lprobs, scores, prev_output_tokens=None, original_batch_idxs=None):
        cand_scores, cand_indices, cand_beams = self.search.step(
            step, lprobs, scores, prev_output_tokens, original_batch_idxs
        )  # (B, 2k) each
        ends = cand_indices.eq(self.eos) & cand_scores.ne(-math.inf)  # (B, 2k): what fairseq finalizes
        order = (~ends).int().sort(dim=1, stable=True).indices  # (B, 2k): ends first, each group in order
        self.best_alive = cand_scores.masked_fill(ends, -math.inf).max(1).values  # (B,)
        return cand_scores.gather(1, order), cand_indices.gather(1, order), cand_beams.gather(1, order)

    def set_src_lengths(self, src_lengths):
        self.search.set_src_lengths(src_lengths)

    def init_constraints(self, batch_constraints, beam_size: int):
        self.search.init_constraints(batch_constraints, beam_size)

    def prune_sentences(self, batch_idxs):
        self.search.prune_sentences(batch_idxs)

    def update_constraints(self, active_hypos):
        self.search.update_constraints(active_hypos)


def fairseq_penalty(length, alpha: float):
    """fairseq's lp(Y) = |Y|^alpha."""
    return length**alpha


class StoppingRuleGenerator(SequenceGenerator):
    """fairseq's beam search with tensor2tensor's stopping rule (beam_stop='paper') or a patience
    factor (fairseq's rule, round(patience x beam) finished hypotheses). `length_penalty(length,
    alpha)` ranks finished hypotheses (default fairseq's |Y|^alpha; the task passes GNMT's)."""

    def __init__(
        self,
        models,
        tgt_dict,
        beam_stop: str = "paper",
        patience: float = 1.0,
        length_penalty: Optional[Callable] = None,
        **kwargs,
    ):
        super().__init__(models, tgt_dict, **kwargs)
        if type(self.search) is not BeamSearch:
            raise PluginError(NOT_BEAM)
        self.paper = beam_stop == "paper"
        self.alpha = self.len_penalty
        self.penalty = length_penalty or fairseq_penalty
        self.wanted = max(1, round(patience * self.beam_size))  # fairseq's rule: finished hypotheses to wait for
        self.worst: Optional[torch.Tensor] = None

    def lp(self, length: int) -> float:
        """The penalty finished hypotheses of this length are divided by (1 for --unnormalized)."""
        return float(self.penalty(length, self.alpha)) if self.normalize_scores else 1.0

    def _generate(self, sample, **kwargs):
        search, self.worst = self.search, None
        if self.paper:
            self.search = EndsFirst(search)
        try:
            finalized = super()._generate(sample, **kwargs)
        finally:
            self.search = search  # what tasks and callers see between calls: the search they built
        return [hypos[: self.beam_size] for hypos in finalized]

    def is_finished(self, *args, **kwargs):
        return False  # finalize_hypos decides, for every sentence of the batch

    def finalize_hypos(
        self, step, bbsz_idx, eos_scores, tokens, scores, finalized, finished, beam_size, attn, src_lengths, max_len
    ):
        """fairseq's finalize_hypos appends this step's finished hypotheses (bbsz_idx: their rows
        in the (B * k, ...) buffers); here they are merged with those kept so far, and the rows
        whose sentence stops are returned (fairseq then removes them from the batch)."""
        sents = [s for s, done in enumerate(finished) if not done]  # row r of the batch is sentence sents[r]
        if self.worst is None:
            self.worst = torch.full((len(finished),), -math.inf)  # (B0,) worst kept penalised score; -inf: none
        before = self.bound_met(step - 1, self.best_alive_before(scores, step, len(sents)), sents, max_len)
        rows = torch.unique(bbsz_idx // beam_size).tolist()  # rows with a new finished hypothesis
        kept = {r: finalized[sents[r]] for r in rows}
        for r in rows:
            finalized[sents[r]] = []  # so that fairseq appends all of this step's (at most k a row)
        self.append_ended(
            step, bbsz_idx, eos_scores, tokens, scores, finalized, finished, beam_size, attn, src_lengths, max_len
        )
        for r in rows:
            new = [] if before[r] else finalized[sents[r]]  # a stopped sentence takes no more
            finalized[sents[r]] = self.merge(kept[r], new)
            if finalized[sents[r]]:
                self.worst[sents[r]] = float(finalized[sents[r]][-1]["score"])
        done = before | self.bound_met(step, getattr(self.search, "best_alive", None), sents, max_len)
        if not self.paper:
            done[rows] = torch.tensor([len(finalized[sents[r]]) >= self.wanted for r in rows])
        done |= step == max_len  # the length cap: fairseq forced every alive hypothesis to end
        for r in done.nonzero().squeeze(1).tolist():
            finished[sents[r]] = True
        return done.nonzero().squeeze(1).tolist()

    def append_ended(self, step, *args):
        """fairseq's finalize_hypos with (step + 1)^len_penalty = lp(step + 1): it appends this
        step's ended hypotheses, its per-token scores the model's, its score divided by lp."""
        self.len_penalty = math.log(self.lp(step + 1)) / math.log(step + 1) if step > 0 else 0.0  # lp(1) = 1
        try:
            super().finalize_hypos(step, *args)
        finally:
            self.len_penalty = self.alpha

    def merge(self, kept: List[dict], new: List[dict]) -> List[dict]:
        """The paper's rule: the best k of both by penalised score (on a tie the earlier one);
        fairseq's: the first `wanted` to end."""
        if not self.paper:
            return (kept + new)[: self.wanted]
        return sorted(kept + new, key=lambda h: -float(h["score"]))[: self.beam_size]

    @staticmethod
    def best_alive_before(scores: torch.Tensor, step: int, B: int) -> Optional[torch.Tensor]:
        """(B,) the best summed log P of the hypotheses alive after the previous step (None at step 0);
        scores is fairseq's (B * k, max_len + 1) buffer of summed log P, filled up to step - 1."""
        return scores.view(B, -1, scores.size(1))[:, :, step - 1].max(1).values if step > 0 else None  # (B, k) -> (B,)

    def bound_met(self, step: int, best_alive: Optional[torch.Tensor], sents: List[int], max_len: int) -> torch.Tensor:
        """(B,) tensor2tensor's test: no continuation of the hypotheses alive after `step` (best
        summed log P best_alive, (B,)) can beat the worst finished hypothesis kept. A continuation
        ends at a length in [step + 2, max_len + 1] with a log P at most best_alive, so its
        penalised score is at most best_alive / lp at one end of that range (lp is monotone in the
        length: the longest for alpha >= 0, the shortest for alpha < 0). False without a finished
        hypothesis, and always for fairseq's rule."""
        if not self.paper or best_alive is None:
            return torch.zeros(len(sents), dtype=torch.bool)
        best_alive = best_alive.float().cpu()
        bound = torch.maximum(best_alive / self.lp(step + 2), best_alive / self.lp(max_len + 1))  # (B,)
        return self.worst[sents] > bound


def raises_log_probs(extra_gen_cls_kwargs) -> bool:
    """Whether fairseq-generate's --lm-path with a negative --lm-weight adds a positive term to
    the log-probabilities (lprobs + lm_weight x log P_lm), which the paper's bound assumes <= 0."""
    kwargs = extra_gen_cls_kwargs or {}
    return kwargs.get("lm_model") is not None and kwargs.get("lm_weight", 1.0) < 0


def stopping_rule(cfg, args, seq_gen_cls, extra_gen_cls_kwargs, gnmt_penalty: Callable):
    """The generator class and its extra arguments for a task's build_generator: unchanged for
    fairseq's rule without patience, else StoppingRuleGenerator with the task's length penalty
    (gnmt_penalty for --lenpen-style gnmt). Combinations it cannot honour are refused in one line."""
    beam_stop, patience = str(getattr(cfg, "beam_stop", "fairseq")), getattr(cfg, "beam_patience", 1.0)
    if beam_stop not in BEAM_STOPS._member_names_:
        raise PluginError(f"beam_stop={beam_stop!r}: give 'fairseq' (the default) or 'paper'")
    if isinstance(patience, bool) or not isinstance(patience, (int, float)) or not 0 < patience < math.inf:
        raise PluginError(f"--beam-patience {patience!r}: give a number > 0 (1 is fairseq's own rule)")
    if beam_stop == "fairseq" and patience == 1:
        return seq_gen_cls, extra_gen_cls_kwargs
    if beam_stop == "paper" and patience != 1:
        raise PluginError(
            "--beam-patience works with --beam-stop fairseq: the paper's rule stops by a bound, not a count"
        )
    if beam_stop == "paper" and (getattr(args, "unkpen", 0) < 0 or raises_log_probs(extra_gen_cls_kwargs)):
        raise PluginError(
            "--beam-stop paper needs every log-probability <= 0 for its bound: "
            "drop the negative --unkpen or --lm-weight, or the paper's rule"
        )
    if getattr(args, "print_alignment", False):
        raise PluginError("--print-alignment is not supported with --beam-stop paper or --beam-patience: drop one")
    if seq_gen_cls is not None:
        raise PluginError(
            f"--beam-stop and --beam-patience decode with their own generator, not {seq_gen_cls.__name__}: drop them"
        )
    gnmt = str(getattr(cfg, "lenpen_style", "fairseq")) == "gnmt"
    kwargs = dict(extra_gen_cls_kwargs or {}, beam_stop=beam_stop, patience=patience)
    return StoppingRuleGenerator, dict(kwargs, length_penalty=gnmt_penalty if gnmt else None)
