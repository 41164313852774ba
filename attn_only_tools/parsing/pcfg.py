"""A treebank PCFG parser, the classical baseline for Section 6.3 / Table 4 of Vaswani et al. (2017)
(which compares the Transformer with parsers trained on the same WSJ trees): the unlexicalized
PCFG of Klein & Manning (2003) read off the training trees, with parent annotation (v=2),
right-factored binarization with horizontal Markovization (h=2), relative-frequency rule
probabilities, unary chains by their max-product closure, a rare-word lexicon, and exact Viterbi
CKY. Numpy only; nothing here imports fairseq or torch.

    parser = PCFGParser.train(normalized_trees, v=2, h=2, rare=3)
    tree, fallback = parser.parse(words)            # or parser.parse(words, tags=gold_tags)

The defaults v=2, h=2, rare=3 (lexicon.py) are the settings the valid split (wsj_0160-0169) of the
NLTK WSJ sample picks (docs/parsing.md). When the grammar derives no tree for a sentence,
``parse`` returns the right-branching tree and says so (the caller counts them).
"""

from typing import Optional, Sequence, Tuple

import numpy as np

from .cky import Chart
from .grammar import Grammar, binarize, count_rules, debinarize
from .lexicon import Lexicon
from .linearize import right_branching_tree
from .ptb import Tree


class PCFGParser:
    """A grammar and a lexicon trained together."""

    def __init__(self, grammar: Grammar, lexicon: Lexicon):
        self.grammar, self.lexicon = grammar, lexicon

    @classmethod
    def train(cls, trees: Sequence[Tree], v: int = 2, h: int = 2, rare: int = 3) -> "PCFGParser":
        """Trees as ``linearize.normalize`` returns them (plain labels, no traces); rare: see Lexicon."""
        if not trees:
            raise ValueError("no training trees")
        rules, _ = count_rules([binarize(t, v, h) for t in trees])
        lexicon = Lexicon([(t.words(), t.tags()) for t in trees], rare)
        return cls(Grammar(rules, lexicon.tags, v, h), lexicon)

    def chart(self, words: Sequence[str], tags: Optional[Sequence[str]] = None) -> Chart:
        """The Viterbi chart from the words, or from the given POS tags alone (then the words only
        label the leaves)."""
        scores = self.lexicon.scores(words) if tags is None else self.lexicon.gold(tags)
        return Chart(self.grammar, scores)

    def parse(self, words: Sequence[str], tags: Optional[Sequence[str]] = None) -> Tuple[Tree, bool]:
        """(the Viterbi tree with plain labels, False), or (the right-branching tree with ``XX``
        tags, True) when the grammar derives no tree over the sentence."""
        words = list(words)
        if not words:
            raise ValueError("cannot parse an empty sentence")
        best = self.chart(words, tags).tree(words)
        if best is None:
            return right_branching_tree(words), True
        return debinarize(best), False

    def score(self, tree: Tree, tags_only: bool = False) -> float:
        """Log probability of a plain tree under the grammar and lexicon (-inf if it uses a rule or
        emission the model lacks); tags_only scores it as ``parse(words, tags)`` does."""
        binary = binarize(tree, self.grammar.v, self.grammar.h)
        emissions = self.lexicon.gold(tree.tags()) if tags_only else self.lexicon.scores(tree.words())
        column = {t: i for i, t in enumerate(self.lexicon.tags)}
        total = sum(emissions[i, column[t]] if t in column else -np.inf for i, t in enumerate(tree.tags()))
        return total + sum(self.grammar.rule_logp(lhs, rhs) * n for (lhs, *rhs), n in count_rules([binary])[0].items())
