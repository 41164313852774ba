"""moved to attn-only-shuffle-split (attn_only_tools.cli.shuffle_split);
this file keeps `python scripts/shuffle_split.py` working."""

import sys

from attn_only_tools.cli.shuffle_split import main

if __name__ == "__main__":
    sys.exit(main())
