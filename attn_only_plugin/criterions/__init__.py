from . import label_smoothed_ce  # noqa: F401  (registration)
