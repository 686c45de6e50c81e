"""The fixtures every folder of tests that runs iolab for real shares: `lab` (a private data
dir and the real `iolab` command), `basic_run` (one small study run once per session and
looked at many ways), `canaries` (a canary loop device and files). Each folder's conftest.py
imports them; helpers live in tests/core/helpers.py."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:  # lets the tests do `from tests.core.helpers import ...`
    sys.path.insert(0, str(_ROOT))

from tests.core.canary import Canaries  # noqa: E402
from tests.core.helpers import IOLAB, LOOP_TARGET, Lab, fio_workload, make_lab, study_table  # noqa: E402


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    assert IOLAB.exists(), f"{IOLAB} missing: install the package into .venv first"
    lab = make_lab(tmp_path / "lab")
    try:
        yield lab
    finally:
        lab.force_cleanup()


@pytest.fixture(scope="session")
def basic_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, dict[str, Any]]]:
    """One small complete study, run once and looked at many ways: (lab, its JSON report).

    Loop target, 2 configurations (bs 4k, 8k) x exactly 3 repetitions of a 1 s randread.
    """
    lab = make_lab(tmp_path_factory.mktemp("basic"))
    try:
        spec = lab.spec(study_table("basic", repetitions=3, max_repetitions=3) + LOOP_TARGET
                        + fio_workload(bs=["4k", "8k"]))
        r = lab.iolab("run", spec, timeout=180)
        assert r.returncode == 0, r.stderr
        lab.basic_stdout, lab.basic_stderr = r.stdout, r.stderr  # type: ignore[attr-defined]
        yield lab, lab.report_json()
    finally:
        lab.force_cleanup()


@pytest.fixture
def canaries(tmp_path: Path) -> Iterator[Canaries]:
    """A canary loop device with known content and canary files (tests/core/canary.py); closed after."""
    c = Canaries(tmp_path / "canaries").make()
    try:
        yield c
    finally:
        c.close()
