"""Exact Viterbi CKY for the treebank PCFG (``grammar.py``), the classical baseline of Section 6.3 /
Table 4 of Vaswani et al. (2017).

Chart layout: ``inside[L]`` is an array (n - L + 1, S) of the best log probability of each of the
S symbols over the span (i, i + L), for each start i; ``binary[L]`` the same before the unary
closure. A span of length L split after a words has its left child at row i of block a and its
right child at row i + a of block L - a, so all spans of one length are scored at once with
contiguous slices ``inside[a][:m]`` and ``inside[L - a][a:a + m]`` (m = n - L + 1), gathered at
the binary rules' left and right children (R rules, sorted by parent). The best over splits (plus
the rule's log probability) is then reduced per parent with np.maximum.reduceat, and the unary
closure is applied to the whole block the same way.

No back-pointers are stored: the tree is recovered top-down by recomputing, for the chosen symbol
and span, the candidates (unary chain or not; rule and split) and taking the best, which finds a
derivation with the chart's score.
"""

from typing import List, Optional, Tuple

import numpy as np

from .grammar import Grammar
from .ptb import Tree


def _close(block: np.ndarray, grammar: Grammar) -> np.ndarray:
    """The block after the unary closure: best of staying and of every chain a -> ... -> b."""
    closure = grammar.closure
    if not len(closure.parent):
        return block
    through = block[:, closure.left] + closure.logp  # (m, closure pairs)
    out = block.copy()
    out[:, closure.parents] = np.maximum(out[:, closure.parents], np.maximum.reduceat(through, closure.starts, axis=1))
    return out


class Chart:
    """The Viterbi chart of one sentence given its (n, tags) lexical log scores."""

    def __init__(self, grammar: Grammar, tag_scores: np.ndarray):
        self.grammar, self.n = grammar, len(tag_scores)
        first = np.full((self.n, len(grammar.symbols)), -np.inf)
        first[:, grammar.tags] = tag_scores
        self.binary, self.inside = {1: first}, {1: _close(first, grammar)}
        self._finite = {1: np.isfinite(self.inside[1])}
        for length in range(2, self.n + 1):
            block = self._binary_block(length)
            self.binary[length], self.inside[length] = block, _close(block, grammar)
            self._finite[length] = np.isfinite(self.inside[length])

    def _binary_block(self, length: int) -> np.ndarray:
        """(m, S) best binary derivations of the m = n - length + 1 spans of this length. For each
        split only the rules whose children are finite somewhere in their blocks are gathered
        (about a sixth of them on the WSJ sample): the others cannot change the maximum."""
        rules, m = self.grammar.binary, self.n - length + 1
        best = np.full((m, len(rules.parent)), -np.inf)  # (m, R)
        for a in range(1, length):
            left, right = self.inside[a][:m], self.inside[length - a][a : a + m]
            live = np.flatnonzero(
                self._finite[a][:m].any(0)[rules.left] & self._finite[length - a][a : a + m].any(0)[rules.right]
            )
            if len(live):
                s = np.take(left, rules.left[live], axis=1)  # (m, live rules)
                s += np.take(right, rules.right[live], axis=1)
                best[:, live] = np.maximum(s, np.take(best, live, axis=1), out=s)
        best += rules.logp
        block = np.full((m, len(self.grammar.symbols)), -np.inf)
        if len(rules.parent):
            block[:, rules.parents] = np.maximum.reduceat(best, rules.starts, axis=1)
        return block

    @property
    def score(self) -> float:
        """Log probability of the best tree (-inf when the grammar derives none)."""
        return float(self.inside[self.n][0, self.grammar.start])

    def tree(self, words: List[str]) -> Optional[Tree]:
        """The Viterbi tree in the grammar's (binarized) symbols, or None without a parse."""
        if not np.isfinite(self.score):
            return None
        return self._node(0, self.n, self.grammar.start, words, True)

    def _node(self, i: int, length: int, symbol: int, words, chains: bool) -> Tree:
        g = self.grammar
        if chains:
            rows = g.closure.of(symbol)
            stay = self.binary[length][i, symbol]
            via = self.binary[length][i, g.closure.left[rows]] + g.closure.logp[rows]
            if len(via) and via.max() > stay:
                path = g.chain(symbol, int(g.closure.left[rows][via.argmax()]))
                node = self._node(i, length, path[-1], words, False)
                for s in reversed(path[:-1]):
                    node = Tree(g.symbols[s], [node])
                return node
        if length == 1:
            return Tree(g.symbols[symbol], word=words[i])
        split, rule = self._best_split(i, length, symbol)
        kids = [
            self._node(i, split, int(g.binary.left[rule]), words, True),
            self._node(i + split, length - split, int(g.binary.right[rule]), words, True),
        ]
        return Tree(g.symbols[symbol], kids)

    def _best_split(self, i: int, length: int, symbol: int) -> Tuple[int, int]:
        rules = self.grammar.binary
        rows = rules.of(symbol)
        scores = (
            np.stack(
                [
                    self.inside[a][i, rules.left[rows]] + self.inside[length - a][i + a, rules.right[rows]]
                    for a in range(1, length)
                ]
            )
            + rules.logp[rows]
        )  # (splits, rules of symbol)
        a, r = np.unravel_index(int(scores.argmax()), scores.shape)
        return int(a) + 1, rows.start + int(r)
