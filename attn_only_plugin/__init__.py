"""attn_only_plugin: "Attention Is All You Need" (Vaswani et al. 2017) as a fairseq plugin.

    fairseq-train --user-dir attn_only_plugin --arch transformer_base \
        --criterion paper_label_smoothed_ce --lr-scheduler noam ...

Importing the package registers the model (`attn_only_transformer` with architectures
`transformer_base`, `transformer_big`, `transformer_parse`), the criterion
`paper_label_smoothed_ce`, the schedule `noam`, the optimizer `paper_adam` and the task `translation_paper` (GNMT length penalty), makes torch's safe checkpoint loader accept
fairseq's checkpoints, repairs fairseq-fixed's dropped final batch (fairseq_fixes.py), checks input
(data directory, interactive lines, sentencepiece model, NaN training; input_checks.py; dictionaries,
.bin/.idx files, split sizes, --beam, --update-freq: data_checks.py), and turns every error that ends
a run into a one-line message (errors.py, explain.py).
"""
__version__ = "0.1.0"

from . import data_checks, errors, fairseq_fixes, input_checks, safe_load

safe_load.install()
errors.install_excepthook()
fairseq_fixes.install()
input_checks.install()
data_checks.install()

from . import criterions, lr_scheduler, models, optim, tasks  # noqa: E402,F401  (registration)
from .hub import load  # noqa: E402,F401  (Python API)
from .hub_ctranslate2 import load_ctranslate2  # noqa: E402,F401  (Python API on a CTranslate2 export)
