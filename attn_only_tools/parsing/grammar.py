"""A treebank PCFG, the classical baseline of Table 4 / Section 6.3 of Vaswani et al. (2017), which
compares the Transformer with parsers trained on the same WSJ trees; here the unlexicalized PCFG of
Klein & Manning (2003, "Accurate Unlexicalized Parsing"): rules read off the training trees after
parent annotation (Johnson 1998; vertical order v) and right-factored binarization with horizontal
Markovization (order h), probabilities by relative frequency.

Trees are taken as ``linearize.normalize`` leaves them (``-NONE-`` dropped, function tags
stripped), so the grammar sees what EVALB and the Transformer see. Symbols are strings:

* the start symbol ``TOP`` (EVALB's COLLINS.prm deletes a TOP bracket; it is never printed);
* a phrase ``X`` under parent ``P`` is ``X^P`` with v=2 (``S^TOP`` for the tree's top), ``X`` with
  v=1; POS tags are never annotated;
* a node with children c_1 ... c_m (m >= 3) becomes ``X -> c_1 @X<..>``, ``@X<..> -> c_2 @X<..>``,
  ..., ``@X<..> -> c_{m-1} c_m``; each intermediate ``@X<..>`` (X as annotated) names the last h
  siblings already generated to its left (their plain labels, space separated), so that with h=2
  ``(NP^S DT JJ JJ NN)`` gives ``NP^S -> DT @NP^S<DT>``, ``@NP^S<DT> -> JJ @NP^S<DT JJ>``,
  ``@NP^S<DT JJ> -> JJ NN``. Labels never hold spaces, so no two histories share a name.

Unary rules (``X -> Y``, ``TOP -> X``) are kept and parsed through their max-product closure
(``unary_closure``). The lexicon is in ``lexicon.py``, the parser in ``cky.py``.
"""

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import numpy as np

from .ptb import Tree

START = "TOP"
_RESERVED = ("^", "@", "<", ">")


def _annotated(label: str, parent: str, v: int) -> str:
    return f"{label}^{parent}" if v >= 2 else label


def binarize(tree: Tree, v: int = 2, h: int = 2) -> Tree:
    """The normalized treebank tree under ``TOP``, parent-annotated (v) and right-factored with
    horizontal Markovization (h); preterminals are copied unchanged."""
    if v not in (1, 2) or h < 0:
        raise ValueError(f"v must be 1 or 2 and h >= 0 (got v={v}, h={h})")
    return Tree(START, [_binarize(tree, START, v, h)])


def _binarize(node: Tree, parent: str, v: int, h: int) -> Tree:
    if node.is_preterminal:
        return Tree(node.label, word=node.word)
    if any(mark in node.label for mark in _RESERVED) or not node.label:
        raise ValueError(
            f"phrase label {node.label!r} is empty or holds one of {' '.join(_RESERVED)}, which "
            "the grammar's symbols use: rename it in the treebank"
        )
    label = _annotated(node.label, parent, v)
    kids = [_binarize(child, node.label, v, h) for child in node.children]
    return Tree(label, _factor(label, kids, [child.label for child in node.children], h))


def _factor(label: str, kids: List[Tree], plain: List[str], h: int) -> List[Tree]:
    """Right-factor ``label -> kids`` into binary steps (kids[0] stays, the rest go under @ nodes)."""
    if len(kids) <= 2:
        return kids

    def name(k: int) -> str:  # the intermediate after the first k children
        return f"@{label}<{' '.join(plain[max(0, k - h) : k])}>"

    node = Tree(name(len(kids) - 2), kids[-2:])
    for k in range(len(kids) - 3, 0, -1):
        node = Tree(name(k), [kids[k], node])
    return [kids[0], node]


def debinarize(tree: Tree) -> Tree:
    """Undo ``binarize``: drop ``TOP``, splice the ``@`` intermediates into their parents, and cut the
    parent annotation (``NP^S`` -> ``NP``)."""
    if tree.label != START or len(tree.children) != 1:
        raise ValueError(f"not a binarized tree: its root is {tree.label!r}, not {START} over one child")
    return _debinarize(tree.children[0])


def _debinarize(node: Tree) -> Tree:
    if node.is_preterminal:
        return Tree(node.label, word=node.word)
    kids = []
    for child in node.children:
        undone = _debinarize(child)
        kids.extend(undone.children if child.label.startswith("@") else [undone])
    return Tree(node.label.split("^", 1)[0], kids)


