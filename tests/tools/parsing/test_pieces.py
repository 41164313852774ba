"""parsing/pieces.py: a subword source read back as words (SUBWORDS=N in examples/wsj_parsing.sh)."""

from attn_only_tools.parsing.pieces import is_pieces, join_pieces


def test_pieces_join_into_the_words_they_spell():
    pieces = "\u2581Pierre \u2581Vin k en \u2581, \u2581 61 \u2581years \u2581old".split()
    assert join_pieces(pieces) == ["Pierre", "Vinken", ",", "61", "years", "old"]
    assert join_pieces(["re", "\u2581tire"]) == ["re", "tire"]  # a first piece without the mark is a word
    assert join_pieces([]) == []


def test_a_word_with_an_unknown_piece_is_unknown_whole():
    assert join_pieces("\u2581na <unk> ve \u2581man".split()) == ["<unk>", "man"]
    assert join_pieces("\u2581na ? ve".split(), unk="?") == ["?"]


def test_words_are_not_pieces():
    assert is_pieces(["\u2581The", "cat"]) and not is_pieces(["The", "cat", "<unk>"]) and not is_pieces([])
