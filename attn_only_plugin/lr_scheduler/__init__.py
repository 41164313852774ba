from . import noam  # noqa: F401  (registration)