@dataclass
class Rules:
    """Rules of one arity as arrays sorted by parent: ``starts`` are the offsets where each parent of
    ``parents`` begins (for np.maximum.reduceat). ``right`` is empty for unary rules."""

    parent: np.ndarray
    left: np.ndarray
    right: np.ndarray
    logp: np.ndarray
    parents: np.ndarray
    starts: np.ndarray

    @classmethod
    def build(cls, rows: Sequence[Tuple]) -> "Rules":
        """rows: (parent, left[, right], log probability), any order."""
        rows = sorted(rows)
        columns = list(zip(*rows, strict=False)) if rows else [(), (), (), ()]
        parent = np.array(columns[0], dtype=np.int64)
        right = np.array(columns[2], dtype=np.int64) if len(columns) == 4 else np.zeros(0, np.int64)
        parents, starts = np.unique(parent, return_index=True)
        return cls(
            parent,
            np.array(columns[1], dtype=np.int64),
            right,
            np.array(columns[-1], dtype=np.float64),
            parents,
            starts,
        )

    def of(self, parent: int) -> slice:
        """The rows of ``parent``'s rules."""
        lo, hi = np.searchsorted(self.parent, [parent, parent + 1])
        return slice(int(lo), int(hi))


def count_rules(trees: Sequence[Tree]) -> Tuple[Counter, Counter]:
    """(rule counts {(lhs, rhs labels...): n}, lexical counts {(tag, word): n}) of binarized trees."""
    rules, lexical = Counter(), Counter()
    stack = list(trees)
    while stack:
        node = stack.pop()
        if node.is_preterminal:
            lexical[node.label, node.word] += 1
            continue
        rules[(node.label,) + tuple(child.label for child in node.children)] += 1
        stack.extend(node.children)
    return rules, lexical


class Grammar:
    """Symbols, binary and unary rules with relative-frequency log probabilities
    (P(X -> Y Z) = c(X -> Y Z) / c(X)), and the unary closure. Tags are the symbols that have words."""

    def __init__(self, rule_counts: Counter, tags: Sequence[str], v: int, h: int):
        self.v, self.h = v, h
        phrases = {lhs for lhs, *_ in rule_counts}
        clash = phrases.intersection(tags)
        if clash:
            raise ValueError(f"label {sorted(clash)[0]!r} is both a POS tag and a phrase label: rename one")
        children = {c for _, *rhs in rule_counts for c in rhs}
        self.symbols = sorted(phrases | children | set(tags))
        self.index: Dict[str, int] = {s: i for i, s in enumerate(self.symbols)}
        self.tags = np.array([self.index[t] for t in sorted(tags)], dtype=np.int64)
        self.start = self.index[START]
        lhs_total = defaultdict(int)
        for (lhs, *_), n in rule_counts.items():
            lhs_total[lhs] += n
        self.logp = {rule: float(np.log(n / lhs_total[rule[0]])) for rule, n in rule_counts.items()}
        rows = {1: [], 2: []}
        for (lhs, *rhs), logp in self.logp.items():
            rows[len(rhs)].append((self.index[lhs], *(self.index[c] for c in rhs), logp))
        self.binary, self.unary = Rules.build(rows[2]), Rules.build(rows[1])
        self.closure, self._hop = unary_closure(len(self.symbols), self.unary)

    def rule_logp(self, lhs: str, rhs: Sequence[str]) -> float:
        """log P(lhs -> rhs), -inf for a rule never seen in training."""
        return self.logp.get((lhs, *rhs), -np.inf)

    def chain(self, a: int, b: int) -> List[int]:
        """The best unary chain a -> ... -> b (a != b), as symbol ids from a to b."""
        path = [a]
        while path[-1] != b:
            path.append(self._hop[path[-1], b])
        return path


def unary_closure(n_symbols: int, unary: Rules):
    """Max-product closure of the unary rules: for each a != b, the best chain a -> ... -> b of one
    or more unary rules (Floyd-Warshall on log probabilities <= 0, so cycles never help).
    Returns (Rules with parent a, left b and the chain's log probability, {(a, b): the chain's
    second symbol})."""
    involved = np.unique(np.concatenate([unary.parent, unary.left]))
    k = len(involved)
    local = np.full(n_symbols, -1, dtype=np.int64)
    local[involved] = np.arange(k)
    best = np.full((k, k), -np.inf)
    hop = np.full((k, k), -1, dtype=np.int64)
    a, b = local[unary.parent], local[unary.left]
    best[a, b], hop[a, b] = unary.logp, b
    for m in range(k):
        through = best[:, m : m + 1] + best[m : m + 1, :]  # (k, k): a -> m -> b
        better = through > best
        best = np.where(better, through, best)
        hop = np.where(better, hop[:, m : m + 1], hop)
    np.fill_diagonal(best, -np.inf)
    a, b = np.nonzero(np.isfinite(best))
    pairs = list(zip(involved[a].tolist(), involved[b].tolist(), strict=False))
    next_hop = dict(zip(pairs, involved[hop[a, b]].tolist(), strict=False))
    return Rules.build([(p, c, s) for (p, c), s in zip(pairs, best[a, b].tolist(), strict=False)]), next_hop
