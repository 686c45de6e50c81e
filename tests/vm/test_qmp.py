"""QMP through qemu.qmp against a real QEMU (`-machine none -S`: no guest, starts in ms).

What iolab adds to the library is a bounded connect; each test is a way a connect or a
command could hang or lie: no socket, a QEMU that died, a second client, a stopped QEMU.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from qemu.qmp import QMPError

from iolab.vm import qmp
from iolab.vm.cmdline import qemu_version
from iolab.vm.errors import VmError

pytestmark = pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="QEMU not installed")

# A timeout of 0.5-1 s must end the wait well before qmp's 10 s defaults (a program that ignored
# it would wait those), with slack for a busy machine that delays the wake-up by seconds.
BOUND_S = 0.6 * qmp.CONNECT_TIMEOUT_S
assert BOUND_S < min(qmp.CONNECT_TIMEOUT_S, qmp.COMMAND_TIMEOUT_S)


class Qemu:
    def __init__(self, directory: Path):
        self.sock = directory / "qmp,sock"  # a comma: the path reaches QEMU through QemuOpts
        self.proc = subprocess.Popen(
            ["qemu-system-x86_64", "-name", "qmp-test", "-nodefaults", "-nographic", "-machine", "none", "-S",
             "-chardev", f"socket,id=qmp,path={str(self.sock).replace(',', ',,')},server=on,wait=off",
             "-mon", "chardev=qmp,mode=control"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def alive(self) -> bool:
        return self.proc.poll() is None


@pytest.fixture
def qemu(tmp_path: Path) -> Iterator[Qemu]:
    q = Qemu(tmp_path)
    try:
        yield q
    finally:
        if q.proc.poll() is None:
            os.kill(q.proc.pid, signal.SIGCONT)
            q.proc.kill()
        q.proc.wait()


def test_commands_and_events_through_the_library(qemu: Qemu) -> None:
    session = qmp.connect(qemu.sock, alive=qemu.alive)  # dials before QEMU listens: it retries
    try:
        assert session.cmd("query-status")["status"] == "prelaunch"  # type: ignore[index]
        v = session.cmd("query-version")["qemu"]  # type: ignore[index]
        assert f"{v['major']}.{v['minor']}.{v['micro']}" == qemu_version().split("+")[0].split("-")[0]
        session.cmd("cont")
        event = session.pull_event(wait=5.0)
        assert event is not None and event["event"] == "RESUME"
        with pytest.raises(QMPError, match="not-a-command"):
            session.cmd("not-a-command")
        assert session.cmd("query-status")["status"] == "running"  # type: ignore[index]
    finally:
        qmp.close(session)


def test_a_socket_that_never_appears_fails_at_the_deadline(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(VmError, match="cannot connect to QMP at .*nowhere.sock"):
        qmp.connect(tmp_path / "nowhere.sock", timeout_s=0.5)
    assert 0.5 <= time.monotonic() - t0 < BOUND_S


def test_a_dead_qemu_fails_at_once(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(VmError, match="QEMU exited before its QMP socket"):
        qmp.connect(tmp_path / "nowhere.sock", timeout_s=30, alive=lambda: False)
    assert time.monotonic() - t0 < BOUND_S


def test_a_second_client_is_refused_within_the_timeout_and_the_first_goes_on(qemu: Qemu) -> None:
    first = qmp.connect(qemu.sock, alive=qemu.alive)
    try:
        t0 = time.monotonic()
        with pytest.raises(VmError, match="did not greet"):  # QEMU serves one QMP client at a time
            qmp.connect(qemu.sock, timeout_s=1.0, alive=qemu.alive)
        assert time.monotonic() - t0 < BOUND_S
        assert first.cmd("query-status")["status"] == "prelaunch"  # type: ignore[index]
    finally:
        qmp.close(first)


def test_a_stopped_qemu_times_out_then_answers_again(qemu: Qemu) -> None:
    session = qmp.connect(qemu.sock, alive=qemu.alive, command_timeout_s=1.0)
    try:
        os.kill(qemu.proc.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            with pytest.raises(TimeoutError):
                session.cmd("query-status")
            assert time.monotonic() - t0 < BOUND_S
        finally:
            os.kill(qemu.proc.pid, signal.SIGCONT)
        session.settimeout(10.0)
        assert session.cmd("query-status")["status"] == "prelaunch"  # type: ignore[index]
    finally:
        qmp.close(session)


def test_a_stopped_qemu_does_not_hang_the_connect(qemu: Qemu) -> None:
    qmp.close(qmp.connect(qemu.sock, alive=qemu.alive))  # it listens: the next dial connects at once
    os.kill(qemu.proc.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    with pytest.raises(VmError, match="did not greet"):
        qmp.connect(qemu.sock, timeout_s=1.0, alive=qemu.alive)
    assert time.monotonic() - t0 < BOUND_S


def test_a_qemu_stopped_just_after_its_greeting_does_not_hang_the_connect(tmp_path: Path) -> None:
    """SIGSTOP is not instant: QEMU's main loop could still accept and greet before it stopped
    (under a parallel suite's load it did: the test above hung for good inside the library's
    negotiation, which has no timeout). A monitor that greets and then never answers
    `qmp_capabilities`, exactly what such a QEMU shows: the connect ends within its timeout."""
    import socket
    import threading

    path = tmp_path / "qmp.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    held: list[socket.socket] = []
    greeting = (b'{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}, "package": ""}, '
                b'"capabilities": ["oob"]}}\r\n')

    def greet_then_freeze() -> None:
        conn, _ = server.accept()
        held.append(conn)
        conn.sendall(greeting)  # and never a word more, as a stopped QEMU

    t = threading.Thread(target=greet_then_freeze, daemon=True)
    t.start()
    try:
        t0 = time.monotonic()
        with pytest.raises(VmError, match="did not greet and negotiate"):
            qmp.connect(path, timeout_s=1.0)
        assert time.monotonic() - t0 < BOUND_S
    finally:
        t.join(timeout=5)
        for c in held:
            c.close()
        server.close()


def test_a_killed_qemu_ends_the_command_at_once_and_close_is_quiet(qemu: Qemu) -> None:
    session = qmp.connect(qemu.sock, alive=qemu.alive)
    qemu.proc.kill()
    qemu.proc.wait()
    t0 = time.monotonic()
    with pytest.raises(QMPError):
        session.cmd("query-status")
    assert time.monotonic() - t0 < BOUND_S
    qmp.close(session)  # no exception: QEMU is gone, there is nothing to close
    qmp.close(session)


def test_connect_inside_a_running_event_loop_says_why(tmp_path: Path) -> None:
    """A running asyncio loop on the thread (what playwright's sync API leaves) is named, not a deep RuntimeError."""
    import asyncio

    async def inside() -> None:
        with pytest.raises(VmError, match="asyncio event loop runs on this thread"):
            qmp.connect(tmp_path / "qmp.sock", timeout_s=0.5)

    asyncio.run(inside())


class _Stop(BaseException):
    """What iolab's stop-signal handlers raise (KeyboardInterrupt), without pytest treating
    it as the user stopping the test session."""


def test_a_signal_inside_a_command_leaves_no_task_for_asyncio_to_report(
        qemu: Qemu, caplog: pytest.LogCaptureFixture) -> None:
    """A Ctrl-C while a command waits on a stopped QEMU: the interrupt propagates at once, and
    nothing is left for asyncio to print later ("Task exception was never retrieved", a
    traceback on the user's terminal: the kill test saw one at a SIGINT during QMP's
    greeting)."""
    import gc

    session = qmp.connect(qemu.sock, alive=qemu.alive, command_timeout_s=30.0)
    os.kill(qemu.proc.pid, signal.SIGSTOP)

    def stop(signum: int, frame: object) -> None:
        raise _Stop()

    previous = signal.signal(signal.SIGALRM, stop)
    caplog.set_level("DEBUG", logger="asyncio")
    t0 = time.monotonic()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(_Stop):
            session.cmd("query-status")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - t0 < BOUND_S, "the interrupt must end the wait, not the command timeout"
    os.kill(qemu.proc.pid, signal.SIGCONT)
    qemu.proc.kill()  # the run is stopping: QEMU goes, then the session is closed (runs the loop again)
    qemu.proc.wait()
    qmp.close(session)
    del session
    gc.collect()
    said = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert not [m for m in said if "never retrieved" in m or "destroyed but it is pending" in m], said
