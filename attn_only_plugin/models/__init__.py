"""fairseq imports this package itself when given --user-dir; it registers the model and its
architectures."""

from . import transformer  # noqa: F401,I001  (registration: the model before its architectures)
from . import architectures  # noqa: F401,E402
