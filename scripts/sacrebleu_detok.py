"""moved to attn-only-sacrebleu-detok (attn_only_tools.cli.sacrebleu_detok);
this file keeps `python scripts/sacrebleu_detok.py` working."""

import sys

from attn_only_tools.cli.sacrebleu_detok import main

if __name__ == "__main__":
    sys.exit(main())
