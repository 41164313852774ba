"""fairseq imports this package itself when given --user-dir; it registers translation_paper."""
from . import translation_paper  # noqa: F401  (registration)
