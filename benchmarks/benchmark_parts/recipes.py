"""fairseq-train's flags of each model's training recipe, for the benchmarks that run fairseq's own
commands (compare_quality.py's runs, cli_train.py, cli_generate.py); each adds its learning rate and
warm-up. Plain lists: this module imports nothing.
"""

# ours: examples/pipeline.sh's train_paper
PAPER = [
    "--criterion",
    "paper_label_smoothed_ce",
    "--label-smoothing",
    "0.1",  # section 5.4
    "--optimizer",
    "paper_adam",  # section 5.3: (0.9, 0.98, 1e-9) are its defaults
    "--lr-scheduler",
    "noam",  # section 5.3
]
# fairseq's built-in transformer as fairseq's own examples train it, with section 5.3's Adam settings
BUILTIN = [
    "--criterion",
    "label_smoothed_cross_entropy",
    "--label-smoothing",
    "0.1",
    "--optimizer",
    "adam",
    "--adam-betas",
    "(0.9, 0.98)",
    "--adam-eps",
    "1e-9",
    "--lr-scheduler",
    "inverse_sqrt",
]
