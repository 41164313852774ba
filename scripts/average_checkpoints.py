"""moved to attn-only-average-checkpoints (attn_only_plugin.cli.average_checkpoints);
this file keeps `python scripts/average_checkpoints.py` working."""

import sys

from attn_only_plugin.cli.average_checkpoints import main

if __name__ == "__main__":
    sys.exit(main())
