"""moved to attn-only-translate-ctranslate2 (attn_only_plugin.cli.translate_ctranslate2);
this file keeps `python scripts/translate_ctranslate2.py` working."""

import sys

from attn_only_plugin.cli.translate_ctranslate2 import main

if __name__ == "__main__":
    sys.exit(main())
