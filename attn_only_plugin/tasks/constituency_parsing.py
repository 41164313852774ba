"""Section 6.3 of Vaswani et al. (2017): constituency parsing as translation, registered as
`constituency_parsing`.

Training is plain translation (words -> linearized tree, see parsing/linearize.py). Decoding adds
one option the paper does not describe: `--constrain-trees` lets beam search extend a hypothesis
only with tokens that keep it a well-formed tree over exactly the input words:

- ``XX`` only while fewer ``XX`` than source words have been written;
- an opening bracket ``(L`` only while a word is still to come and the output length limit
  leaves room to place the remaining words and close every open bracket;
- a closing bracket only as ``)L`` for the innermost open ``(L``, never right after it (no empty
  constituent), and for the outermost bracket only once every word is placed;
- end of sentence only after the outermost bracket has closed; nothing after it.

So every constrained output delinearizes without repair. This departs from the paper, which is
silent on malformed output (Vinyals et al. 2015 report 0.8-1.5% malformed trees on 40K training
sentences and fix them afterwards); without the flag the task decodes exactly as
`translation_paper` and parsing/linearize.py's `repair` fixes what comes out.
"""
import math
from dataclasses import dataclass, field
from typing import Dict, List

import torch
from fairseq.data import Dictionary
from fairseq.search import BeamSearch
from fairseq.tasks import register_task

from ..errors import PluginError
from ..parsing.linearize import PLACEHOLDER
from .translation_paper import PaperTranslationConfig, PaperTranslationTask


class TreeConstraints:
    """``allowed(i, prefix)``: the token ids that may follow ``prefix`` for sentence ``i`` of the
    current batch (``i`` is the sentence's ``sample["id"]``; ``prefix`` starts with the BOS/EOS
    fairseq puts in front of every hypothesis)."""

    def __init__(self, tgt_dict: Dictionary):
        self.eos, self.xx = tgt_dict.eos(), tgt_dict.index(PLACEHOLDER)
        if self.xx == tgt_dict.unk():
            raise PluginError(f"--constrain-trees: the target dictionary has no {PLACEHOLDER}, so this is not "
                              "a parsing data-bin (make one with scripts/prepare_ptb.py and fairseq-preprocess)")
        symbols = {symbol: index for index, symbol in enumerate(tgt_dict.symbols)}
        # "(L" -> id of ")L"; an opening bracket whose closing one is not in the dictionary could
        # never be closed, so it is never allowed.
        self.close_of: Dict[int, int] = {
            index: symbols[")" + symbol[1:]] for symbol, index in symbols.items()
            if symbol.startswith("(") and len(symbol) > 1 and ")" + symbol[1:] in symbols}
        self.opens: List[int] = sorted(self.close_of)
        self.words: Dict[int, int] = {}
        self.max_len = 0

    def set_batch(self, sentence_ids: List[int], word_counts: List[int], max_len: int) -> None:
        """Words per sentence of the batch and the generator's output length limit."""
        self.words, self.max_len = dict(zip(sentence_ids, word_counts)), max_len

    def allowed(self, batch_index: int, prefix: torch.Tensor) -> List[int]:
        tokens = prefix.tolist()[1:]
        n, placed, stack = self.words[batch_index], 0, []  # stack: ids of the closing brackets due
        for token in tokens:
            if token == self.xx:
                placed += 1
            elif token in self.close_of:
                stack.append(self.close_of[token])
            elif stack and token == stack[-1]:
                stack.pop()
        if not stack:  # before the outermost bracket, or after it closed
            opens_fit = not tokens and 2 + n <= self.max_len
            return self.opens if opens_fit else [self.eos]
        allowed = []
        if placed < n:
            allowed.append(self.xx)
            # an opening bracket needs itself, its closing bracket, the words still due and the
            # closing brackets already due, all before the EOS that the length limit forces
            if len(tokens) + 2 + (n - placed) + len(stack) <= self.max_len:
                allowed.extend(self.opens)
        if tokens[-1] not in self.close_of and (len(stack) > 1 or placed == n):
            allowed.append(stack[-1])
        return allowed or [self.eos]

    def mask(self, lprobs: torch.Tensor, prefixes: torch.Tensor, sentence_ids: List[int]) -> torch.Tensor:
        """0 where a token is allowed, -inf elsewhere; lprobs is (hypotheses, V)."""
        rows, cols = [], []
        for row, (prefix, sentence) in enumerate(zip(prefixes, sentence_ids)):
            allowed = self.allowed(sentence, prefix)
            rows += [row] * len(allowed)
            cols += allowed
        mask = torch.full_like(lprobs, -math.inf)
        mask[rows, cols] = 0.0
        return mask


class TreeConstrainedBeamSearch(BeamSearch):
    """fairseq's beam search (2 x beam candidates per step) over the allowed tokens only.

    fairseq's own PrefixConstrainedBeamSearch is not used: it keeps only beam candidates per step,
    so when some of them end, a finished hypothesis (EOS inside) is carried on as a live one."""

    def __init__(self, tgt_dict: Dictionary, constraints: TreeConstraints):
        super().__init__(tgt_dict)
        self.constraints = constraints

    def step(self, step, lprobs, scores, prev_output_tokens=None, original_batch_idxs=None,
             candidate_multiple: int = 2):
        bsz, beam_size, vocab_size = lprobs.size()  # (B, beam, V)
        sentence_ids = original_batch_idxs.repeat_interleave(beam_size).tolist()  # (B * beam,)
        mask = self.constraints.mask(lprobs.view(-1, vocab_size), prev_output_tokens, sentence_ids)
        return super().step(step, lprobs + mask.view(bsz, beam_size, vocab_size), scores,
                            prev_output_tokens, original_batch_idxs, candidate_multiple)


@dataclass
class ParsingConfig(PaperTranslationConfig):
    constrain_trees: bool = field(default=False, metadata={
        "help": "beam search extends hypotheses only into well-formed trees over exactly the "
                "input words (not in the paper; see tasks/constituency_parsing.py)"})


@register_task("constituency_parsing", dataclass=ParsingConfig)
class ConstituencyParsingTask(PaperTranslationTask):
    """Translation from words to linearized trees, optionally decoded under tree constraints."""

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        generator = super().build_generator(models, args, seq_gen_cls=seq_gen_cls,
                                            extra_gen_cls_kwargs=extra_gen_cls_kwargs, **kwargs)
        if self.cfg.constrain_trees:
            if type(generator.search) is not BeamSearch:
                raise PluginError("--constrain-trees works with plain beam search: drop --sampling, "
                                  "--diverse-beam-groups, --constraints and the like")
            generator.search = TreeConstrainedBeamSearch(self.target_dictionary,
                                                         TreeConstraints(self.target_dictionary))
        return generator

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        search = getattr(generator, "search", None)
        if isinstance(search, TreeConstrainedBeamSearch):  # this generator's own constraints
            src_lengths = sample["net_input"]["src_lengths"]  # words + the appended EOS
            # SequenceGenerator's own limit: EOS is forced at step max_len
            max_len = min(int(generator.max_len_a * src_lengths.max().item() + generator.max_len_b),
                          generator.max_len - 1)
            ids = sample["id"].tolist() if "id" in sample else list(range(len(src_lengths)))
            search.constraints.set_batch(ids, (src_lengths - 1).tolist(), max_len)
        return super().inference_step(generator, models, sample, prefix_tokens, constraints)
