"""The layers of docs/development.md hold: `lint-imports` (import-linter) checks pyproject.toml's
contracts on both packages (attn_only_plugin and attn_only_tools), and the same contracts refuse a
copy of the packages given a forbidden import, so a new import that breaks a layer fails here (and in
CI, which runs the suite)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(package_parent: Path) -> subprocess.CompletedProcess:
    """lint-imports with pyproject.toml's contracts on the packages found in package_parent.
    grimp reads the files without importing them (no fairseq); --no-cache writes nothing."""
    if not LINT_IMPORTS.exists():
        pytest.fail(f"{LINT_IMPORTS} is missing: run `bash scripts/install.sh` (it installs import-linter)")
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache", "--no-logo"],
        cwd=package_parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_package_keeps_every_contract():
    proc = lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout and "Contracts: 7 kept" in proc.stdout, proc.stdout[-2000:]


# (file to add the import to, the import, the contract it breaks)
FORBIDDEN = [
    ("attn_only_plugin/modules/feed_forward.py", "from ..models import transformer", "The paper's modules/"),
    ("attn_only_plugin/guards/save_dir.py", "from ..modules import dropout", "The guards import no model code"),
    ("attn_only_plugin/models/architectures.py", "from ..api import hub", "Nothing imports the faces"),
    ("attn_only_plugin/criterions/label_smoothed_ce.py", "from ..optim import paper_adam", "Layers:"),
    ("attn_only_plugin/api/hub.py", "from ..cli import average_checkpoints", "Layers:"),
    ("attn_only_tools/guards/explain.py", "from .errors import PluginError", "No import cycle"),
    ("attn_only_tools/guards/atomic.py", "from ..parsing import ptb", "attn_only_tools' layers"),
    ("attn_only_tools/parsing/ptb.py", "import fairseq", "attn_only_tools imports neither"),
    ("attn_only_tools/cli/evalb.py", "import torch", "attn_only_tools imports neither"),
    ("attn_only_tools/data/libreoffice.py", "from attn_only_plugin import guards", "attn_only_tools imports neither"),
]


@pytest.mark.parametrize("path, line, contract", FORBIDDEN, ids=[f[0] for f in FORBIDDEN])
def test_a_forbidden_import_breaks_its_contract(tmp_path, path, line, contract):
    for package in ("attn_only_plugin", "attn_only_tools"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path / path
    target.write_text(target.read_text() + f"\n\ndef _added():\n    {line}  # noqa: F401\n")  # inside a function too
    proc = lint_imports(tmp_path)
    assert proc.returncode != 0, proc.stdout[-3000:]
    broken = proc.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, proc.stdout[-3000:]
