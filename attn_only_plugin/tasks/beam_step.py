"""One step of `--batched-search` (tasks/batched_search.py) after the decoder's: section 6.1 of
Vaswani et al. (2017), "beam search with a beam size of 4 and length penalty alpha = 0.6 [38]".
The step's candidates (fairseq's BeamSearch.step: the best 2k continuations of a sentence's k
hypotheses by summed log P), the ended ones into the finished slots (tasks/finished_hypotheses.py,
by fairseq's rule or the paper's), the alive ones written over the hypotheses.

Speed only, not the paper's: every buffer is made once and changed in place, and the step's
position is read from a (1,) long tensor on the device, `pos`, never from the host, so the same
code runs eagerly and, with `--cuda-graph-search`, replayed as one CUDA graph for a chunk of steps
(modules/step_graph.py). Python branches only on what all steps of a graph share (the first
step, the last, the rule). Length penalties come from tables made once, a value per step, and are
applied as torch applies a Python number: on CUDA a multiplication by the float32 reciprocal, on a
CPU a division by the float32 value; so the scores are those of the searches this one reproduces,
which divide by a Python number, bit for bit.

Tensor layout: B sentences, beam k, c candidates, V the vocabulary, L = max_len + 1 positions;
hypotheses (B k, ...), row b k + j the j-th hypothesis of sentence b; candidates (B, c).
"""

import math
from typing import List

import torch
from torch import Tensor

from .finished_hypotheses import FinishedHypotheses


class Penalties:
    """A value per step (float32, on the device), applied to scores as a division by it."""

    def __init__(self, values: List[float], device: torch.device):
        values = torch.tensor(values, dtype=torch.float32)  # (L,) rounded to float32 first, as torch does
        self.cuda = torch.device(device).type == "cuda"
        self.table = (1.0 / values if self.cuda else values).to(device)  # CUDA divides by a number so

    def divide(self, x: Tensor, pos: Tensor) -> Tensor:
        """x divided by the value of step pos, as torch divides x by that Python number."""
        at = self.table.index_select(0, pos)  # (1,)
        return x * at if self.cuda else x / at


