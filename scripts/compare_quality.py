"""moved to benchmarks/compare_quality.py (a measurement of this project: benchmarks/README.md); this file keeps
`python scripts/compare_quality.py` working by running that one with the same arguments."""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    moved = Path(__file__).resolve().parents[1] / "benchmarks" / "compare_quality.py"
    os.execv(sys.executable, [sys.executable, str(moved), *sys.argv[1:]])
