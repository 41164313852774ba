"""moved to attn-only-parse-eval (attn_only_tools.cli.parse_eval);
this file keeps `python scripts/parse_eval.py` working."""

import sys

from attn_only_tools.cli.parse_eval import main

if __name__ == "__main__":
    sys.exit(main())
