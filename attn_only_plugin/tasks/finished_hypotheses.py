"""The finished hypotheses of `--batched-search` (tasks/batched_search.py) in preallocated buffers.

Section 6.1 of Vaswani et al. (2017) decodes by "beam search with a beam size of 4 and length
penalty alpha = 0.6 [38]"; how a sentence's finished hypotheses are kept is that search's (the
paper's, tensor2tensor's: `--beam-stop paper`) or fairseq 0.12's (the default). fairseq keeps them
in Python lists, one append per hypothesis; here every sentence has k slots in fixed tensors, and
one step's ended candidates enter all sentences' slots at once by a stable sort:

- fairseq's rule (first come, first served): the kept ones, then this step's in candidate order,
  the first k of them (fairseq appends while a sentence has fewer than k);
- the paper's rule: the kept ones and this step's by penalised score, the best k (a stable sort:
  on a tie the kept one first, then candidate order, as tasks/paper_search.py's merge).

`hypotheses()` returns fairseq's format (per sentence a list of dicts, sorted by score as
SequenceGenerator sorts them), after the search: views of the slots, with one copy of the scores
and lengths to the host.

Tensor layout: B sentences (fixed for the whole search), k slots each, L = max_len + 1 target
positions (the end-of-sentence included); slot tensors (B, k) and (B, k, L); a step's c candidates
(B, c) and (B, c, L). Scores in a slot are penalised (summed log P / lp(|Y|)); `cumulative` holds
the summed log P after each position, as fairseq's score buffer.
"""

import math
from typing import Dict, List

import torch
from torch import Tensor


class FinishedHypotheses:
    """k slots per sentence: tokens (B, k, L), cumulative log P (B, k, L), penalised score (B, k)
    (-inf: an empty slot), length (B, k)."""

    def __init__(self, B: int, k: int, L: int, pad: int, device: torch.device, paper: bool):
        self.k, self.paper, self.pad = k, paper, pad
        self.tokens = torch.empty(B, k, L, dtype=torch.long, device=device)  # (B, k, L)
        self.cumulative = torch.empty(B, k, L, device=device)  # (B, k, L)
        self.score = torch.empty(B, k, device=device)  # (B, k)
        self.length = torch.empty(B, k, dtype=torch.long, device=device)  # (B, k)
        self.restart()

    def restart(self) -> None:
        """Every slot empty, in place."""
        self.tokens.fill_(self.pad)
        self.cumulative.zero_()
        self.score.fill_(-math.inf)
        self.length.zero_()

    def count(self) -> Tensor:
        """(B,) slots filled."""
        return self.score.ne(-math.inf).sum(1)

    def worst(self) -> Tensor:
        """(B,) the lowest penalised score kept; -inf when none is kept."""
        kept = self.score.ne(-math.inf)  # (B, k)
        low = self.score.masked_fill(~kept, math.inf).min(1).values  # (B,)
        return torch.where(kept.any(1), low, torch.full_like(low, -math.inf))

    def add(self, ended: Tensor, score: Tensor, tokens: Tensor, cumulative: Tensor, length: Tensor) -> None:
        """This step's candidates: ended (B, c) those that end here and may be kept, score (B, c)
        penalised, tokens and cumulative (B, c, L), all of `length` positions ((1,), on the device).
        Merged into the slots by the sentence's rule (module docstring), in place (a CUDA graph of the
        search's step reads and writes the same slot tensors at every replay)."""
        k = self.k
        new_score = score.masked_fill(~ended, -math.inf)  # (B, c)
        all_score = torch.cat([self.score, new_score], 1)  # (B, k + c)
        if self.paper:
            key = all_score
        else:  # first come: the kept ones (in their order), then the new ended ones, in candidate order
            key = all_score.ne(-math.inf).float()  # (B, k + c)
        order = key.sort(dim=1, descending=True, stable=True).indices[:, :k]  # (B, k) the entries kept
        L = self.tokens.size(2)
        wide = order[:, :, None].expand(-1, -1, L)  # (B, k, L)
        all_length = torch.cat([self.length, length.expand_as(ended)], 1)  # (B, k + c)
        self.tokens.copy_(torch.cat([self.tokens, tokens], 1).gather(1, wide))  # (B, k + c, L) -> (B, k, L)
        self.cumulative.copy_(torch.cat([self.cumulative, cumulative], 1).gather(1, wide))  # (B, k, L)
        self.score.copy_(all_score.gather(1, order))  # (B, k)
        self.length.copy_(all_length.gather(1, order))  # (B, k)

    def hypotheses(self) -> List[List[Dict[str, Tensor]]]:
        """fairseq's format: per sentence its kept hypotheses, best first (torch.sort of the scores
        in slot order, as SequenceGenerator sorts its lists): tokens with the end-of-sentence,
        score (penalised), positional_scores (each token's log P), attention and alignment empty.
        The tensors are views of one copy of the slots on the device (no copy per hypothesis; the
        slots themselves are reused by a later search); only the scores and lengths come to the
        host, once, to choose and order them."""
        per_token = self.cumulative.clone()  # (B, k, L)
        per_token[:, :, 1:] = self.cumulative[:, :, 1:] - self.cumulative[:, :, :-1]  # fairseq's difference
        tokens, score = self.tokens.clone(), self.score.clone()  # (B, k, L), (B, k)
        scores, lengths = self.score.cpu(), self.length.tolist()  # one copy to the host each
        out = []
        for b in range(scores.size(0)):
            kept = [j for j in range(self.k) if scores[b, j] != -math.inf]
            order = torch.sort(scores[b, kept], descending=True).indices.tolist()
            hypos = []
            for j in (kept[i] for i in order):
                n = lengths[b][j]
                hypos.append(
                    {
                        "tokens": tokens[b, j, :n],  # (n,) views of the copy, on the device
                        "score": score[b, j],
                        "attention": torch.empty(0),
                        "alignment": torch.empty(0),
                        "positional_scores": per_token[b, j, :n],
                    }
                )
            out.append(hypos)
        return out
