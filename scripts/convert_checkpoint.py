"""moved to attn-only-convert-checkpoint (attn_only_plugin.cli.convert_checkpoint);
this file keeps `python scripts/convert_checkpoint.py` working."""

import sys

from attn_only_plugin.cli.convert_checkpoint import main

if __name__ == "__main__":
    sys.exit(main())
