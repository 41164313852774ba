"""Section 6.3 of Vaswani et al. (2017): constituency parsing as translation, registered as
`constituency_parsing`.

Training is plain translation (words -> linearized tree, see parsing/linearize.py). Decoding adds
one option the paper does not describe: `--constrain-trees` lets beam search extend a hypothesis
only with tokens that keep it a well-formed tree over exactly the input words:

- a word slot only while fewer slots than source words have been written: ``XX`` in Vinyals et
  al.'s linearization; in the copy linearization (prepare_ptb.py --target-words) exactly the next
  source word, looked up by its string in the target dictionary (``<unk>`` when it is not there);
- an opening bracket ``(L`` only while a word is still to come and the output length limit
  leaves room to place the remaining words and close every open bracket;
- a closing bracket only as ``)L`` for the innermost open ``(L``, never right after it (no empty
  constituent), and for the outermost bracket only once every word is placed;
- end of sentence only after the outermost bracket has closed; nothing after it.

The linearization is read off the target dictionary, so no flag says it: a dictionary with ``XX``
is Vinyals et al.'s, one without ``XX`` but with brackets ``(L`` / ``)L`` the copy one (a joined
source/target dictionary, fairseq-preprocess --joined-dictionary, works for both).

So every constrained output delinearizes without repair. This departs from the paper, which is
silent on malformed output (Vinyals et al. 2015 report 0.8-1.5% malformed trees on 40K training
sentences and fix them afterwards); without the flag the task decodes exactly as
`translation_paper` and parsing/linearize.py's `repair` fixes what comes out.

`--word-dropout P` (not in the paper, default 0 = the paper) replaces each source word by
``<unk>`` with probability P in training only, a standard regularizer for parsers trained on little
data (word dropout as in Kiperwasser & Goldberg 2016, here unconditional): rare and unseen test
words are ``<unk>``, and the model learns to parse around them. Each sentence's draw comes from
fairseq's seeded RNG, numpy_seed(--seed, update number, sentence id), so a run is reproducible and
resumes with the same draws whatever the batching or --num-workers; validation and generation see
the words unchanged.
"""

import math
from dataclasses import dataclass, field
from typing import Dict, List

import numpy as np
import torch
from fairseq.data import Dictionary, data_utils
from fairseq.search import BeamSearch
from fairseq.tasks import register_task
from omegaconf import II

from ..guards.errors import PluginError
from ..parsing.linearize import PLACEHOLDER
from .translation_paper import PaperTranslationConfig, PaperTranslationTask


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
                "(S / )S, so this is not a parsing data-bin (make one with scripts/prepare_ptb.py and "
                "fairseq-preprocess)"
            )
        self.copy = self.xx == tgt_dict.unk()  # no XX: the words themselves fill the slots
        self.opens: List[int] = sorted(self.close_of)
        # target ids a word slot may never take: brackets and the specials but <unk>
        self.not_words = (
            set(self.close_of) | set(self.close_of.values()) | {tgt_dict.bos(), tgt_dict.pad(), tgt_dict.eos()}
        )
        self.slots: Dict[int, List[int]] = {}
        self.max_len = 0

    def set_batch(self, sentence_ids: List[int], src_tokens: torch.Tensor, max_len: int) -> None:
        """The batch's source tokens, (B, S), and the generator's output length limit."""
        specials = {self.src_dict.pad(), self.src_dict.eos(), self.src_dict.bos()}
        self.slots = {
            i: [self.slot_token(t) for t in row if t not in specials]
            for i, row in zip(sentence_ids, src_tokens.tolist(), strict=True)
        }
        self.max_len = max_len

    def slot_token(self, source_token: int) -> int:
        """The target id a source word's slot must hold: XX, or the same word (else <unk>)."""
        if not self.copy:
            return self.xx
        target = self.tgt_dict.index(self.src_dict[source_token])
        return self.tgt_dict.unk() if target in self.not_words else target

    def allowed(self, batch_index: int, prefix: torch.Tensor) -> List[int]:
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

    def mask(self, lprobs: torch.Tensor, prefixes: torch.Tensor, sentence_ids: List[int]) -> torch.Tensor:
        """0 where a token is allowed, -inf elsewhere; lprobs is (hypotheses, V)."""
        rows, cols = [], []
        for row, (prefix, sentence) in enumerate(zip(prefixes, sentence_ids, strict=True)):
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


