"""fairseq imports this package itself when given --user-dir; it registers translation_paper and
constituency_parsing."""

from . import constituency_parsing, translation_paper  # noqa: F401  (registration)
