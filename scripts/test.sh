#!/usr/bin/env bash
# Install everything (scripts/install.sh, idempotent) and run the test suite on the CPU.
#   bash scripts/test.sh [pytest args]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/install.sh"
cd "$ROOT"
# One thread per process unless OMP_NUM_THREADS is set: the suite is small models and fairseq CLIs
# in subprocesses, whose threads mostly wait on each other. On 2 cores from a fresh clone: 50
# minutes at torch's 2 threads (49d0cb5), 23 at one thread beside another one-thread job (1ec7a4b).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec "${VENV:-$ROOT/.venv}/bin/python" -m pytest "${@:--q}"
