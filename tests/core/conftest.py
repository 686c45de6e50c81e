"""Fixtures for the core tests (helpers live in tests/core/helpers.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:  # lets the tests do `from tests.core.helpers import ...`
    sys.path.insert(0, str(_ROOT))

from tests.core.helpers import IOLAB, Lab, make_lab  # noqa: E402


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    assert IOLAB.exists(), f"{IOLAB} missing: install the package into .venv first"
    lab = make_lab(tmp_path / "lab")
    try:
        yield lab
    finally:
        lab.force_cleanup()


@pytest.fixture(scope="module")
def module_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """One lab shared by the tests of a module (to run one study once and look at it many ways)."""
    lab = make_lab(tmp_path_factory.mktemp("modlab"))
    try:
        yield lab
    finally:
        lab.force_cleanup()
