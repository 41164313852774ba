#!/usr/bin/env bash
# Install everything (scripts/install.sh, idempotent) and run the test suite on the CPU.
#   bash scripts/test.sh [pytest args]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/install.sh"
cd "$ROOT"
exec "${VENV:-$ROOT/.venv}/bin/python" -m pytest "${@:--q}"
