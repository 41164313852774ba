"""Section 6.3 of Vaswani et al. (2017); linearization of Vinyals et al. (2015).

Parsing is cast as translation: the source is the sentence, the target the
tree as labelled brackets with every part-of-speech tag replaced by ``XX``::

    (S (NP XX XX )NP (VP XX (NP XX )NP )VP XX )S

``linearize(tree, target_words=True)`` writes each word itself in its slot instead (the "copy"
linearization, not in either paper): ``(S (NP The man )NP (VP sleeps )VP . )S``. The decoder then
aligns by copying the source word rather than by counting ``XX`` slots.

Trees are first normalized as EVALB sees them: ``-NONE-`` traces are removed
(with the constituents they leave empty) and function tags / indices are
stripped from phrase labels (``NP-SBJ-1`` -> ``NP``). Labels that start with
``-`` (``-NONE-``, ``-LRB-``, ``-RRB-``) are kept whole; EVALB would blank
such a phrase label, which never occurs in the treebank.

Reading a target back (``delinearize``, ``repair``), every token that is not a bracket ``(L`` /
``)L`` is a word slot, whatever it says (``XX``, the word, another word, ``<unk>``): the slots are
filled with the source words in order, so the same bracketing gives the same tree under either
linearization.

``repair`` is our own deterministic fix-up of malformed decoder output (the
papers do not say how they handle it): a closing
bracket closes the innermost open one whatever its label, missing word slots
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


def linearize(tree: Tree, target_words: bool = False) -> Tuple[List[str], List[str]]:
    """(source words, target tokens) of a treebank tree, normalized first; word slots are ``XX``
    (Vinyals et al.) or, with ``target_words``, the words themselves."""
    tree = normalize(tree)
    if target_words:
        clash = next((w for w in tree.words() if w == PLACEHOLDER or not is_word_slot(w)), None)
        if clash is not None:
            raise ValueError(
                f"the word {clash!r} would read as a bracket or as the {PLACEHOLDER} placeholder in a "
                f"target with words (sentence {' '.join(tree.words()[:8])!r}...): escape it as the "
                "treebank escapes brackets (-LRB-), or linearize without --target-words"
            )
    return tree.words(), _tokens(tree, target_words)


def _tokens(tree: Tree, target_words: bool) -> List[str]:
    if tree.is_preterminal:
        return [tree.word if target_words else PLACEHOLDER]
    inner = [token for child in tree.children for token in _tokens(child, target_words)]
    return ["(" + tree.label] + inner + [")" + tree.label]


def is_word_slot(token: str) -> bool:
    """Any token but a bracket ``(L`` / ``)L``: ``XX``, a word, ``<unk>``, a stray ``(``."""
    return not (_is_open(token) or _is_close(token))


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
    """The tree of a well-formed bracket sequence; words fill the word slots in order.

    Raises ValueError on any malformation (see ``repair`` for the lenient one).
    """
    stack, done, words = [], [], list(words)
    position = 0
    for token in target_tokens:
        if is_word_slot(token):
            if not stack or position >= len(words):
                raise ValueError("word slot outside any bracket or more slots than words")
            stack[-1].children.append(Tree(PLACEHOLDER, word=words[position]))
            position += 1
        elif _is_open(token):
            stack.append(Tree(token[1:]))
        elif stack and token[1:] == stack[-1].label:  # a closing bracket
            node = stack.pop()
            if not node.children:
                raise ValueError(f"empty bracket {node.label}")
            (stack[-1].children if stack else done).append(node)
        else:
            raise ValueError(f"unexpected token {token!r}")
    if stack or len(done) != 1 or position != len(words):
        raise ValueError("unbalanced brackets or wrong number of word slots")
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
        if is_word_slot(token):
            if position < len(words):  # surplus slots dropped
                stack[-1].children.append(Tree(PLACEHOLDER, word=words[position]))
                position += 1
        elif _is_open(token):
            stack.append(Tree(token[1:]))
        elif len(stack) > 1:  # a closing bracket, whatever its label
            _close(stack)
    for word in words[position:]:
        stack[-1].children.append(Tree(PLACEHOLDER, word=word))
    while len(stack) > 1:
        _close(stack)
    only = top.children[0] if len(top.children) == 1 else None
    return (only if only is not None and not only.is_preterminal else top), True


def _is_open(token: str) -> bool:
    """``(LABEL`` with a non-empty label free of brackets and spaces."""
    return token[:1] == "(" and _is_label(token[1:])


def _is_close(token: str) -> bool:
    """``)LABEL``, the same labels."""
    return token[:1] == ")" and _is_label(token[1:])


def _is_label(label: str) -> bool:
    return bool(label) and not any(c in "() \t\n" for c in label)


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
