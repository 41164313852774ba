"""moved to attn-only-pcfg-baseline (attn_only_tools.cli.pcfg_baseline);
this file keeps `python scripts/pcfg_baseline.py` working."""

import sys

from attn_only_tools.cli.pcfg_baseline import main

if __name__ == "__main__":
    sys.exit(main())
