"""QMP through the QEMU project's own client, `qemu.qmp`, from synchronous code.

`qemu.qmp.legacy.QEMUMonitorProtocol` is that library's synchronous API (connect, `cmd`,
events) over its asyncio `QMPClient`; iolab uses it as it is. What is added here is only
how to reach a QEMU that has just been started, with a deadline: the library's
`connect()` has none, and a monitor that never greets would block iolab for good (a
stopped QEMU, or a second client: QEMU serves one QMP client at a time). So `connect`
dials the socket itself until QEMU listens, waits for the greeting bytes with `poll`,
and only then hands the connected socket to the library, which reads the greeting and
negotiates, within what is left of the deadline (`Monitor.deadline`): a QEMU stopped just
after it greeted never answers `qmp_capabilities`, and the library's connect waited for
that answer for good (a parallel suite's SIGSTOP landed after QEMU had already written its
greeting: the test hung). Commands get the library's own timeout (`settimeout`).

A QEMUMonitorProtocol runs the event loop of the thread that made it, only while a call
is in progress: use one from one thread at a time (iolab calls it from the runner's).
A stop signal (Ctrl-C, SIGTERM, SIGHUP: iolab raises KeyboardInterrupt) inside a call would
leave that call's asyncio task pending; the next call on the loop finishes it, nobody takes
its exception, and asyncio prints "Task exception was never retrieved" with a traceback (the
kill test saw one at a SIGINT during QMP's greeting). `Monitor` cancels and drains the task
before the signal propagates.
"""

from __future__ import annotations

import asyncio
import logging
import select
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from qemu.qmp import QMPError
from qemu.qmp.legacy import QEMUMonitorProtocol

from iolab.vm.errors import VmError

CONNECT_TIMEOUT_S = 10.0
COMMAND_TIMEOUT_S = 10.0
_DIAL_PAUSE_S = 0.02
_T = TypeVar("_T")
# The library logs a failed negotiation at ERROR (a QEMU that exits while it starts: a saved state
# it cannot load). iolab reports those itself, as VmError with QEMU's stderr; without a handler of
# its own the library's records would reach stderr through logging's last resort, mid-progress.
# A NullHandler keeps them out of the terminal; an application that configures logging still gets them.
logging.getLogger("qemu.qmp").addHandler(logging.NullHandler())


class Monitor(QEMUMonitorProtocol):
    """The library's synchronous client; an interrupted call leaves no task behind.

    Overrides `_sync`, the one method through which every call of qemu.qmp 0.0.6's legacy
    client runs its coroutine (pinned in pyproject.toml: check it on an upgrade)."""

    deadline: float | None = None  # time.monotonic() by which a call without a timeout of its own must end

    def _sync(self, future: Awaitable[_T], timeout: float | None = None) -> _T:
        if timeout is None and self.deadline is not None:  # the library's connect() passes none
            timeout = max(0.0, self.deadline - time.monotonic())
        task = self._aloop.create_task(asyncio.wait_for(future, timeout=timeout))
        try:
            return self._aloop.run_until_complete(task)
        except BaseException:
            if not task.done():
                task.cancel()
                try:  # a second signal here propagates; an error of the cancelled call does not
                    self._aloop.run_until_complete(asyncio.gather(task, return_exceptions=True))
                except Exception:
                    pass
            if task.done() and not task.cancelled():
                task.exception()  # taken: asyncio has nothing to report later
            raise


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
        qmp = Monitor(sock, nickname=f"iolab:{sock_path.parent.name}")
        qmp.deadline = deadline
        try:
            qmp.connect()
        except TimeoutError:
            close(qmp)
            raise VmError(f"QEMU did not greet and negotiate on QMP at {sock_path} within the timeout (stopped, "
                          "or another client holds its monitor)") from None
        qmp.deadline = None
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
