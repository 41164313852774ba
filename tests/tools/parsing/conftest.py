"""Fixtures for the Section 6.3 parsing tests: the PTB sample and the original C EVALB."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers import PTB_SAMPLE

EVALB_CACHE = Path.home() / ".cache" / "attn_only_plugin" / "evalb"
EVALB_FILES = (
    "COLLINS.prm",
    "new.prm",
    "sample/sample.gld",
    "sample/sample.tst",
    "sample/sample.prm",
)  # the compiled program, never the C source
# Fallback flags for compilers stricter than gcc 12 about this 1997 K&R C.
LENIENT = [
    "-std=gnu89",
    "-Wno-implicit-function-declaration",
    "-Wno-implicit-int",
    "-Wno-incompatible-pointer-types",
    "-Wno-int-conversion",
    "-Wno-pointer-sign",
]


@pytest.fixture(scope="session")
def ptb_files():
    files = sorted(PTB_SAMPLE.glob("*.mrg"))
    if not files:
        pytest.skip(f"PTB sample not found at {PTB_SAMPLE} (it is not shipped with the repo)")
    return files


@pytest.fixture(scope="session")
def ptb_trees(ptb_files):
    from attn_only_tools.parsing.ptb import read_trees

    return [tree for path in ptb_files for tree in read_trees(path)]


def _download_evalb_source(workdir: Path) -> Path:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "allennlp==0.9.0", "-d", str(workdir)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    wheels = sorted(workdir.glob("allennlp-0.9.0-*.whl"))
    if proc.returncode or not wheels:
        why = (proc.stderr.strip().splitlines() or ["no wheel"])[-1]
        pytest.skip(f"cannot download allennlp==0.9.0 (EVALB C source) with pip: {why}")
    source = workdir / "src"
    with zipfile.ZipFile(wheels[0]) as wheel:
        for name in wheel.namelist():
            if name.startswith("allennlp/tools/EVALB/"):
                wheel.extract(name, source)
    return source / "allennlp" / "tools" / "EVALB"


def _compile(gcc: str, source: Path) -> None:
    for flags in ([], LENIENT):
        proc = subprocess.run(
            [gcc, "-O2", *flags, "-o", "evalb", "evalb.c"], cwd=source, capture_output=True, text=True
        )
        if proc.returncode == 0:
            return
    pytest.fail(f"gcc could not compile EVALB's evalb.c:\n{proc.stderr[-2000:]}")


@pytest.fixture(scope="session")
def evalb_c(tmp_path_factory) -> Path:
    """Folder with the compiled C ``evalb`` and its .prm / sample files (cached)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc not found: cannot build the original C EVALB to compare against")
    if not (EVALB_CACHE / "evalb").exists():
        source = _download_evalb_source(tmp_path_factory.mktemp("allennlp"))
        _compile(gcc, source)
        staging = tmp_path_factory.mktemp("evalb-cache")
        for name in EVALB_FILES + ("evalb",):
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / name, staging / name)
        EVALB_CACHE.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(EVALB_CACHE, ignore_errors=True)
        shutil.copytree(staging, EVALB_CACHE)
    return EVALB_CACHE
