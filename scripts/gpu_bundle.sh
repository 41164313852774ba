#!/usr/bin/env bash
# moved to benchmarks/gpu_bundle.sh (benchmarks/README.md); this file keeps `bash scripts/gpu_bundle.sh` working.
exec bash "$(dirname "${BASH_SOURCE[0]}")/../benchmarks/gpu_bundle.sh" "$@"
