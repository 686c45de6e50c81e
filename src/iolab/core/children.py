"""Child processes that never outlive the step that started them.

`subprocess.run` leaves two windows in which a stop signal (Ctrl-C, SIGTERM, SIGHUP: a
KeyboardInterrupt in iolab, core.signals) lets a child run on unsupervised while iolab
cleans up around it:

* between the fork and the moment Popen returns its handle. With vfork, CPython's parent
  sleeps until the child has exec'd; a signal arriving then is handled at the next bytecode,
  still inside `Popen.__init__`, which raises without killing or waiting for the child it
  just started. The child runs to its end, unseen: a fresh-clone CI run saw `qemu-img create`
  write its image into a scratch mount point *after* the interrupted run had unmounted it,
  and `iolab clean` then failed with "Directory not empty".
* after the interrupt: `run` sends SIGKILL to the child alone and returns without reaping it
  (CPython's "assume the child got the SIGINT too"); anything the child started lives on.

`run` and `start` close both: the child is started with the stop signals held (deferred to
the line after Popen returns, `signals.held`), in a session of its own, and on any exception
while iolab waits for it, its whole process group is killed and the child reaped before the
exception goes on. So when cleanup starts, nothing iolab started in that step still runs,
whatever instant the signal chose. Every short-lived child in iolab goes through `run`; the
long-lived ones (QEMU, fio, probes) through `start` or an executor (core.exec), which put
them in a ledger entry or a cgroup leaf of their own.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from typing import IO, Any

from iolab.core import signals

REAP_TIMEOUT_S = 30.0  # a child in uninterruptible sleep dies when its syscall ends; never hang on it for good


def start(argv: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
    """`subprocess.Popen(argv, **popen)` with the stop signals held until the handle exists; a
    stop signal that came meanwhile is raised once it does, after the child is stopped (`stop`).
    So a started child is either returned (the caller owns stopping it) or already gone."""
    proc: subprocess.Popen[Any] | None = None
    try:
        with signals.held():  # a deferred signal is raised as the block ends, with proc set
            proc = subprocess.Popen(list(argv), **popen)
    except BaseException:
        if proc is not None:
            stop(proc)
        raise
    return proc


def run(argv: Sequence[str], *, input: str | bytes | None = None, capture_output: bool = False,
        text: bool = False, timeout: float | None = None, check: bool = False,
        cwd: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None,
        pass_fds: Sequence[int] = (), stdin: int | IO[Any] | None = None,
        stdout: int | IO[Any] | None = None, stderr: int | IO[Any] | None = None
        ) -> subprocess.CompletedProcess[Any]:
    """What `subprocess.run` does with the same arguments, except that the child cannot outlive
    the call: an exception while waiting (a stop signal, the timeout) kills its process group
    and reaps it before it propagates. TimeoutExpired and CalledProcessError as `run` raises them."""
    if capture_output:
        if stdout is not None or stderr is not None:
            raise ValueError("stdout and stderr may not be used with capture_output")
        stdout = stderr = subprocess.PIPE
    if input is not None:
        if stdin is not None:
            raise ValueError("stdin and input may not both be used")
        stdin = subprocess.PIPE
    proc = start(argv, stdin=stdin, stdout=stdout, stderr=stderr, text=text, cwd=cwd,
                 env=dict(env) if env is not None else None, pass_fds=tuple(pass_fds), start_new_session=True)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except BaseException:
        stop(proc)
        raise
    done: subprocess.CompletedProcess[Any] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


def stop(proc: subprocess.Popen[Any]) -> None:
    """Kill the child, and its process group where it leads one (`run` starts every child in a
    session of its own), and reap it; its pipes are closed first, so a grandchild that escaped
    the group cannot keep us waiting."""
    try:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass
    for f in (proc.stdin, proc.stdout, proc.stderr):
        if f is not None:
            try:
                f.close()
            except OSError:
                pass
    try:
        proc.wait(timeout=REAP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pass  # stuck in the kernel: it dies when its syscall returns, holding nothing of ours open long
