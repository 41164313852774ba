"""moved to attn-only-bleu-compound-split (attn_only_tools.cli.bleu_compound_split);
this file keeps `python scripts/bleu_compound_split.py` working."""

import sys

from attn_only_tools.cli.bleu_compound_split import main

if __name__ == "__main__":
    sys.exit(main())
