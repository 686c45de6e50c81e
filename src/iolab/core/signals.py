"""The signals that stop a run, and holding them over a window that must not be cut.

SIGINT (Ctrl-C), SIGTERM and SIGHUP (the terminal went away) all mean "stop, clean up,
keep finished trials". Between writing a ledger entry and creating the thing it names
(a loop device, a QEMU process), an interruption is harmless for SIGKILL (the cleaner
of a pending entry finds what may exist) but needless work for the others: `held()`
defers them to the end of the window, then delivers them as if they had just arrived.

Why a deferring handler and not pthread_sigmask: CPython runs Python-level handlers in
the main thread whatever thread the kernel delivered the signal to, so with a QMP or
sampler thread running, a mask on the main thread alone does not keep KeyboardInterrupt
out. And a mask is inherited across exec: QEMU started inside the window would run with
SIGTERM blocked for good. A handler is reset by exec, so children start clean.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_depth = 0
_pending: list[int] = []


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def interrupt_on_stop_signals() -> None:
    """SIGTERM and SIGHUP mean what Ctrl-C means, from the first line on: a KeyboardInterrupt
    (the runner cleans up on it; outside a run iolab just exits 130). A signal this process
    inherited as ignored stays ignored (`nohup iolab run ...` survives a hang-up)."""
    for s in STOP_SIGNALS:
        if signal.getsignal(s) in (signal.SIG_DFL, signal.default_int_handler, _exit_while_starting):
            signal.signal(s, _interrupt)


def exit_on_stop_signals_while_starting() -> None:
    """While the command is still being imported: a stop signal ends the process at once, with
    "interrupted" and exit 130, from inside the handler. Nothing exists yet to clean up, and a
    KeyboardInterrupt cannot be relied on to reach the caller: raised inside a compiled
    extension's import (pydantic-core building its own schema validator, a pyo3 `expect`) it
    came out as a pyo3 PanicException, a Rust panic message and exit 1 (a kill campaign's
    SIGTERM 0.98 s after start). `interrupt_on_stop_signals` replaces it once the studies are
    registered (cli.main). A signal inherited as ignored stays ignored, and a process already
    started (its handler `_interrupt`) keeps it."""
    for s in STOP_SIGNALS:
        if signal.getsignal(s) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(s, _exit_while_starting)


def _exit_while_starting(signum: int, frame: FrameType | None) -> None:
    os.write(2, b"interrupted\n")
    os._exit(130)


def ignore_stop_signals() -> None:
    """Leaving: the run has cleaned up and only its last words remain to be printed. A second
    Ctrl-C landing now must not turn exit 130 into a death by SIGINT (CPython re-raises an
    uncaught KeyboardInterrupt as the signal itself), so further stop signals are ignored."""
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)


@contextmanager
def held() -> Iterator[None]:
    """Defer SIGINT/SIGTERM/SIGHUP until the block ends (nested blocks: the outermost ends)."""
    global _depth
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers run in the main thread only: a signal there cannot cut this thread's window
        return
    if _depth:
        _depth += 1
        try:
            yield
        finally:
            _depth -= 1
        return
    old_handlers = {s: signal.signal(s, _defer) for s in STOP_SIGNALS}
    _depth = 1
    try:
        yield
    finally:
        _depth = 0
        for s, h in old_handlers.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
        pending, _pending[:] = list(_pending), []
        for signum in dict.fromkeys(pending):
            signal.raise_signal(signum)


def _defer(signum: int, frame: FrameType | None) -> Any:
    _pending.append(signum)
