"""A stop signal while `iolab` is still starting (importing click, rich, pydantic, numpy: a few
hundred milliseconds) is a clean exit 130 with "interrupted", never a Python traceback.

The kill campaigns (test_kill.py) found it: a SIGINT 0.19 s after start landed in pydantic's
import, before cli.main() had installed its handlers. iolab.entry now installs them before
anything heavy is imported. Here the signal is sent at the first instant the process shows
them installed (SigCgt in /proc/PID/status), and /proc/PID/maps says whether the heavy imports
were still to come then; a program that installed its handlers only after importing (the old
one) never offers that instant, so it fails.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from tests.core.helpers import IOLAB

HEAVY = "pydantic_core"  # a compiled module the command imports (specs, fleet hosts) and entry.py does not
ATTEMPTS = 6


def _caught(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return int(line.split()[1], 16)
    return 0


def _heavy_loaded(pid: int) -> bool:
    return HEAVY in Path(f"/proc/{pid}/maps").read_text()


def _send_when_handlers_are_in(sig: signal.Signals) -> tuple[bool, subprocess.CompletedProcess[str]]:
    """Start `iolab --version`, send `sig` as soon as SIGTERM and SIGHUP are caught; returns
    (whether the heavy imports were still to come then, the finished process)."""
    want = (1 << (signal.SIGTERM - 1)) | (1 << (signal.SIGHUP - 1))
    proc = subprocess.Popen([str(IOLAB), "--version"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    early = False
    try:
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if _caught(proc.pid) & want == want:
                    early = not _heavy_loaded(proc.pid)
                    proc.send_signal(sig)
                    break
            except (FileNotFoundError, ProcessLookupError):
                break
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return early, subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_signal_during_start_up_is_a_clean_exit(sig: signal.Signals) -> None:
    landed = 0
    for _ in range(ATTEMPTS):  # the poller can be late on a busy machine: the instant must come at least once
        early, r = _send_when_handlers_are_in(sig)
        if not early:
            continue
        landed += 1
        assert r.returncode == 130 and "Traceback" not in r.stderr and "interrupted" in r.stderr, r
        assert "version" not in r.stdout, "the signal came before the command ran: it must not run"
    assert landed, (f"in {ATTEMPTS} starts, {HEAVY} was always loaded by the time the stop signals were caught: "
                    "iolab installs its handlers only after its heavy imports")
