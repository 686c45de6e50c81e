"""The start gate: every load process joins its group, reports ready, then all exec at once.

Staggered starts bias the measured ratios toward 1 (the first process runs alone for a
while), so no process may start its load before all of them are in their groups
(docs/cgroups.md)."""

from __future__ import annotations

import os
import select
import time
from pathlib import Path

from iolab.core.errors import TrialFailed

GATE_SCRIPT = 'printf . > "$1"; shift; read _ < "$0"; exec "$@"'


class Gate:
    """Two FIFOs: each process writes one byte to `ready`, then blocks reading a line of `go`.

    The parent holds both open read-write, so no open() blocks; writing N newlines to
    `go` releases all N at once (the shell's `read` consumes exactly one line each).
    No polling, so 128 waiting processes cost no CPU."""

    def __init__(self, directory: Path, tag: str):
        self.go = directory / f"gate-{tag}.go"
        self.ready = directory / f"gate-{tag}.ready"
        for p in (self.go, self.ready):
            p.unlink(missing_ok=True)
            os.mkfifo(p, 0o600)
        self.go_fd = os.open(self.go, os.O_RDWR)
        self.ready_fd = os.open(self.ready, os.O_RDWR | os.O_NONBLOCK)

    def argv(self, cmd: list[str]) -> list[str]:
        """`cmd` behind the gate: it runs once released, in the process the executor placed."""
        return ["sh", "-c", GATE_SCRIPT, str(self.go), str(self.ready), *cmd]

    def wait_ready(self, n: int, timeout_s: float) -> None:
        """Until n processes reported ready; TrialFailed after timeout_s."""
        got, deadline = 0, time.monotonic() + timeout_s
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TrialFailed(f"only {got} of {n} load processes reached the start gate in {timeout_s:.0f} s")
            r, _, _ = select.select([self.ready_fd], [], [], min(left, 0.5))
            if r:
                got += len(os.read(self.ready_fd, 4096))

    def release(self, n: int) -> float:
        """Release n waiting processes; returns the monotonic time of the release."""
        os.write(self.go_fd, b"\n" * n)
        return time.monotonic()

    def close(self) -> None:
        for fd in (self.go_fd, self.ready_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        for p in (self.go, self.ready):
            p.unlink(missing_ok=True)
