"""moved to attn-only-training-flops (attn_only_tools.cli.training_flops);
this file keeps `python scripts/training_flops.py` working."""

import sys

from attn_only_tools.cli.training_flops import main

if __name__ == "__main__":
    sys.exit(main())
