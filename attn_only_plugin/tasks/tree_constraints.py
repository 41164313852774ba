"""`--constrain-trees` for section 6.3's parsing task (tasks/constituency_parsing.py): beam search
that extends a hypothesis only with tokens that keep it a well-formed tree over exactly the input
words, so every output delinearizes without repair. Not in the paper (the task's docstring
says how it departs). The word slots' token is read off the target dictionary (``XX`` or the
words themselves). Allowed:

- a word slot only while fewer slots than source words have been written: ``XX`` in Vinyals et
  al.'s linearization; in the copy linearization (attn-only-prepare-ptb --target-words) exactly the next
  source word, looked up by its string in the target dictionary (``<unk>`` when it is not there);
  a source of sentencepiece pieces (a dictionary whose symbols mark word starts with ``▁``,
  attn-only-spm-prepare --source-only) counts and spells words by joining each word's pieces;
- an opening bracket ``(L`` only while a word is still to come and the output length limit
  leaves room to place the remaining words and close every open bracket;
- a closing bracket only as ``)L`` for the innermost open ``(L``, never right after it (no empty
  constituent), and for the outermost bracket only once every word is placed;
- end of sentence only after the outermost bracket has closed; nothing after it.

`TreeConstraints.allowed` states the rule for one hypothesis, reading its prefix token by token;
`TreeConstraints.mask` is the speed path beside it: the same rule for every hypothesis of a step
at once, from tensors (bracket depth by a cumulative sum, the innermost open bracket by the last
open at the current depth), tested equal to `allowed` on random prefixes. It keeps the
per-step cost of wide beams (section 6.3's 21, the sample's 168) in torch rather than in a Python
loop over every hypothesis and every token of its prefix.

Layout: a step's hypotheses are H = B x beam rows; prefixes (H, 1 + t) start with the BOS/EOS
fairseq puts in front; masks are (H, V), 0 where a token is allowed and -inf elsewhere.
"""

import math
from typing import Dict, List

import torch
from fairseq.data import Dictionary
from fairseq.search import BeamSearch

from attn_only_tools.guards.errors import PluginError
from attn_only_tools.parsing.linearize import PLACEHOLDER
from attn_only_tools.parsing.pieces import is_pieces, join_pieces


