"""Finds characters that text editors do not show and that carry no meaning in text: a UTF-8 byte
order mark inside the text, the zero-width space, the word joiner, the soft hyphen and NUL. A byte
order mark that starts a file is an encoding mark, not text: readers strip it (strip_bom).

A sentence holding one looks right on screen and is segmented into pieces that no training
sentence had. The zero-width non-joiner and joiner (U+200C, U+200D) and the direction marks
(U+200E, U+200F) are invisible too but are left alone: Persian, Indic scripts, emoji sequences
and bidirectional text need them. Used by fairseq-interactive's input check (input_checks.py),
the Python API (hub.py), attn-only-spm-prepare and the parsing scorers (attn-only-parse-eval,
attn-only-pcfg-baseline: a sentence whose words differ from its gold tree's is one EVALB cannot score).
"""

import unicodedata

BOM = "\ufeff"  # at the very start of a file it is an encoding mark, not text: strip it there (strip_bom)

HIDDEN = {
    "\x00": "NULL",
    BOM: "BYTE ORDER MARK",
    "\u200b": "ZERO WIDTH SPACE",
    "\u2060": "WORD JOINER",
    "\u00ad": "SOFT HYPHEN",
}

# a shell command that deletes all of them (GNU sed, UTF-8 bytes)
REMOVE = r"LC_ALL=C sed -i 's/\x00\|\xef\xbb\xbf\|\xe2\x80\x8b\|\xe2\x81\xa0\|\xc2\xad//g' FILE"


def strip_bom(text: str, first_line: bool) -> str:
    """Line text without the byte order mark that starts a file (only on its first line)."""
    return text.removeprefix(BOM) if first_line else text


def hidden_in_lines(lines, path) -> str:
    """'' when no line of path (its lines, the first without a starting byte order mark) holds a
    hidden character; else one message naming the first: file, line, column, character, the fix."""
    for number, line in enumerate(lines, 1):
        found = find_hidden(line)
        if found:
            column, name = found
            return (
                f"{path} line {number} holds an invisible character, {name} at column {column}, which would "
                f"make that sentence's words differ from its gold tree's: remove it first, e.g. "
                + REMOVE.replace("FILE", str(path))
            )
    return ""


def find_hidden(text: str):
    """(column from 1, 'U+XXXX NAME') of the first hidden character in text, or None."""
    for column, char in enumerate(text, 1):
        if char in HIDDEN:
            return column, f"U+{ord(char):04X} {unicodedata.name(char, HIDDEN[char])}"
    return None
