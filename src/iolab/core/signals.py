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

Why a stop is also remembered (`stop_pending`, `raise_if_stop_pending`): CPython runs a signal's
Python handler at the next bytecode boundary, and that may be inside a weakref callback, a
`__del__` or a garbage collection, where an exception cannot propagate: it is printed as
"Exception ignored in ..." and dropped. A fresh-clone CI run saw it: a SIGINT landing during a
WeakSet's callback was lost, and the run went on to "complete" with exit 0. So the handler
records the signal before it raises, the runner checks the record between trials and before it
calls a run finished, the command checks it before it exits 0, and the unraisable hook keeps the
dropped KeyboardInterrupt quiet (it is raised again at the next check, so no traceback is owed).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from types import FrameType
from typing import Any

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_depth = 0
_pending: list[int] = []
_stop: int | None = None  # a stop signal whose KeyboardInterrupt no one has acted on yet


def _interrupt(signum: int, frame: FrameType | None) -> None:
    global _stop
    _stop = signum
    raise KeyboardInterrupt


def stop_pending() -> int | None:
    """The stop signal that arrived and has not been acted on (`stop_acted_on`), else None."""
    return _stop


def raise_if_stop_pending() -> None:
    """Raise the KeyboardInterrupt a stop signal raised where Python had to drop it (see above)."""
    if _stop is not None:
        raise KeyboardInterrupt


def caused_by_interrupt(exc: BaseException) -> bool:
    """Whether a KeyboardInterrupt is among the causes of `exc` (`raise ... from`, or raised while
    handling it): how an extension module's import reports the interrupt that cut its init."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def stop_acted_on() -> None:
    """The KeyboardInterrupt was caught by code that stops for it: it is no longer pending."""
    global _stop
    _stop = None


def _quiet_dropped_interrupt(unraisable: Any) -> None:
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _stop is not None:
        return  # raised again at the next raise_if_stop_pending
    sys.__unraisablehook__(unraisable)


def interrupt_on_stop_signals() -> None:
    """SIGTERM and SIGHUP mean what Ctrl-C means, from the first line on: a KeyboardInterrupt
    (the runner cleans up on it; outside a run iolab just exits 130). A signal this process
    inherited as ignored stays ignored (`nohup iolab run ...` survives a hang-up)."""
    for s in STOP_SIGNALS:
        if signal.getsignal(s) in (signal.SIG_DFL, signal.default_int_handler, _exit_while_starting):
            signal.signal(s, _interrupt)
    sys.unraisablehook = _quiet_dropped_interrupt


def as_interrupt() -> AbstractContextManager[None]:
    """Within the block, every stop signal not inherited as ignored raises KeyboardInterrupt
    through `_interrupt` (so it is remembered), whatever handler was there; restored after."""
    return _handled_by(_interrupt, [s for s in STOP_SIGNALS if signal.getsignal(s) != signal.SIG_IGN])


def ignored() -> AbstractContextManager[None]:
    """Within the block every stop signal is ignored: a second Ctrl-C during cleanup must not
    strand half-removed resources."""
    return _handled_by(signal.SIG_IGN, STOP_SIGNALS)


@contextmanager
def _handled_by(handler: Any, which: Sequence[signal.Signals]) -> Iterator[None]:
    old = {s: signal.signal(s, handler) for s in which}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


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
