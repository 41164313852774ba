"""pyproject.toml is the one place the project's versions are pinned: the exports' version
constants (which their one-line "not installed" errors name) equal its pins, scripts/install.sh and
benchmarks/gpu_bundle.sh write none of their own but read them (scripts/pyproject_pins.sh)."""

import re
import subprocess
import sys

import pytest

from attn_only_plugin.export import CTRANSLATE2_VERSION, TRANSFORMERS_VERSION
from helpers import ROOT

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pip's own copy of tomli
    from pip._vendor import tomli as tomllib


def pins() -> dict:
    """name -> version of every name==version in pyproject.toml's dependencies and extras."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    return dict(re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", r).groups() for r in requirements if "==" in r)


def test_the_exports_name_the_pinned_versions():
    assert (CTRANSLATE2_VERSION, TRANSFORMERS_VERSION) == (pins()["ctranslate2"], pins()["transformers"])


@pytest.mark.parametrize("tool", ["scripts/install.sh", "benchmarks/gpu_bundle.sh"])
def test_the_shell_tools_write_no_pin_of_their_own(tool):
    text = (ROOT / tool).read_text()
    written = [f"{name}=={v}" for name, v in pins().items() if re.search(rf"{re.escape(name)}\s*==\s*[0-9]", text)]
    assert not written and "pyproject_pins.sh" in text, f"{tool} writes {written}: read them from pyproject.toml"


def test_the_shell_tools_read_pyprojects_pins():
    code = f'ROOT="{ROOT}" && source "{ROOT}/scripts/pyproject_pins.sh" && '
    code += f'pinned "{sys.executable}" ctranslate2 && pinned "{sys.executable}" ruff && echo --- && '
    code += f'requirements "{sys.executable}" dev && requirements "{sys.executable}" nothing'
    proc = subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=60)
    ctranslate2, ruff, rest = proc.stdout.split("\n", 2)
    assert (ctranslate2, ruff) == (pins()["ctranslate2"], pins()["ruff"]), proc.stderr
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert rest.split("\n")[1:-1] == project["dependencies"] + project["optional-dependencies"]["dev"]
    assert proc.returncode == 1 and proc.stderr.strip().startswith("error: pyproject.toml has no extra 'nothing'")
