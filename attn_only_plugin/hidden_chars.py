"""Finds characters that text editors do not show but that change tokens: a UTF-8 byte order
mark, zero-width spaces and joiners, soft hyphens, bidirectional marks.

A sentence holding one looks right on screen and is segmented into pieces that no training
sentence had. Used by fairseq-interactive's input check (input_checks.py) and
scripts/spm_prepare.py; imports nothing, so a script can load this file alone.
"""
import unicodedata

HIDDEN = {
    "\ufeff": "BYTE ORDER MARK",
    "\u200b": "ZERO WIDTH SPACE",
    "\u200c": "ZERO WIDTH NON-JOINER",
    "\u200d": "ZERO WIDTH JOINER",
    "\u2060": "WORD JOINER",
    "\u00ad": "SOFT HYPHEN",
    "\u200e": "LEFT-TO-RIGHT MARK",
    "\u200f": "RIGHT-TO-LEFT MARK",
}

# a shell command that deletes all of them (GNU sed, UTF-8 bytes)
REMOVE = r"LC_ALL=C sed -i 's/\xef\xbb\xbf\|\xe2\x80[\x8b-\x8f]\|\xe2\x81\xa0\|\xc2\xad//g' FILE"


def find_hidden(text: str):
    """(column from 1, 'U+XXXX NAME') of the first hidden character in text, or None."""
    for column, char in enumerate(text, 1):
        if char in HIDDEN:
            return column, f"U+{ord(char):04X} {unicodedata.name(char, HIDDEN[char])}"
    return None
