"""moved to attn-only-plot-attention (attn_only_plugin.cli.plot_attention);
this file keeps `python scripts/plot_attention.py` working."""

import sys

from attn_only_plugin.cli.plot_attention import main

if __name__ == "__main__":
    sys.exit(main())
