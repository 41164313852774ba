#!/usr/bin/env bash
# Pack what the GPU machine lent through the `device` tool lacks for benchmarks/benchmark.py, so that
# the GPU benchmark is one `run` call. That machine has no network; its image holds Python 3.12,
# a CUDA torch, numpy, regex, sacrebleu, sentencepiece, tqdm, packaging and scikit-learn (listed
# in the tool's KINDS.md), but not fairseq, hydra-core, omegaconf, antlr4 or bitarray.
#
#   bash benchmarks/gpu_bundle.sh [PYTHON_VERSION]    # default 3.12 (the device's); writes .gpu_bundle/
#
# then, on the device (carry [".gpu_bundle"]):
#   export PYTHONPATH=$PWD/.gpu_bundle/site:$PWD
#   python3 benchmarks/benchmark.py --preset big --device cuda --amp --updates 20 --out $OUT/big.json
#
# CTranslate2 (the benchmark's CTranslate2 columns, attn-only-translate-ctranslate2): the wheel of the
# version pyproject.toml pins, for PYTHON_VERSION (CPU and CUDA, ~43 MB), goes into .gpu_bundle_ct2/;
# carry both folders (~51 MB with the working tree, under the device tool's 64 MiB a call) and unpack
# it into the bundle there:
#   python3 -m zipfile -e .gpu_bundle_ct2/ctranslate2-*.whl .gpu_bundle/site
# What the bundle measured on the lent GPUs, and where CTranslate2's CUDA build does not load (it
# needs CUDA 12's libcublas.so.12): docs/speed.md, "GPUs".
#
# What goes in .gpu_bundle/site (ignored by git; ~12 MB): fairseq-fixed's wheel for PYTHON_VERSION
# from PyPI (the same version as this .venv's) without its examples/ and its torch-bound C++
# extensions, with fairseq_cli (so `python3 -m fairseq_cli.train` runs there); where PyPI has no such
# wheel, this .venv's fairseq sources without compiled extensions (enough for the benchmark),
# the pure-Python hydra, omegaconf and antlr4 packages from the same .venv, and bitarray's wheel for
# PYTHON_VERSION from PyPI. Checked here by running the tiny benchmark with PYTHONPATH on this
# bundle in a venv that has none of those packages (see docs/speed.md, "GPUs").
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY_VERSION="${1:-3.12}"
VENV="${VENV:-$ROOT/.venv}"
OUT="$ROOT/.gpu_bundle"
OUT_CT2="$ROOT/.gpu_bundle_ct2"
SITE="$(ls -d "$VENV"/lib/python3*/site-packages 2>/dev/null | head -1 || true)"
if [ -z "$SITE" ] || [ ! -d "$SITE/fairseq" ]; then
  echo "error: no fairseq in $VENV: run 'bash scripts/install.sh' first (the bundle is copied from it)" >&2
  exit 1
fi
BITARRAY="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("bitarray"))')"

FAIRSEQ="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("fairseq-fixed"))')"
rm -rf "$OUT.tmp" && mkdir -p "$OUT.tmp/site"
echo "[gpu_bundle] fairseq-fixed $FAIRSEQ wheel for Python $PY_VERSION (manylinux x86-64) from PyPI" >&2
if "$VENV/bin/python" -m pip download -q --no-deps --only-binary=:all: -d "$OUT.tmp/wheel" \
    --python-version "$PY_VERSION" --implementation cp --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 "fairseq-fixed==$FAIRSEQ"; then
  # its Cython and C extensions (batching, token blocks, BLEU) make fairseq-train and -generate run
  # there; the C++ ones built against the wheel's torch (libbase, libnat, the alignment binding) would
  # not load on another torch, and nothing here imports them
  "$VENV/bin/python" -m zipfile -e "$OUT.tmp/wheel"/fairseq_fixed-*.whl "$OUT.tmp/site"
  rm -rf "$OUT.tmp/wheel" "$OUT.tmp/site"/*.dist-info "$OUT.tmp/site"/alignment_train_cpu_binding*.so \
         "$OUT.tmp/site"/fairseq/libbase*.so "$OUT.tmp/site"/fairseq/libnat*.so
else  # no wheel for that Python: the sources of this .venv, without compiled extensions (the benchmark needs none)
  echo "[gpu_bundle] no such wheel: fairseq's Python sources from $SITE instead (the benchmark runs; fairseq-train does not)" >&2
  cp -r "$SITE/fairseq" "$SITE/fairseq_cli" "$OUT.tmp/site/"
  find "$OUT.tmp/site" -name "*.so" -delete
fi
echo "[gpu_bundle] hydra, omegaconf, antlr4 (pure Python) from $SITE" >&2
for pkg in hydra omegaconf antlr4; do
  cp -r "$SITE/$pkg" "$OUT.tmp/site/"
done
find "$OUT.tmp/site" -name "__pycache__" -prune -exec rm -rf {} +
# fairseq/examples (15 of fairseq's 18 MB) is the research projects' code, which fairseq's import
# never loads (its speech tasks import a top-level `examples`, only when used): without it the
# bundle and the CTranslate2 wheel fit in one device call (64 MiB)
rm -rf "$OUT.tmp/site/fairseq/examples"

echo "[gpu_bundle] bitarray $BITARRAY for Python $PY_VERSION (manylinux x86-64) from PyPI" >&2
"$VENV/bin/python" -m pip install -q --no-deps --only-binary=:all: --target "$OUT.tmp/site" \
    --python-version "$PY_VERSION" --implementation cp --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 "bitarray==$BITARRAY" \
  || { echo "error: no bitarray $BITARRAY wheel for Python $PY_VERSION: pass another version or check the network" >&2; exit 1; }

source "$ROOT/scripts/pyproject_pins.sh"
CT2_VERSION="$(pinned "$VENV/bin/python" ctranslate2)"  # the version pyproject.toml pins: the export writes its format
if [ -n "$CT2_VERSION" ]; then
  echo "[gpu_bundle] ctranslate2 $CT2_VERSION wheel for Python $PY_VERSION (manylinux x86-64) from PyPI" >&2
  rm -rf "$OUT_CT2.tmp" && mkdir -p "$OUT_CT2.tmp"
  "$VENV/bin/python" -m pip download -q --no-deps --only-binary=:all: -d "$OUT_CT2.tmp" \
      --python-version "$PY_VERSION" --implementation cp --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 "ctranslate2==$CT2_VERSION" \
    || { echo "error: no ctranslate2 $CT2_VERSION wheel for Python $PY_VERSION: pass another version or check the network" >&2; exit 1; }
  rm -rf "$OUT_CT2" && mv "$OUT_CT2.tmp" "$OUT_CT2"
fi

rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
echo "[gpu_bundle] ok: $OUT ($(du -sh "$OUT" | cut -f1)); on the device: export PYTHONPATH=\$PWD/.gpu_bundle/site:\$PWD" >&2
