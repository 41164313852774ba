"""moved to attn-only-plot-loss (attn_only_tools.cli.plot_loss);
this file keeps `python scripts/plot_loss.py` working."""

import sys

from attn_only_tools.cli.plot_loss import main

if __name__ == "__main__":
    sys.exit(main())
