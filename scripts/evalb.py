"""moved to attn-only-evalb (attn_only_tools.cli.evalb);
this file keeps `python scripts/evalb.py` working."""

import sys

from attn_only_tools.cli.evalb import main

if __name__ == "__main__":
    sys.exit(main())
