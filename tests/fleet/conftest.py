"""Fixtures of the fleet tests: fio servers in network namespaces (tests/fleet/netns_hosts.py)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from tests.fleet.netns_hosts import NsHost, ns_fleet  # noqa: E402


def _usable() -> str | None:
    if not shutil.which("fio"):
        return "fio is not installed"
    if not shutil.which("ip") or not shutil.which("ss"):
        return "iproute2 (ip, ss) is not installed"
    return None


@pytest.fixture
def fleet3(tmp_path: Path) -> Iterator[list[NsHost]]:
    """Three namespace hosts, each a running `fio --server` with its own 64 MiB loop device."""
    why = _usable()
    if why:
        pytest.skip(why)
    with ns_fleet(tmp_path / "fleet", 3) as hosts:
        yield hosts
