"""The throw-away PostgreSQL of the tests leaves nothing behind even when its pytest is killed:
the next start stops and removes a server whose owner died (tests/store/pgserver.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .pgserver import missing_binaries, sweep_dead

REPO = Path(__file__).resolve().parents[2]
CHILD = """
import sys, time
sys.path.insert(0, {repo!r})
from tests.store.pgserver import PgServer
s = PgServer.create()
print(s.root, flush=True)
time.sleep(600)
"""


def _postmasters(root: Path) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if str(root) in (d / "cmdline").read_bytes().decode(errors="replace"):
                    out.append(int(d.name))
            except OSError:
                continue
    return out


def test_a_server_of_a_killed_test_process_is_stopped_and_removed_by_the_next_start() -> None:
    if missing_binaries():
        pytest.skip(f"PostgreSQL server binaries not installed: {missing_binaries()}")
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(repo=str(REPO))], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    assert child.stdout is not None
    root = Path(child.stdout.readline().strip())
    try:
        assert root.name.startswith("iolab-") and "-pg-" in root.name and _postmasters(root)
        assert root not in sweep_dead(), "a live owner's server is never swept"
        os.killpg(child.pid, signal.SIGKILL)  # the test process dies; its server does not
        child.wait(timeout=10)
        assert _postmasters(root), "the server outlives its killed owner (what the sweep is for)"
        assert root in sweep_dead()
        deadline = time.monotonic() + 30
        while _postmasters(root) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _postmasters(root) and not root.exists()
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        sweep_dead()
