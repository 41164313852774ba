#!/usr/bin/env bash
# moved to benchmarks/gpu_benchmark.sh (benchmarks/README.md); this file keeps `bash scripts/gpu_benchmark.sh` working.
exec bash "$(dirname "${BASH_SOURCE[0]}")/../benchmarks/gpu_benchmark.sh" "$@"
