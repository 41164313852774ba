#!/usr/bin/env bash
# moved to benchmarks/reversal_search.sh (a measurement of this project: benchmarks/README.md); this
# file keeps `bash studies/reversal_search.sh` working by running that one with the same arguments.
set -euo pipefail
exec bash "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/benchmarks/reversal_search.sh" "$@"
