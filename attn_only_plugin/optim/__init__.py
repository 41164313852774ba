from . import paper_adam  # noqa: F401  (registration)
