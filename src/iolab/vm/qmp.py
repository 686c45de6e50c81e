"""QMP through the QEMU project's own client, `qemu.qmp`, from synchronous code.

`qemu.qmp.legacy.QEMUMonitorProtocol` is that library's synchronous API (connect, `cmd`,
events) over its asyncio `QMPClient`; iolab uses it as it is. What is added here is only
how to reach a QEMU that has just been started, with a deadline: the library's
`connect()` has none, and a monitor that never greets would block iolab for good (a
stopped QEMU, or a second client: QEMU serves one QMP client at a time). So `connect`
dials the socket itself until QEMU listens, waits for the greeting bytes with `poll`,
and only then hands the connected socket to the library, which reads the greeting and
negotiates. Commands get the library's own timeout (`settimeout`).

A QEMUMonitorProtocol runs the event loop of the thread that made it, only while a call
is in progress: use one from one thread at a time (iolab calls it from the runner's).
"""

from __future__ import annotations

import asyncio
import select
import socket
import time
from collections.abc import Callable
from pathlib import Path

from qemu.qmp import QMPError
from qemu.qmp.legacy import QEMUMonitorProtocol

from iolab.vm.errors import VmError

CONNECT_TIMEOUT_S = 10.0
COMMAND_TIMEOUT_S = 10.0
_DIAL_PAUSE_S = 0.02


def connect(sock_path: Path, timeout_s: float = CONNECT_TIMEOUT_S,
            command_timeout_s: float | None = COMMAND_TIMEOUT_S,
            alive: Callable[[], bool] = lambda: True) -> QEMUMonitorProtocol:
    """A negotiated QMP session on QEMU's monitor socket, or VmError within timeout_s.

    alive: False once QEMU has exited, so a QEMU that died is reported at once, not at
    the deadline.
    """
    if asyncio._get_running_loop() is not None:  # the library's sync shim would fail deep inside asyncio
        raise VmError("QMP's synchronous client cannot run while an asyncio event loop runs on this "
                      "thread (e.g. playwright's sync API is up); run iolab's guests from plain code")
    deadline = time.monotonic() + timeout_s
    sock = _dial(sock_path, deadline, alive)
    try:
        _await_greeting(sock, sock_path, deadline)
        qmp = QEMUMonitorProtocol(sock, nickname=f"iolab:{sock_path.parent.name}")
        qmp.connect()
    except (OSError, QMPError) as exc:
        sock.close()
        raise VmError(f"QMP at {sock_path}: {exc}") from exc
    except BaseException:
        sock.close()
        raise
    qmp.settimeout(command_timeout_s)
    return qmp


def close(qmp: QEMUMonitorProtocol) -> None:
    """Disconnect; a QEMU that is already gone (EOF, reset) is no error at this point."""
    try:
        qmp.close()
    except Exception:  # the session ended with QEMU: the library re-raises the reader's EOF
        pass


def _dial(sock_path: Path, deadline: float, alive: Callable[[], bool]) -> socket.socket:
    """A connected unix socket; QEMU creates and listens on it shortly after it starts."""
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(sock_path))
            return sock
        except OSError as exc:
            sock.close()
            if not alive():
                raise VmError(f"QEMU exited before its QMP socket {sock_path} answered") from exc
            if time.monotonic() > deadline:
                raise VmError(f"cannot connect to QMP at {sock_path}: {exc}") from exc
            time.sleep(_DIAL_PAUSE_S)


def _await_greeting(sock: socket.socket, sock_path: Path, deadline: float) -> None:
    """Block until QEMU has written to the socket (its greeting, or EOF), at most to deadline."""
    poller = select.poll()  # not select.select: a descriptor above 1023 is fine here
    poller.register(sock, select.POLLIN)
    if not poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
        raise VmError(f"QEMU did not greet on QMP at {sock_path} within the timeout "
                      "(stopped, or another client holds its monitor)")
