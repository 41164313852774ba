"""Shared fixtures; the helpers themselves live in helpers.py."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers import make_dictionary  # noqa: E402


@pytest.fixture
def dictionary():
    return make_dictionary()
