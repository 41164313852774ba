"""Section 6.3 of Vaswani et al. (2017); linearization of Vinyals et al. (2015).

Parsing is cast as translation: the source is the sentence, the target the
tree as labelled brackets with every part-of-speech tag replaced by ``XX``::

    (S (NP XX XX )NP (VP XX (NP XX )NP )VP XX )S

Trees are first normalized as EVALB sees them: ``-NONE-`` traces are removed
(with the constituents they leave empty) and function tags / indices are
stripped from phrase labels (``NP-SBJ-1`` -> ``NP``). Labels that start with
``-`` (``-NONE-``, ``-LRB-``, ``-RRB-``) are kept whole; EVALB would blank
such a phrase label, which never occurs in the treebank.

``repair`` is our own deterministic fix-up of malformed decoder output (the
papers do not say how they handle it): garbage tokens are dropped, a closing
bracket closes the innermost open one whatever its label, missing ``XX`` slots
are appended to the innermost open bracket at the end, surplus slots dropped,
empty brackets removed, and several top-level pieces are joined under ``S``.
"""
from typing import List, Sequence, Tuple

from .ptb import Tree

PLACEHOLDER = "XX"
TRACE = "-NONE-"
ROOT_LABEL = "S"


def strip_function_tags(label: str) -> str:
    """``NP-SBJ-1`` -> ``NP``, ``NP=2`` -> ``NP``; ``-LRB-`` stays whole."""
    if label.startswith("-"):
        return label
    for index, char in enumerate(label):
        if char in "-=":
            return label[:index]
    return label


def normalize(tree: Tree) -> Tree:
    """Drop traces, constituents left empty, and function tags (EVALB's view)."""
    result = _normalize(tree)
    if result is None:
        raise ValueError("tree has no words besides -NONE- traces")
    return result


def _normalize(tree: Tree):
    if tree.is_preterminal:
        return None if tree.label == TRACE else Tree(tree.label, word=tree.word)
    children = [kid for kid in map(_normalize, tree.children) if kid is not None]
    return Tree(strip_function_tags(tree.label), children) if children else None


def linearize(tree: Tree) -> Tuple[List[str], List[str]]:
    """(source words, target tokens) of a treebank tree, normalized first."""
    tree = normalize(tree)
    return tree.words(), _tokens(tree)


def _tokens(tree: Tree) -> List[str]:
    if tree.is_preterminal:
        return [PLACEHOLDER]
    inner = [token for child in tree.children for token in _tokens(child)]
    return ["(" + tree.label] + inner + [")" + tree.label]


def replace_tags(tree: Tree, tags: Sequence[str]) -> Tree:
    """A copy of ``tree`` whose preterminals get ``tags`` in order (e.g. gold POS)."""
    tags = list(tags)
    if len(tags) != len(tree.preterminals()):
        raise ValueError(f"{len(tags)} tags for {len(tree.preterminals())} words")
    return _retag(tree, iter(tags))


def _retag(tree: Tree, tags) -> Tree:
    if tree.is_preterminal:
        return Tree(next(tags), word=tree.word)
    return Tree(tree.label, [_retag(child, tags) for child in tree.children])


def delinearize(target_tokens: Sequence[str], words: Sequence[str]) -> Tree:
    """The tree of a well-formed bracket sequence; words fill the XX slots.

    Raises ValueError on any malformation (see ``repair`` for the lenient one).
    """
    stack, done, words = [], [], list(words)
    position = 0
    for token in target_tokens:
        if token == PLACEHOLDER:
            if not stack or position >= len(words):
                raise ValueError("XX outside any bracket or more XX than words")
            stack[-1].children.append(Tree(PLACEHOLDER, word=words[position]))
            position += 1
        elif _is_open(token):
            stack.append(Tree(token[1:]))
        elif token.startswith(")") and stack and token[1:] == stack[-1].label:
            node = stack.pop()
            if not node.children:
                raise ValueError(f"empty bracket {node.label}")
            (stack[-1].children if stack else done).append(node)
        else:
            raise ValueError(f"unexpected token {token!r}")
    if stack or len(done) != 1 or position != len(words):
        raise ValueError("unbalanced brackets or wrong number of XX slots")
    return done[0]


def repair(target_tokens: Sequence[str], words: Sequence[str]) -> Tuple[Tree, bool]:
    """A valid tree with every word exactly once, in order; True if repair was needed."""
    if not words:
        raise ValueError("cannot build a tree for an empty sentence")
    try:
        return delinearize(target_tokens, words), False
    except ValueError:
        pass
    top = Tree(ROOT_LABEL)
    stack, position = [top], 0
    for token in target_tokens:
        if token == PLACEHOLDER and position < len(words):
            stack[-1].children.append(Tree(PLACEHOLDER, word=words[position]))
            position += 1
        elif _is_open(token):
            stack.append(Tree(token[1:]))
        elif token.startswith(")") and len(stack) > 1:
            _close(stack)
    for word in words[position:]:
        stack[-1].children.append(Tree(PLACEHOLDER, word=word))
    while len(stack) > 1:
        _close(stack)
    only = top.children[0] if len(top.children) == 1 else None
    return (only if only is not None and not only.is_preterminal else top), True


def _is_open(token: str) -> bool:
    """``(LABEL`` with a non-empty label free of brackets and spaces."""
    label = token[1:]
    return token[:1] == "(" and bool(label) and not any(c in "() \t\n" for c in label)


def _close(stack: List[Tree]) -> None:
    node = stack.pop()
    if node.children:
        stack[-1].children.append(node)


def right_branching_tree(words: Sequence[str]) -> Tree:
    """Baseline: ``(S XX (S XX (S ... XX XX)))`` over the words."""
    if not words:
        raise ValueError("cannot build a tree for an empty sentence")
    leaves = [Tree(PLACEHOLDER, word=word) for word in words]
    if len(leaves) == 1:
        return Tree(ROOT_LABEL, leaves)
    tree = Tree(ROOT_LABEL, leaves[-2:])
    for leaf in reversed(leaves[:-2]):
        tree = Tree(ROOT_LABEL, [leaf, tree])
    return tree
