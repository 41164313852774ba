"""moved to attn-only-spm-prepare (attn_only_tools.cli.spm_prepare);
this file keeps `python scripts/spm_prepare.py` working."""

import sys

from attn_only_tools.cli.spm_prepare import main

if __name__ == "__main__":
    sys.exit(main())
