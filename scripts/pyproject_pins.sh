# pyproject.toml is the one place the project's versions are written (its dependencies and
# extras); the shell tools read them from there. Sourced by scripts/install.sh and
# scripts/gpu_bundle.sh, after they set ROOT (the checkout).
#
#   requirements PYTHON [EXTRA ...]   pyproject.toml's dependencies and those of each EXTRA (all: every
#                                     extra), one requirement a line as written there
#   pinned PYTHON NAME                the version pyproject.toml pins NAME to (NAME==VERSION), or nothing
#
# PYTHON reads the file with tomllib (Python >= 3.11) or pip's own copy of tomli (3.10).

requirements() {
  "$1" - "$ROOT/pyproject.toml" "${@:2}" <<'PY'
import sys

try:
    import tomllib
except ModuleNotFoundError:
    from pip._vendor import tomli as tomllib
with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)["project"]
extras = project.get("optional-dependencies", {})
names = list(extras) if sys.argv[2:] == ["all"] else sys.argv[2:]
for name in names:
    if name not in extras:
        sys.exit(f"error: pyproject.toml has no extra {name!r} (it has {', '.join(extras)})")
print("\n".join(project.get("dependencies", []) + [req for name in names for req in extras[name]]))
PY
}

pinned() {
  requirements "$1" all | sed -nE "s/^$2 *== *([^ ;,]+) *$/\1/p" | head -1
}
