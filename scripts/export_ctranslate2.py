"""moved to attn-only-export-ctranslate2 (attn_only_plugin.cli.export_ctranslate2);
this file keeps `python scripts/export_ctranslate2.py` working."""

import sys

from attn_only_plugin.cli.export_ctranslate2 import main

if __name__ == "__main__":
    sys.exit(main())