class TreeConstraints:
    """``allowed(i, prefix)``: the token ids that may follow ``prefix`` for sentence ``i`` of the
    current batch (``i`` is the sentence's ``sample["id"]``; ``prefix`` starts with the BOS/EOS
    fairseq puts in front of every hypothesis). Source batches are (B, S) token ids, padded on
    either side, each sentence ending with EOS."""

    def __init__(self, tgt_dict: Dictionary, src_dict: Dictionary):
        self.eos, self.xx = tgt_dict.eos(), tgt_dict.index(PLACEHOLDER)
        self.src_dict, self.tgt_dict = src_dict, tgt_dict
        symbols = {symbol: index for index, symbol in enumerate(tgt_dict.symbols)}
        # "(L" -> id of ")L"; an opening bracket whose closing one is not in the dictionary could
        # never be closed, so it is never allowed.
        self.close_of: Dict[int, int] = {
            index: symbols[")" + symbol[1:]]
            for symbol, index in symbols.items()
            if symbol.startswith("(") and len(symbol) > 1 and ")" + symbol[1:] in symbols
        }
        if self.xx == tgt_dict.unk() and not self.close_of:
            raise PluginError(
                f"--constrain-trees: the target dictionary has no {PLACEHOLDER} and no brackets such as "
                "(S / )S, so this is not a parsing data-bin (make one with attn-only-prepare-ptb and "
                "fairseq-preprocess)"
            )
        self.copy = self.xx == tgt_dict.unk()  # no XX: the words themselves fill the slots
        self.pieces = is_pieces(src_dict.symbols)  # a subword source
        self.opens: List[int] = sorted(self.close_of)
        # target ids a word slot may never take: brackets and the specials but <unk>
        self.not_words = (
            set(self.close_of) | set(self.close_of.values()) | {tgt_dict.bos(), tgt_dict.pad(), tgt_dict.eos()}
        )
        self.slots: Dict[int, List[int]] = {}
        self.max_len = 0
        # for mask(): the vocabulary as tables, (V,) each
        V = len(tgt_dict)
        self.is_open = torch.zeros(V, dtype=torch.bool)
        self.is_open[self.opens] = True
        self.is_close = torch.zeros(V, dtype=torch.bool)
        self.is_close[list(self.close_of.values())] = True
        self.closing = torch.full((V,), self.eos)  # "(L" -> ")L"
        self.closing[list(self.close_of)] = torch.tensor(list(self.close_of.values()), dtype=torch.long)

    def set_batch(self, sentence_ids: List[int], src_tokens: torch.Tensor, max_len: int) -> None:
        """The batch's source tokens, (B, S), and the generator's output length limit."""
        specials = {self.src_dict.pad(), self.src_dict.eos(), self.src_dict.bos()}
        self.slots = {
            i: [self.slot_token(word) for word in self.words([self.src_dict[t] for t in row if t not in specials])]
            for i, row in zip(sentence_ids, src_tokens.tolist(), strict=True)
        }
        self.max_len = max_len
        # for mask(): each sentence's row in a (B, n_max + 1) table of the tokens its slots must hold
        self.row_of = {i: row for row, i in enumerate(self.slots)}
        self.n_words = torch.tensor([len(s) for s in self.slots.values()], dtype=torch.long)  # (B,)
        self.slot_table = torch.full((len(self.slots), max(map(len, self.slots.values()), default=0) + 1), self.eos)
        for row, s in enumerate(self.slots.values()):
            self.slot_table[row, : len(s)] = torch.tensor(s, dtype=torch.long)

    def words(self, symbols: List[str]) -> List[str]:
        """A sentence's source words from its source symbols: the symbols themselves, or the words
        a subword source's pieces spell (parsing/pieces.py)."""
        return join_pieces(symbols, self.src_dict.unk_word) if self.pieces else symbols

    def slot_token(self, word: str) -> int:
        """The target id a source word's slot must hold: XX, or the same word (else <unk>)."""
        if not self.copy:
            return self.xx
        target = self.tgt_dict.index(word)
        return self.tgt_dict.unk() if target in self.not_words else target

    def allowed(self, batch_index: int, prefix: torch.Tensor) -> List[int]:
        """The rule, for one hypothesis: the token ids that may follow its (1 + t,) prefix."""
        tokens, slots = prefix.tolist()[1:], self.slots[batch_index]
        n, placed, stack = len(slots), 0, []  # stack: ids of the closing brackets due
        for token in tokens:
            if token in self.close_of:
                stack.append(self.close_of[token])
            elif stack and token == stack[-1]:
                stack.pop()
            else:  # a word slot (only allowed tokens are ever in the prefix)
                placed += 1
        if not stack:  # before the outermost bracket, or after it closed
            opens_fit = not tokens and 2 + n <= self.max_len
            return self.opens if opens_fit else [self.eos]
        allowed = []
        if placed < n:
            allowed.append(slots[placed])
            # an opening bracket needs itself, its closing bracket, the words still due and the
            # closing brackets already due, all before the EOS that the length limit forces
            if len(tokens) + 2 + (n - placed) + len(stack) <= self.max_len:
                allowed.extend(self.opens)
        if tokens[-1] not in self.close_of and (len(stack) > 1 or placed == n):
            allowed.append(stack[-1])
        return allowed or [self.eos]

    def state(self, tokens: torch.Tensor):
        """For prefixes (H, t) without their BOS: the word slots written, the brackets open, whether
        the last token opened one, and the closing bracket due for the innermost open one; (H,) each."""
        H, t = tokens.shape
        if t == 0:  # the first step: nothing written
            nothing = torch.zeros(H, dtype=torch.long)
            return nothing, nothing, nothing.bool(), nothing
        opened, closed = self.is_open[tokens], self.is_close[tokens]  # (H, t)
        depth = (opened.long() - closed.long()).cumsum(1)  # (H, t) brackets open after each token
        d = depth[:, -1]  # (H,)
        # the innermost open bracket: the last opening bracket after which the depth is d
        innermost = (opened & depth.eq(d.unsqueeze(1))).long().mul(torch.arange(1, t + 1)).argmax(1)  # (H,)
        due = self.closing[tokens.gather(1, innermost.unsqueeze(1)).squeeze(1)]  # (H,)
        return (~opened & ~closed).sum(1), d, opened[:, -1], due

    def mask(self, lprobs: torch.Tensor, prefixes: torch.Tensor, sentence_ids: List[int]) -> torch.Tensor:
        """allowed() for every hypothesis at once: 0 where a token is allowed, -inf elsewhere, (H, V)
        like lprobs; prefixes is (H, 1 + t)."""
        tokens = prefixes[:, 1:].cpu()  # (H, t)
        H, t = tokens.shape
        rows = torch.tensor([self.row_of[i] for i in sentence_ids], dtype=torch.long)  # (H,)
        n = self.n_words[rows]  # (H,) words to place
        placed, d, last_opened, due = self.state(tokens)
        word = (d > 0) & (placed < n)
        opens = (word & (t + 2 + (n - placed) + d <= self.max_len)) | ((t == 0) & (2 + n <= self.max_len))
        close = (d > 0) & ~last_opened & ((d > 1) | (placed == n))
        allowed = torch.zeros(H, lprobs.size(1), dtype=torch.bool)  # (H, V)
        allowed[:, : len(self.is_open)] = opens.unsqueeze(1) & self.is_open
        r = word.nonzero().squeeze(1)
        allowed[r, self.slot_table[rows[r], placed[r]]] = True
        r = close.nonzero().squeeze(1)
        allowed[r, due[r]] = True
        allowed[~allowed.any(1), self.eos] = True  # nothing else fits: end the hypothesis
        return torch.zeros_like(lprobs).masked_fill_(~allowed.to(lprobs.device), -math.inf)


class TreeConstrainedBeamSearch(BeamSearch):
    """fairseq's beam search (2 x beam candidates per step) over the allowed tokens only.

    fairseq's own PrefixConstrainedBeamSearch is not used: it keeps only beam candidates per step,
    so when some of them end, a finished hypothesis (EOS inside) is carried on as a live one."""

    def __init__(self, tgt_dict: Dictionary, constraints: TreeConstraints):
        super().__init__(tgt_dict)
        self.constraints = constraints

    def step(
        self, step, lprobs, scores, prev_output_tokens=None, original_batch_idxs=None, candidate_multiple: int = 2
    ):
        bsz, beam_size, vocab_size = lprobs.size()  # (B, beam, V)
        sentence_ids = original_batch_idxs.repeat_interleave(beam_size).tolist()  # (B * beam,)
        mask = self.constraints.mask(lprobs.view(-1, vocab_size), prev_output_tokens, sentence_ids)
        return super().step(
            step,
            lprobs + mask.view(bsz, beam_size, vocab_size),
            scores,
            prev_output_tokens,
            original_batch_idxs,
            candidate_multiple,
        )
