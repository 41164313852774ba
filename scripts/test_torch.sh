#!/usr/bin/env bash
# The tests of the GPU speed paths under another torch release than scripts/install.sh's, on the
# CPU: torch.compile's graphs of the layers and of the loss, the variable-length attention kernel's
# arguments, the CUDA-graph step code, the benchmarks' reports. For the release a GPU machine brings
# (docs/speed.md names the lent machines'), so that its run measures instead of failing.
#   bash scripts/test_torch.sh 2.11.0 [pytest args]
# The release goes into a venv of its own, .venv-torch-VERSION (ignored by git), which sees the
# project's .venv (scripts/install.sh, run first) beneath it for everything else. On Linux x86-64
# the PyPI wheel is the CUDA one, with its CUDA libraries (docs/development.md says its size).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION="${1:-}"
if ! [[ "$VERSION" =~ ^[0-9]+\.[0-9]+(\.[0-9]+)?$ ]]; then
  echo "error: give the torch release to test with, e.g. bash scripts/test_torch.sh 2.11.0" >&2
  exit 1
fi
shift
bash "$ROOT/scripts/install.sh"
BASE="$ROOT/.venv"
OTHER="$ROOT/.venv-torch-$VERSION"
if [ ! -x "$OTHER/bin/python" ] || ! "$OTHER/bin/python" -c "import torch, sys; sys.exit(not torch.__version__.startswith('$VERSION'))" 2>/dev/null; then
  rm -rf "$OTHER"
  "$BASE/bin/python" -m venv "$OTHER"
  "$OTHER/bin/python" -m pip install -q "torch==$VERSION"
  # everything but torch from the project's venv, after the release's own packages on the path
  SITE="$("$BASE/bin/python" -c 'import site; print(site.getsitepackages()[0])')"
  OWN="$("$OTHER/bin/python" -c 'import site; print(site.getsitepackages()[0])')"
  echo "import site; site.addsitedir('$SITE')" > "$OWN/zz_project_venv.pth"
fi
cd "$ROOT"
"$OTHER/bin/python" -c "import torch; print('torch', torch.__version__, 'from', torch.__file__)"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# In-process and `python benchmarks/...` tests only: a fairseq console script would run the base torch.
exec "$OTHER/bin/python" -m pytest -p no:cacheprovider \
  tests/modules/test_compiled.py tests/modules/test_varlen.py tests/modules/test_kernels.py \
  tests/modules/test_static_cache.py tests/modules/test_step_graph.py tests/modules/test_beam_reorder.py \
  tests/modules/test_decode_attention.py tests/modules/test_triton_compile.py \
  tests/criterions/test_fused_softmax.py tests/tasks/test_decoder_step.py tests/tasks/test_batched_search.py \
  tests/benchmarks/test_benchmark.py tests/benchmarks/test_gpu_levers.py "${@:--q}"
