"""Suite-wide set-up: the stop signals reach every iolab the tests start.

A shell without job control starts a background command with SIGINT ignored (`bash .ci/run &`
from a script), and `nohup` ignores SIGHUP. An ignored signal stays ignored across exec, and
iolab deliberately honours that (`nohup iolab run ...` survives a hang-up). The tests that
send SIGINT, SIGTERM or SIGHUP to an iolab they started must therefore start it with those
signals at their defaults: pytest catches them itself (a Python handler, which exec resets to
the default in every child) instead of ignoring them.
"""

from __future__ import annotations

import signal

from iolab.core.signals import STOP_SIGNALS


def restore_stop_signals() -> list[str]:
    """Catch instead of ignore every stop signal this process inherited as ignored; returns their names.
    pytest itself still ignores SIGTERM and SIGHUP as it was asked to; SIGINT interrupts it again."""
    restored = []
    for s in STOP_SIGNALS:
        if signal.getsignal(s) == signal.SIG_IGN:
            signal.signal(s, signal.default_int_handler if s == signal.SIGINT else _ignore)
            restored.append(s.name)
    return restored


def _ignore(signum: int, frame: object) -> None:
    """Ignore in pytest, default in children (exec resets a caught signal, not an ignored one)."""


RESTORED = restore_stop_signals()
