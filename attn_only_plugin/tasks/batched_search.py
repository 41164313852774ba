"""Beam search over a batch that keeps its size, `--batched-search` (off by default): section 6.1
of Vaswani et al. (2017), "beam search with a beam size of 4 and length penalty alpha = 0.6 [38]",
with fairseq 0.12's stopping rule (the default) or the paper's (`--beam-stop paper`,
tasks/paper_search.py), and the same hypotheses and scores as those searches.

Where it departs from fairseq's `SequenceGenerator` (speed only, not the paper's): fairseq drops a
sentence from the batch as soon as it is done, so the batch, its buffers and the decoder's caches
change shape from step to step, and it keeps finished hypotheses in Python lists. Here the batch
stays whole for the whole search: a done sentence stays in it, masked (its hypotheses take pad
tokens, keep their scores and their rows, and nothing it writes is kept), every buffer is made
once (tokens, scores, tasks/finished_hypotheses.py's slots) and updated in place by tensor
operations, with no Python loop over sentences and no copy to the host in a step, but for an
"all done?" test every SYNC_EVERY steps. So every step has the same shapes, and with
--static-decoding-cache the same cache buffers within a chunk: what a CUDA graph of the decoder
step needs (`--cuda-graph-decoding`, tasks/decoder_step.py). The price: done sentences are decoded
(and thrown away) until the whole batch is done or the test comes round.

The encoder output is expanded to the beam once and never reordered again: a hypothesis never
leaves its sentence, and all of a sentence's hypotheses read the same encoder output.

What it does not do is refused in one line (check_options and the generator's own checks): the
search is fairseq's plain beam search only (no sampling, diverse beam search, constraints, prefix
tokens, language model fusion, n-gram blocking, --match-source-len, --print-alignment,
--beam-patience).

Tensor layout: B sentences, beam k, c = 2k candidates (fewer with a tiny vocabulary, as fairseq),
V the vocabulary; hypothesis buffers (B k, ...), row b k + j the j-th hypothesis of sentence b;
candidates (B, c) in score order; L = max_len + 1 target positions.
"""

import math
from typing import Callable, Optional

import torch
from fairseq.search import BeamSearch
from fairseq.sequence_generator import SequenceGenerator
from torch import Tensor

from attn_only_tools.guards.errors import PluginError

from .decoder_step import DecoderStep, check_graphable
from .finished_hypotheses import FinishedHypotheses

SYNC_EVERY = 8  # steps between "all done?" tests (a copy to the host); not the paper's, not tuned
# option: (is it asked for, given the generation args; what to do instead)
UNSUPPORTED = {
    "--sampling": lambda a: getattr(a, "sampling", False),
    "--diverse-beam-groups": lambda a: getattr(a, "diverse_beam_groups", -1) > 0,
    "--diversity-rate": lambda a: getattr(a, "diversity_rate", -1) > -1,
    "--constraints": lambda a: bool(getattr(a, "constraints", False)),
    "--prefix-size": lambda a: getattr(a, "prefix_size", 0) > 0,
    "--print-alignment": lambda a: bool(getattr(a, "print_alignment", False)),
    "--match-source-len": lambda a: getattr(a, "match_source_len", False),
    "--no-repeat-ngram-size": lambda a: getattr(a, "no_repeat_ngram_size", 0) > 0,
    "--score-reference": lambda a: getattr(a, "score_reference", False),
    "--iter-decode-max-iter": lambda a: getattr(a, "iter_decode_max_iter", 10) != 10,
}


def refuse(option: str) -> PluginError:
    return PluginError(
        f"--batched-search does not support {option}: drop one of them "
        "(without --batched-search fairseq's SequenceGenerator decodes it)"
    )


def check_options(cfg, args, seq_gen_cls, extra_gen_cls_kwargs) -> None:
    """Refuse, in one line, a generation set-up the batched search would not honour."""
    for option, asked in UNSUPPORTED.items():
        if asked(args):
            raise refuse(option)
    if getattr(cfg, "beam_patience", 1.0) != 1:
        raise refuse("--beam-patience")
    if (extra_gen_cls_kwargs or {}).get("lm_model") is not None:
        raise refuse("--lm-path")
    if seq_gen_cls is not None:
        raise refuse(f"the generator {seq_gen_cls.__name__} this caller asks for")


