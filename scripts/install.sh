#!/usr/bin/env bash
# Install attn_only_plugin and its stack into a virtual environment (default: ./.venv).
#
#   bash scripts/install.sh            # create or reuse .venv, install everything
#   VENV=/path/to/env bash scripts/install.sh
#
# Used by both README set-up commands and by .ci/run. Re-running is fast and changes nothing:
# every step is skipped when what it installs is already there.
#
# Why not `pip install fairseq`: fairseq 0.12.2 does not import on Python >= 3.11 (dataclass
# defaults that are mutable), so we use the maintained fork fairseq-fixed 0.12.3.1, built from
# source with --no-deps: its declared dependencies pull torchaudio, which drags in another torch
# with GBs of CUDA. We install what fairseq really imports instead.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
FAIRSEQ_SPEC="fairseq-fixed==0.12.3.1"

log() { echo "[install] $*" >&2; }
# pip prints a warning per package for this machine's unused local index folders: hide only those.
quiet() { "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

"$PYTHON" - <<'PY' || { echo "[install] error: Python >= 3.10 is required (found $("$PYTHON" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2; exit 1; }
import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)
PY

# A GPU machine brings its own CUDA torch: keep it by letting the venv see system packages.
SYSTEM_TORCH_CUDA=0
if "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.version.cuda else 1)" 2>/dev/null; then
  SYSTEM_TORCH_CUDA=1
fi

if [ ! -x "$VENV/bin/python" ]; then
  if [ "$SYSTEM_TORCH_CUDA" = 1 ]; then
    log "creating $VENV (system site-packages visible: keeping the machine's CUDA torch)"
    "$PYTHON" -m venv --system-site-packages "$VENV"
  else
    log "creating $VENV"
    "$PYTHON" -m venv "$VENV"
  fi
fi
PY="$VENV/bin/python"
PIP=(quiet "$PY" -m pip install --disable-pip-version-check -q)

have() { "$PY" -c "import $1" 2>/dev/null; }

if "$PY" -c "import torch" 2>/dev/null; then
  log "torch $("$PY" -c 'import torch; print(torch.__version__)') already present: kept"
else
  log "installing torch==$TORCH_VERSION"
  "${PIP[@]}" "torch==$TORCH_VERSION"
fi

# What fairseq imports at start-up and during training (scikit-learn: an audio task imports it),
# then pyproject.toml's dependencies and every extra, read from there (scripts/pyproject_pins.sh):
# the versions the project pins are written in pyproject.toml only (CTranslate2 and transformers:
# each export writes that version's model format; import-linter and ruff: their rules and output are
# what tests/test_layers.py and tests/test_lint.py read; hydra-core and omegaconf, which fairseq
# 0.12 needs at those versions). transformers needs no torch of its own and keeps ours.
source "$ROOT/scripts/pyproject_pins.sh"
FAIRSEQ_IMPORTS=(numpy cython cffi regex tqdm bitarray packaging scikit-learn setuptools wheel)
mapfile -t OURS < <(requirements "$PY" all)
[ "${#OURS[@]}" -gt 0 ] || { echo "[install] error: no requirements read from $ROOT/pyproject.toml" >&2; exit 1; }
# One interpreter start checks them all (the version too where one is required), with pip's own
# copy of packaging (the venv may not have packaging yet).
dist_missing() {
  "$PY" - "$@" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version

from pip._vendor.packaging.requirements import Requirement

seen = set()
for spec in sys.argv[1:]:
    req = Requirement(spec)
    if (req.marker is not None and not req.marker.evaluate()) or str(req) in seen:
        continue  # fairseq's and ours name some alike (numpy, tqdm): checked once
    seen.add(str(req))
    try:
        found = version(req.name)  # raises when the package is absent
    except PackageNotFoundError:
        print(spec)
        continue
    if not req.specifier.contains(found, prereleases=True):
        print(spec)
PY
}
mapfile -t missing < <(dist_missing "${FAIRSEQ_IMPORTS[@]}" "${OURS[@]}")
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]}"
  "${PIP[@]}" "${missing[@]}"
fi

if [ -z "$(dist_missing "$FAIRSEQ_SPEC")" ]; then
  log "$FAIRSEQ_SPEC already present: kept"
else
  log "building $FAIRSEQ_SPEC from source (about 3 minutes, once; pip caches the wheel)"
  "${PIP[@]}" --no-deps --no-build-isolation "$FAIRSEQ_SPEC"
fi

# Installed from this checkout: both packages found in ROOT (-I: not through the current directory,
# often the repo root itself) and the installed commands those of pyproject.toml's [project.scripts]
# (an install of an older checkout lacks the newer ones: it is installed again).
installed_here() {
  "$PY" -I - "$ROOT" <<'PY' 2>/dev/null
import importlib.metadata as md, importlib.util as u, os, sys
try:
    import tomllib
except ModuleNotFoundError:
    from pip._vendor import tomli as tomllib
root = sys.argv[1]
specs = [u.find_spec(name) for name in ("attn_only_plugin", "attn_only_tools")]
here = all(s and os.path.dirname(os.path.dirname(s.origin)) == root for s in specs)
with open(os.path.join(root, "pyproject.toml"), "rb") as f:
    wanted = set(tomllib.load(f)["project"].get("scripts", {}))
have = {e.name for e in md.distribution("attn_only_plugin").entry_points if e.group == "console_scripts"}
sys.exit(0 if here and have == wanted else 1)
PY
}
if installed_here; then
  log "attn_only_plugin already installed (editable) from $ROOT"
else
  log "installing attn_only_plugin (editable) from $ROOT"
  "${PIP[@]}" --no-deps --no-build-isolation -e "$ROOT"
fi

"$PY" -I -c "import torch, fairseq, attn_only_plugin; print('[install] ok: torch', torch.__version__, '| fairseq', fairseq.__version__, '| attn_only_plugin', attn_only_plugin.__version__)" 2>&1 | grep -v tensorboardX >&2
