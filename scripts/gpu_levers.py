"""moved to benchmarks/gpu_levers.py (a measurement of this project: benchmarks/README.md); this file keeps
`python scripts/gpu_levers.py` working by running that one with the same arguments."""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    moved = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_levers.py"
    os.execv(sys.executable, [sys.executable, str(moved), *sys.argv[1:]])
