"""Section 6.3 of Vaswani et al. (2017): constituency parsing as translation, registered as
`constituency_parsing`.

Training is plain translation (words -> linearized tree, see parsing/linearize.py). Decoding adds
one option the paper does not describe: `--constrain-trees` lets beam search extend a hypothesis
only with tokens that keep it a well-formed tree over exactly the input words (the rules, and the
search that applies them: tasks/tree_constraints.py).

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

from dataclasses import dataclass, field
from typing import List

import numpy as np
import torch
from fairseq.data import Dictionary, data_utils
from fairseq.search import BeamSearch
from fairseq.tasks import register_task
from omegaconf import II

from attn_only_tools.guards.errors import PluginError

from .translation_paper import PaperTranslationConfig, PaperTranslationTask
from .tree_constraints import TreeConstrainedBeamSearch, TreeConstraints

__all__ = ["ConstituencyParsingTask", "ParsingConfig", "TreeConstrainedBeamSearch", "TreeConstraints", "drop_words"]


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


def check_constrain_trees(args) -> None:
    """Refuse, in one line, generation options that --constrain-trees cannot go with: --score-reference
    (no search to constrain) and --no-repeat-ngram-size (it bans the repeated slots and brackets that
    trees are made of, leaving a hypothesis no token at all)."""
    if getattr(args, "score_reference", False):
        raise PluginError(
            "--constrain-trees constrains beam search, and --score-reference does no search (it scores the "
            "reference as given): drop --constrain-trees to score references"
        )
    ngram = getattr(args, "no_repeat_ngram_size", 0) or 0
    if ngram > 0:
        raise PluginError(
            f"--no-repeat-ngram-size {ngram} would ban the repeated word slots and closing brackets that trees "
            "are made of (XX XX, )NP )S), and --constrain-trees allows nothing else: drop --no-repeat-ngram-size"
        )


def check_tree_fits(tree: TreeConstraints, sentence_ids: List[int], max_len_a: float, max_len_b: int) -> None:
    """Refuse a length cap below the smallest tree of the batch's longest sentence: one bracket around
    its words, n + 2 tokens (beam search would be left with no token to choose)."""
    longest = int(tree.n_words.argmax())
    n = int(tree.n_words[longest])
    if n + 2 > tree.max_len:
        raise PluginError(
            f"--constrain-trees: sentence {sentence_ids[longest]} has {n} words, and its smallest tree (one "
            f"bracket around them) takes {n + 2} tokens, more than the length cap of {tree.max_len} (--max-len-a "
            f"{max_len_a:g} x words + --max-len-b {max_len_b}, at most the positions): raise --max-len-b"
        )


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
        if self.cfg.constrain_trees:
            check_constrain_trees(args)
            if getattr(self.cfg, "batched_search", False):
                raise PluginError("--batched-search does not support --constrain-trees: drop one of them")
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
            src_tokens = sample["net_input"]["src_tokens"]  # (B, S)
            ids = sample["id"].tolist() if "id" in sample else list(range(len(src_tokens)))
            tree = search.constraints
            cap = generator.max_len - 1  # SequenceGenerator's own cap: EOS is forced at step max_len
            tree.set_batch(ids, src_tokens, cap)
            # SequenceGenerator's limit a x (words + EOS) + b, with --max-len-a counting words, not a subword
            # source's pieces (for a source of words, src_lengths counts the same); never above its own
            words = tree.n_words.max().item() + 1
            tree.max_len = min(cap, int(generator.max_len_a * words + generator.max_len_b))
            check_tree_fits(tree, ids, generator.max_len_a, generator.max_len_b)
        return super().inference_step(generator, models, sample, prefix_tokens, constraints)
