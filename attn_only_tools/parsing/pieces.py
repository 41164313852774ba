"""Subword sources for section 6.3's parser (not in the paper, which feeds the encoder words): the
source sentence as sentencepiece pieces (attn-only-spm-prepare --source-only), read back as words
wherever the parser needs them, since its targets hold words and brackets, not pieces. Sentencepiece
marks a piece that starts a word with ``▁`` (U+2581): ``▁re tire ▁.`` is ``retire .``.
"""

from typing import List, Sequence

WORD_START = "\u2581"


def is_pieces(symbols: Sequence[str]) -> bool:
    """Whether a vocabulary or sentence is sentencepiece pieces: some symbol starts a word with ``▁``
    (a treebank word never does)."""
    return any(symbol.startswith(WORD_START) for symbol in symbols)


def join_pieces(pieces: Sequence[str], unk: str = "<unk>") -> List[str]:
    """The words a sentence's pieces spell: each run from a piece that starts with ``▁`` up to the
    next, joined without the ``▁``; a word with an unknown piece (``unk``) inside is ``unk`` whole."""
    words: List[str] = []
    for piece in pieces:
        if piece.startswith(WORD_START) or not words:
            words.append(piece.removeprefix(WORD_START))
        else:
            words[-1] += piece
    return [unk if unk in word else word for word in words]
