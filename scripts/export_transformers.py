"""moved to attn-only-export-transformers (attn_only_plugin.cli.export_transformers);
this file keeps `python scripts/export_transformers.py` working."""

import sys

from attn_only_plugin.cli.export_transformers import main

if __name__ == "__main__":
    sys.exit(main())