class BeamStep:
    """The search's buffers and its step (module docstring): tokens (B k, L + 1) (bos, then pad),
    summed log P after each position (B k, L), the finished slots, and done (B,)."""

    def __init__(self, search, B: int, max_len: int, device, bos: int):
        k = self.k = search.beam_size
        self.eos, self.pad, self.paper, self.max_len = search.eos, search.pad, search.paper, max_len
        self.normalize, self.bos = search.normalize_scores, bos
        self.tokens = torch.empty(B * k, max_len + 2, dtype=torch.long, device=device)  # (B k, L + 1)
        self.scores = torch.empty(B * k, max_len + 1, device=device)  # (B k, L)
        self.finished = FinishedHypotheses(B, k, max_len + 1, self.pad, device, self.paper)
        self.done = torch.empty(B, dtype=torch.bool, device=device)  # (B,)
        self.restart()
        self.offsets = torch.arange(B, device=device)[:, None] * k  # (B, 1) first row of each sentence
        self.own = torch.arange(B * k, device=device)  # (B k,)
        steps = range(max_len + 1)
        self.divisors = Penalties([search.divisor(t) for t in steps], device)  # what ended hypotheses divide by
        self.bounds = Penalties([search.lp(t + 2) for t in steps], device)  # the paper's bound, per step
        self.last_bound = search.lp(max_len + 1)

    def restart(self) -> None:
        """The buffers as a search starts, in place (a search of the same shape reuses them): the
        hypotheses bos then pad, their scores 0, no finished one, no sentence done."""
        self.tokens.fill_(self.pad)
        self.tokens[:, 0] = self.bos
        self.scores.zero_()
        self.finished.restart()
        self.done.zero_()

    def mutable(self) -> List[Tensor]:
        """What a step changes: to be put back after a run that must leave no trace (a graph's warm-up)."""
        f = self.finished
        return [self.tokens, self.scores, self.done, f.tokens, f.cumulative, f.score, f.length]

    def __call__(self, step: int, pos: Tensor, lprobs: Tensor) -> Tensor:
        """Step `step`, also given as pos ((1,) on the device, what the tensors are indexed by), on
        the next token's log P (B k, V): returns the order (B k,) of the rows the caches take."""
        cand_scores, cand_tokens, cand_beams = self.candidates(step, pos, lprobs)  # (B, c) each
        cand_rows = cand_beams + self.offsets  # (B, c) the hypothesis each candidate extends
        ends = cand_tokens.eq(self.eos) & cand_scores.ne(-math.inf)  # (B, c): what fairseq would finalize
        self.finish(step, pos, ends, cand_scores, cand_rows)
        return self.advance(step, pos, ends, cand_scores, cand_tokens, cand_rows)

    def candidates(self, step: int, pos: Tensor, lprobs: Tensor):
        """fairseq's BeamSearch.step: the 2k best (summed log P, token, hypothesis) of each sentence,
        (B, c) each; at the first step all hypotheses are alike, so only the first one's."""
        B, k = self.done.size(0), self.k
        lprobs = lprobs.view(B, k, -1)  # (B, k, V)
        V = lprobs.size(2)
        if step == 0:
            lprobs = lprobs[:, ::k, :].contiguous()  # (B, 1, V)
        else:  # + the summed log P of each hypothesis so far
            lprobs = lprobs + self.scores.view(B, k, -1).index_select(2, pos - 1)  # (B, k, V) + (B, k, 1)
        flat = lprobs.view(B, -1)  # (B, k V)
        best, index = torch.topk(flat, k=min(2 * k, flat.size(1) - 1))  # -1: never pad, as fairseq
        return best, index.fmod(V), torch.div(index, V, rounding_mode="trunc")  # (B, c) each

    def finish(self, step: int, pos: Tensor, ends: Tensor, cand_scores: Tensor, cand_rows: Tensor) -> None:
        """The ended candidates that count (fairseq's rule: those among the first k; the paper's:
        all) enter the finished slots of sentences not done; then `done` (B,) is updated in place."""
        B, k, L = self.done.size(0), self.k, self.max_len + 1
        c = cand_scores.size(1) if self.paper else k
        rows = cand_rows[:, :c].reshape(-1)  # (B c,)
        new_tokens = self.tokens.index_select(0, rows)[:, 1:].view(B, c, L)  # (B c, L + 1) -> (B, c, L)
        new_tokens.index_fill_(2, pos, self.eos)
        new_cumulative = self.scores.index_select(0, rows).view(B, c, L)  # (B c, L) -> (B, c, L)
        new_cumulative.index_copy_(2, pos, cand_scores[:, :c, None])
        penalised = self.divisors.divide(cand_scores[:, :c], pos) if self.normalize else cand_scores[:, :c]
        self.finished.add(ends[:, :c] & ~self.done[:, None], penalised, new_tokens, new_cumulative, pos + 1)
        if self.paper:  # tensor2tensor's bound: no alive continuation can beat the worst kept
            best = cand_scores.masked_fill(ends, -math.inf).max(1).values  # (B,) best alive summed log P
            bound = torch.maximum(self.bounds.divide(best, pos), best / self.last_bound)  # (B,)
            self.done |= self.finished.worst() > bound
        else:  # first come, first served: k ended
            self.done |= self.finished.count() >= k
        if step == self.max_len:
            self.done.fill_(True)

    def advance(self, step: int, pos: Tensor, ends: Tensor, cand_scores: Tensor, cand_tokens, cand_rows: Tensor):
        """The k alive hypotheses of each sentence (the first k candidates that do not end, as
        fairseq picks them) written into tokens and scores in place; a done sentence's rows stay
        where they are, take pad and keep their score. Returns the order (B k,) of the rows."""
        k, c = self.k, cand_scores.size(1)
        rank = ends.long() * c + torch.arange(c, device=ends.device)  # (B, c) the ended ones last
        alive = rank.topk(k, dim=1, largest=False).indices  # (B, k), as fairseq's active_hypos
        stopped = self.done[:, None].expand(-1, k).reshape(-1)  # (B, k) -> (B k,), no host read of k's sum
        order = torch.where(stopped, self.own, cand_rows.gather(1, alive).view(-1))  # (B, k) -> (B k,)
        new_token = torch.where(stopped, self.pad, cand_tokens.gather(1, alive).view(-1))  # (B k,)
        if step > 0:
            before = self.scores.index_select(1, pos - 1).squeeze(1)  # (B k,)
        else:
            before = torch.zeros_like(self.scores[:, 0])
        new_score = torch.where(stopped, before, cand_scores.gather(1, alive).view(-1))  # (B k,)
        self.tokens.copy_(self.tokens.index_select(0, order))  # (B k, L + 1) in place
        self.tokens.index_copy_(1, pos + 1, new_token[:, None])
        self.scores.copy_(self.scores.index_select(0, order))  # (B k, L)
        self.scores.index_copy_(1, pos, new_score[:, None])
        return order