class BatchedBeamSearch(SequenceGenerator):
    """fairseq's beam search with a batch of fixed size (module docstring). beam_stop: 'fairseq'
    or 'paper'; length_penalty(n, alpha): lp(|Y|) of the paper's rule (default n^alpha);
    exponent(n, alpha): with fairseq's rule, the power of n that a hypothesis of n tokens is
    divided by (default alpha, fairseq's; the task passes GNMT's)."""

    def __init__(
        self,
        models,
        tgt_dict,
        beam_stop: str = "fairseq",
        exponent: Optional[Callable[[int, float], float]] = None,
        length_penalty: Optional[Callable] = None,
        cuda_graph: bool = False,
        **kwargs,
    ):
        super().__init__(models, tgt_dict, **kwargs)
        if type(self.search) is not BeamSearch:
            raise refuse(f"the search {type(self.search).__name__}")
        if self.lm_model is not None:
            raise refuse("--lm-path")
        if self.match_source_len:
            raise refuse("--match-source-len")
        if self.repeat_ngram_blocker is not None:
            raise refuse("--no-repeat-ngram-size")
        if getattr(self, "token_indices_to_suppress", None) is not None:
            raise refuse("tokens to suppress")
        self.paper = beam_stop == "paper"
        self.exponent = exponent
        self.length_penalty = length_penalty or (lambda n, alpha: n**alpha)
        self.cuda_graph = cuda_graph  # the decoder step through tasks/decoder_step.py's graphs
        if cuda_graph:
            check_graphable(models)

    def divisor(self, step: int) -> float:
        """What this step's ended hypotheses (n = step + 1 tokens) are divided by, n^e computed as
        the searches this one reproduces compute it: fairseq's (e = alpha), GNMTSequenceGenerator's
        (e = exponent(n, alpha)), StoppingRuleGenerator's (e = log lp(n) / log n)."""
        n = step + 1
        if self.paper:
            return n ** (math.log(self.lp(n)) / math.log(n) if n > 1 else 0.0)
        return n ** (self.len_penalty if self.exponent is None else self.exponent(n, self.len_penalty))

    def lp(self, length: int) -> float:
        """The paper's bound's penalty (1 for --unnormalized), as tasks/paper_search.py's."""
        return float(self.length_penalty(length, self.len_penalty)) if self.normalize_scores else 1.0

    def _generate(self, sample, prefix_tokens=None, constraints=None, bos_token=None):
        if prefix_tokens is not None:
            raise refuse("--prefix-size")
        if constraints is not None:
            raise refuse("--constraints")
        src_tokens = sample["net_input"]["src_tokens"]
        (B, S), k, device = src_tokens.shape[:2], self.beam_size, src_tokens.device
        max_len = min(int(self.max_len_a * S + self.max_len_b), self.max_len - 1)
        if self.min_len > max_len:
            raise PluginError(f"--min-len {self.min_len} is above the maximum length {max_len}: lower it")
        states = [{} for _ in range(self.model.models_size)]
        encoder_outs = self.model.forward_encoder(sample["net_input"])
        expand = torch.arange(B, device=device).repeat_interleave(k)  # (B k,) each sentence k times
        encoder_outs = self.model.reorder_encoder_out(encoder_outs, expand)
        tokens, scores, finished, done = self.buffers(B, max_len, device, self.eos if bos_token is None else bos_token)
        runner = DecoderStep(self.model.models[0], self.temperature) if self.cuda_graph else None
        ids = sample["id"] if isinstance(sample.get("id"), Tensor) else torch.arange(B, device=device)
        offsets = torch.arange(B, device=device)[:, None] * k  # (B, 1) first row of each sentence
        for step in range(max_len + 1):  # one step more for the end-of-sentence
            lprobs = self.next_lprobs(step, tokens, encoder_outs, states, max_len, runner)  # (B k, V)
            cand_scores, cand_tokens, cand_beams = self.search.step(
                step, lprobs.view(B, k, -1), scores.view(B, k, -1)[:, :, :step], tokens[:, : step + 1], ids
            )  # (B, c) each
            cand_rows = cand_beams + offsets  # (B, c) the hypothesis each candidate extends
            ends = cand_tokens.eq(self.eos) & cand_scores.ne(-math.inf)  # (B, c): what fairseq would finalize
            self.finish(step, max_len, ends, cand_scores, cand_rows, tokens, scores, finished, done)
            if step == max_len or ((step + 1) % SYNC_EVERY == 0 and bool(done.all())):
                break
            order = self.advance(step, ends, cand_scores, cand_tokens, cand_rows, tokens, scores, done)
            self.reorder(states, order, step + 1)
        return finished.hypotheses()

    def buffers(self, B: int, max_len: int, device, bos: int):
        """The search's buffers, made once: tokens (B k, L + 1) (bos, then pad), summed log P after
        each position (B k, L), the finished slots, and which sentences are done (B,)."""
        k = self.beam_size
        tokens = torch.full((B * k, max_len + 2), self.pad, dtype=torch.long, device=device)  # (B k, L + 1)
        tokens[:, 0] = bos
        scores = torch.zeros(B * k, max_len + 1, device=device)  # (B k, L)
        finished = FinishedHypotheses(B, k, max_len + 1, self.pad, device, self.paper)
        return tokens, scores, finished, torch.zeros(B, dtype=torch.bool, device=device)

    def reorder(self, states, order: Tensor, written: int) -> None:
        """Each model's decoder state takes the hypotheses `order` (B k,): ours by its reorder
        within beams (no copy to the host; of fixed-size caches only the `written` positions
        decoded so far), another's by fairseq's reorder."""
        if not self.model.has_incremental_states():
            return
        for model, state in zip(self.model.models, states, strict=True):
            if hasattr(model.decoder, "reorder_within_beams"):
                model.decoder.reorder_within_beams(state, order, written)
            else:
                model.decoder.reorder_incremental_state_scripting(state, order)

    def next_lprobs(self, step: int, tokens: Tensor, encoder_outs, states, max_len: int, runner=None) -> Tensor:
        """(B k, V) the next token's log-probabilities (through runner, a DecoderStep, if given),
        masked as fairseq masks them."""
        if runner is not None:
            lprobs = runner(step, tokens, encoder_outs, states)
        else:
            lprobs, _ = self.model.forward_decoder(tokens[:, : step + 1], encoder_outs, states, self.temperature)
        lprobs.masked_fill_(lprobs.isnan(), -math.inf)
        lprobs[:, self.pad] = -math.inf  # never pad
        lprobs[:, self.unk] -= self.unk_penalty
        if step >= max_len:  # the length cap: end-of-sentence only
            lprobs[:, : self.eos] = -math.inf
            lprobs[:, self.eos + 1 :] = -math.inf
        if step < self.min_len:
            lprobs[:, self.eos] = -math.inf
        return lprobs

    def finish(self, step, max_len, ends, cand_scores, cand_rows, tokens, scores, finished, done) -> None:
        """The ended candidates that count (fairseq's rule: those among the first k; the paper's:
        all) enter the finished slots of sentences not done; then `done` (B,) is updated in place."""
        B, k = done.size(0), self.beam_size
        c = cand_scores.size(1) if self.paper else k
        rows = cand_rows[:, :c].reshape(-1)  # (B c,)
        L = max_len + 1
        new_tokens = tokens.index_select(0, rows)[:, 1:].view(B, c, L)  # (B c, L + 1) -> (B, c, L)
        new_tokens[:, :, step] = self.eos
        new_cumulative = scores.index_select(0, rows).view(B, c, L)  # (B c, L) -> (B, c, L)
        new_cumulative[:, :, step] = cand_scores[:, :c]
        penalised = cand_scores[:, :c] / self.divisor(step) if self.normalize_scores else cand_scores[:, :c]
        finished.add(ends[:, :c] & ~done[:, None], penalised, new_tokens, new_cumulative, step + 1)
        if self.paper:  # tensor2tensor's bound: no alive continuation can beat the worst kept
            best = cand_scores.masked_fill(ends, -math.inf).max(1).values  # (B,) best alive summed log P
            bound = torch.maximum(best / self.lp(step + 2), best / self.lp(max_len + 1))  # (B,)
            done |= finished.worst() > bound
        else:  # first come, first served: k ended
            done |= finished.count() >= k
        if step == max_len:
            done.fill_(True)

    def advance(self, step, ends, cand_scores, cand_tokens, cand_rows, tokens, scores, done) -> Tensor:
        """The k alive hypotheses of each sentence (the first k candidates that do not end, as
        fairseq picks them) written into tokens and scores in place; a done sentence's rows stay
        where they are, take pad and keep their score. Returns the order (B k,) of the rows."""
        B, k = done.size(0), self.beam_size
        c = cand_scores.size(1)
        rank = ends.long() * c + torch.arange(c, device=ends.device)  # (B, c) the ended ones last
        alive = rank.topk(k, dim=1, largest=False).indices  # (B, k), as fairseq's active_hypos
        stopped = done.repeat_interleave(k)  # (B k,)
        own = torch.arange(B * k, device=done.device)  # (B k,)
        order = torch.where(stopped, own, cand_rows.gather(1, alive).view(-1))  # (B, k) -> (B k,)
        new_token = torch.where(stopped, self.pad, cand_tokens.gather(1, alive).view(-1))  # (B k,)
        before = scores[:, step - 1] if step > 0 else torch.zeros_like(scores[:, 0])  # (B k,)
        new_score = torch.where(stopped, before, cand_scores.gather(1, alive).view(-1))  # (B k,)
        tokens.copy_(tokens.index_select(0, order))  # (B k, L + 1) in place
        tokens[:, step + 1] = new_token
        scores.copy_(scores.index_select(0, order))  # (B k, L)
        scores[:, step] = new_score
        return order