def drop_words(
    src_tokens: torch.Tensor, sentence_ids: List[int], p: float, seed: int, update_num: int, src_dict: Dictionary
) -> torch.Tensor:
    """A copy of the (B, S) source batch in which each word (not a special symbol, not padding on
    either side) is <unk> with probability p. Sentence i draws one number per token from
    numpy_seed(seed, update_num, i), so its draws do not depend on the batch it is in."""
    dropped = src_tokens.cpu().clone()
    for row, sentence in zip(dropped, sentence_ids, strict=True):
        tokens = row.ne(src_dict.pad()).nonzero().squeeze(1)  # (T,) positions of the sentence's tokens
        with data_utils.numpy_seed(seed, update_num, sentence):
            hit = tokens[torch.from_numpy(np.random.random_sample(len(tokens)) < p)]
        row[hit[row[hit] >= src_dict.nspecial]] = src_dict.unk()  # words only: EOS, BOS, <unk> stay
    return dropped.to(src_tokens.device)


@dataclass
class ParsingConfig(PaperTranslationConfig):
    constrain_trees: bool = field(
        default=False,
        metadata={
            "help": "beam search extends hypotheses only into well-formed trees over exactly the "
            "input words (not in the paper; see tasks/constituency_parsing.py)"
        },
    )
    word_dropout: float = field(
        default=0.0,
        metadata={
            "help": "in training only, replace each source word by <unk> with this probability, in [0, 1) (not in "
            "the paper, which trains with 0, the default; a regularizer for small parsing data, see "
            "tasks/constituency_parsing.py)"
        },
    )
    seed: int = II("common.seed")


@register_task("constituency_parsing", dataclass=ParsingConfig)
class ConstituencyParsingTask(PaperTranslationTask):
    """Translation from words to linearized trees, optionally decoded under tree constraints and
    trained with word dropout."""

    def __init__(self, cfg: ParsingConfig, src_dict: Dictionary, tgt_dict: Dictionary):
        if not 0.0 <= cfg.word_dropout < 1.0:
            raise PluginError(
                f"--word-dropout {cfg.word_dropout} is not a probability in [0, 1): give e.g. 0.1 (0 turns it off)"
            )
        super().__init__(cfg, src_dict, tgt_dict)

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        if self.cfg.word_dropout > 0:
            net_input = dict(
                sample["net_input"],
                src_tokens=drop_words(
                    sample["net_input"]["src_tokens"],
                    sample["id"].tolist(),
                    self.cfg.word_dropout,
                    self.cfg.seed,
                    update_num,
                    self.src_dict,
                ),
            )
            sample = dict(sample, net_input=net_input)  # a copy: a retried step draws the same again
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        generator = super().build_generator(
            models, args, seq_gen_cls=seq_gen_cls, extra_gen_cls_kwargs=extra_gen_cls_kwargs, **kwargs
        )
        if self.cfg.constrain_trees:
            if type(generator.search) is not BeamSearch:
                raise PluginError(
                    "--constrain-trees works with plain beam search: drop --sampling, "
                    "--diverse-beam-groups, --constraints and the like"
                )
            generator.search = TreeConstrainedBeamSearch(
                self.target_dictionary, TreeConstraints(self.target_dictionary, self.source_dictionary)
            )
        return generator

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        search = getattr(generator, "search", None)
        if isinstance(search, TreeConstrainedBeamSearch):  # this generator's own constraints
            src_lengths = sample["net_input"]["src_lengths"]  # words + the appended EOS
            # SequenceGenerator's own limit: EOS is forced at step max_len
            max_len = min(
                int(generator.max_len_a * src_lengths.max().item() + generator.max_len_b), generator.max_len - 1
            )
            ids = sample["id"].tolist() if "id" in sample else list(range(len(src_lengths)))
            search.constraints.set_batch(ids, sample["net_input"]["src_tokens"], max_len)
        return super().inference_step(generator, models, sample, prefix_tokens, constraints)
