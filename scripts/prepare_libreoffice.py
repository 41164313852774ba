"""moved to attn-only-prepare-libreoffice (attn_only_tools.cli.prepare_libreoffice);
this file keeps `python scripts/prepare_libreoffice.py` working."""

import sys

from attn_only_tools.cli.prepare_libreoffice import main

if __name__ == "__main__":
    sys.exit(main())
