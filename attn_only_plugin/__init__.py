"""attn_only_plugin: "Attention Is All You Need" (Vaswani et al. 2017) as a fairseq plugin.

    fairseq-train --user-dir attn_only_plugin --arch transformer_base \
        --criterion paper_label_smoothed_ce --lr-scheduler noam ...

Importing the package registers the model (`attn_only_transformer` with architectures
`transformer_base`, `transformer_big`, `transformer_parse`), the criterion
`paper_label_smoothed_ce`, the schedule `noam`, the optimizer `paper_adam` and the task
`translation_paper` (GNMT length penalty), makes torch's safe checkpoint loader accept fairseq's
checkpoints, repairs fairseq-fixed's dropped final batch (fairseq_fixes.py), checks input (data
directory, interactive lines, sentencepiece model, NaN training: guards/input_checks.py;
dictionaries, .bin/.idx files, split sizes, --beam, --update-freq: guards/data_checks.py), and turns
every error that ends a run into a one-line message (attn_only_tools/guards/errors.py and
explain.py: the sibling package of what needs no fairseq, which this one imports and which never
imports it). The layers (which folder may import which) are in docs/development.md and pyproject.toml.
"""

__version__ = "0.1.0"

# first, before fairseq's slow imports: from here on an error or Ctrl-C that ends the run is one line
from attn_only_tools.guards import errors  # noqa: E402

_hooked = errors.install_excepthook()

import logging  # noqa: E402
import sys  # noqa: E402

# Imported before fairseq (from Python or an attn-only-* command; a fairseq CLI imports fairseq first):
# fairseq's import-time INFO lines ("Please install tensorboardX") are not the command's output, so
# its logger stays at WARNING while it imports, and is given back its level at the end of this file.
_fairseq_logger, _fairseq_level = logging.getLogger("fairseq"), logging.getLogger("fairseq").level
if "fairseq" not in sys.modules:
    _fairseq_logger.setLevel(logging.WARNING)

from . import fairseq_fixes  # noqa: E402
from .guards import data_checks, input_checks, safe_load, wrap  # noqa: E402

for _target in _hooked:
    wrap.record(_target)
safe_load.install()
fairseq_fixes.install()
input_checks.install()
data_checks.install()

from attn_only_tools.guards.errors import PluginError  # noqa: E402,F401  (what every bad input raises; one class for both packages)

from . import criterions, lr_scheduler, models, optim, tasks  # noqa: E402,F401  (registration)
from .api.hub import load  # noqa: E402,F401  (Python API)
from .api.hub_ctranslate2 import load_ctranslate2  # noqa: E402,F401  (Python API on a CTranslate2 export)

_fairseq_logger.setLevel(_fairseq_level)
