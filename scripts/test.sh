#!/usr/bin/env bash
# Install everything (scripts/install.sh, idempotent) and run the test suite on the CPU.
#   bash scripts/test.sh [pytest args]          the whole suite (what .ci/run runs), one worker per core
#   bash scripts/test.sh --fast [pytest args]   only the in-process tests: no CLI, script or recipe runs
#   TEST_WORKERS=N bash scripts/test.sh ...     N pytest-xdist workers (1: everything in this process)
# Timings of both tiers, dated: docs/development.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TIER=()
WORKERS="${TEST_WORKERS:-$(nproc)}"  # the whole suite: one pytest-xdist worker per core
if [ "${1:-}" = "--fast" ]; then
  shift
  TIER=(-m "not slow")  # the `slow` marker: tests/conftest.py, docs/development.md "Test tiers"
  WORKERS="${TEST_WORKERS:-1}"  # in this process: the fast tier is mostly imports, which each worker repeats
fi
if ! [[ "$WORKERS" =~ ^[1-9][0-9]{0,3}$ ]]; then
  echo "error: TEST_WORKERS=$WORKERS: give a whole number >= 1 (1 runs the tests in one process)" >&2
  exit 1
fi
PARALLEL=()
if [ "$WORKERS" -gt 1 ]; then
  # each test file on one worker (its module-scoped fixtures, a trained model among them, built once)
  PARALLEL=(-n "$WORKERS" --dist loadfile)
fi
bash "$ROOT/scripts/install.sh"
cd "$ROOT"
# One thread per process unless OMP_NUM_THREADS is set: the suite is small models and fairseq CLIs
# in subprocesses, whose threads mostly wait on each other.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec "${VENV:-$ROOT/.venv}/bin/python" -m pytest ${TIER[@]+"${TIER[@]}"} ${PARALLEL[@]+"${PARALLEL[@]}"} "${@:--q}"
