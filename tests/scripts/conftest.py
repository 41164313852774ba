"""scripts/ is not a package: tests load a script as a module from its path, or run it as a CLI."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture
def script():
    """script('training_flops') -> the module scripts/training_flops.py."""

    def load(name):
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture
def cli():
    """cli('average_checkpoints', *args) -> CompletedProcess of `python scripts/NAME.py ARGS`."""

    def run(name, *args):
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        return subprocess.run(
            [sys.executable, str(SCRIPTS / f"{name}.py"), *map(str, args)],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )

    return run
