"""Penn Treebank bracketed trees, the data of Section 6.3 of Vaswani et al. (2017).

Reads the WSJ ``.mrg`` format: several trees per file, each possibly spread
over many lines and wrapped in an unlabelled top bracket ``( (S ...) )``.
The unlabelled top bracket is dropped when it has a single child (it carries
no information); otherwise it is kept as a node with the empty label.
"""

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

_TOKEN = re.compile(r"\(|\)|[^\s()]+")


@dataclass
class Tree:
    """A constituent: a preterminal has ``word`` set and no children."""

    label: str
    children: List["Tree"] = field(default_factory=list)
    word: Optional[str] = None

    @property
    def is_preterminal(self) -> bool:
        return self.word is not None

    def words(self) -> List[str]:
        """The sentence, left to right."""
        return [leaf.word for leaf in self.preterminals()]

    def tags(self) -> List[str]:
        """Part-of-speech tags, left to right."""
        return [leaf.label for leaf in self.preterminals()]

    def preterminals(self) -> List["Tree"]:
        if self.is_preterminal:
            return [self]
        return [leaf for child in self.children for leaf in child.preterminals()]

    def __str__(self) -> str:
        return tree_to_str(self)


def tree_to_str(tree: Tree) -> str:
    """One line of PTB brackets, e.g. ``(S (NP (DT the) (NN cat)) (VP (VBD sat)))``."""
    if tree.is_preterminal:
        return f"({tree.label} {tree.word})"
    inner = " ".join(tree_to_str(child) for child in tree.children)
    return f"({tree.label} {inner})"


def _build(tokens: List[str], pos: int, where: str):
    """Parse the bracket opened at ``tokens[pos]``; return (tree, next position)."""
    pos += 1
    label = ""
    if pos < len(tokens) and tokens[pos] not in "()":
        label, pos = tokens[pos], pos + 1
    if pos + 1 < len(tokens) and tokens[pos] not in "()" and tokens[pos + 1] == ")":
        return Tree(label, word=tokens[pos]), pos + 2
    children = []
    while pos < len(tokens) and tokens[pos] == "(":
        child, pos = _build(tokens, pos, where)
        children.append(child)
    if pos >= len(tokens):
        raise ValueError(f"{where}: unbalanced brackets (too many '(')")
    if tokens[pos] != ")":
        raise ValueError(f"{where}: unexpected token {tokens[pos]!r} in bracket {label!r}")
    if not children:
        raise ValueError(f"{where}: empty bracket {label!r}")
    return Tree(label, children), pos + 1


def _unwrap(tree: Tree) -> Tree:
    if tree.label == "" and len(tree.children) == 1:
        return tree.children[0]
    return tree


def parse_tree(text: str, where: str = "tree") -> Tree:
    """Parse exactly one bracketed tree (with or without the empty top bracket)."""
    tokens = _TOKEN.findall(text)
    if not tokens or tokens[0] != "(":
        raise ValueError(f"{where}: a tree must start with '('")
    tree, pos = _build(tokens, 0, where)
    if pos != len(tokens):
        extra = "too many ')'" if tokens[pos] == ")" else f"trailing {tokens[pos]!r}"
        raise ValueError(f"{where}: unbalanced brackets ({extra})")
    return _unwrap(tree)


def _split_trees(text: str, path: str) -> List[tuple]:
    """Cut a file into (tree text, first line number) pieces at depth zero."""
    pieces, depth, start, number, line_no, start_line = [], 0, 0, 0, 1, 1
    for index, char in enumerate(text):
        if char == "\n":
            line_no += 1
        elif char == "(":
            if depth == 0:
                start, start_line, number = index, line_no, number + 1
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"{path}: after tree {number} (line {line_no}): unbalanced brackets (too many ')')")
            if depth == 0:
                pieces.append((text[start : index + 1], start_line))
        elif depth == 0 and not char.isspace():
            word = text[index:].split()[0]
            raise ValueError(f"{path}: line {line_no}: text {word!r} outside any tree")
    if depth > 0:
        raise ValueError(f"{path}: tree {number} (line {start_line}): unbalanced brackets (too many '(')")
    return pieces


def read_trees(path) -> List[Tree]:
    """Every tree of a PTB ``.mrg`` file, in order."""
    path = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        line = e.object[: e.start].count(b"\n") + 1
        raise ValueError(
            f"{path}: line {line}: not UTF-8 text (byte 0x{e.object[e.start]:02x}): convert the "
            "file to UTF-8 first, e.g. iconv -f latin1 -t utf-8"
        ) from None
    trees = [
        parse_tree(piece, f"{path}: tree {n} (line {line})")
        for n, (piece, line) in enumerate(_split_trees(text, path), 1)
    ]
    if not trees:  # a treebank file contributes its trees or is refused, never nothing without a word
        raise ValueError(
            f"{path}: holds no trees ({'empty' if not text else 'whitespace only'}): a treebank file is "
            "never empty, so it was cut short in copying; copy it again, or move it out of the treebank folder"
        )
    return trees
