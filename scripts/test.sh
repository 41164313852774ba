#!/usr/bin/env bash
# Install everything (scripts/install.sh, idempotent) and run the test suite on the CPU.
#   bash scripts/test.sh [pytest args]          the whole suite (what .ci/run runs)
#   bash scripts/test.sh --fast [pytest args]   only the in-process tests: no CLI, script or recipe runs
# Timings of both tiers, dated: docs/development.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/install.sh"
cd "$ROOT"
# One thread per process unless OMP_NUM_THREADS is set: the suite is small models and fairseq CLIs
# in subprocesses, whose threads mostly wait on each other.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
TIER=()
if [ "${1:-}" = "--fast" ]; then
  shift
  TIER=(-m "not slow")  # the `slow` marker: tests/conftest.py, docs/development.md "Test tiers"
fi
exec "${VENV:-$ROOT/.venv}/bin/python" -m pytest ${TIER[@]+"${TIER[@]}"} "${@:--q}"
