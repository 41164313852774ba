"""moved to attn-only-table3-report (attn_only_tools.cli.table3_report);
this file keeps `python scripts/table3_report.py` working."""

import sys

from attn_only_tools.cli.table3_report import main

if __name__ == "__main__":
    sys.exit(main())
