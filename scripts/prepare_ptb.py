"""moved to attn-only-prepare-ptb (attn_only_tools.cli.prepare_ptb);
this file keeps `python scripts/prepare_ptb.py` working."""

import sys

from attn_only_tools.cli.prepare_ptb import main

if __name__ == "__main__":
    sys.exit(main())
