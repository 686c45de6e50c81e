"""Running load generators: one interface for the host and for guests.

A workload never calls subprocess itself; it asks the placement's executor. On the host
that is a process in its own session (so Ctrl-C reaches iolab, which then stops it
cleanly); in a guest it is the guest agent. This is what lets one study spec run on either.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from iolab.core.resources import Ledger


@dataclass
class ExecRequest:
    """What to run. `files` are written into the executor's work dir first (e.g. a fio job)."""

    argv: list[str]
    timeout_s: float
    files: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    # cgroup.procs files the process joins before exec, so its first I/O is already charged.
    cgroup_procs: list[str] = field(default_factory=list)
    # files to read back from the work dir after the run (e.g. fio --output)
    collect: list[str] = field(default_factory=list)


@dataclass
class ExecResult:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    cpu_user_s: float
    cpu_sys_s: float
    timed_out: bool = False
    collected: dict[str, str] = field(default_factory=dict)

    @property
    def cpu_busy(self) -> float:
        """CPU seconds of the generator (and its children) per wall second; 1.0 = one core."""
        return (self.cpu_user_s + self.cpu_sys_s) / self.wall_s if self.wall_s > 0 else 0.0

    def tail(self, n: int = 800) -> str:
        text = (self.stderr or self.stdout or "").strip()
        return text[-n:]


class Running(ABC):
    """A started process; `wait` always reaps it, killing it at its deadline."""

    @abstractmethod
    def wait(self) -> ExecResult: ...

    @abstractmethod
    def kill(self) -> None: ...


class Executor(ABC):
    """Where commands of a trial run (host, or a guest agent)."""

    name: str = "executor"

    @abstractmethod
    def spawn(self, req: ExecRequest) -> Running: ...

    def run(self, req: ExecRequest) -> ExecResult:
        proc = self.spawn(req)
        try:
            return proc.wait()
        except BaseException:
            proc.kill()
            raise


class _HostRunning(Running):
    def __init__(self, req: ExecRequest, workdir: Path):
        self.req = req
        self.workdir = workdir
        self.t0 = time.monotonic()
        self._out = tempfile.TemporaryFile(mode="w+b")
        self._err = tempfile.TemporaryFile(mode="w+b")
        cgroups = list(req.cgroup_procs)

        def _child_setup() -> None:  # runs in the child between fork and exec
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
            for procs in cgroups:
                with open(procs, "w") as f:
                    f.write(str(os.getpid()))

        env = dict(os.environ)
        env.update(req.env)
        self.proc = subprocess.Popen(
            req.argv, cwd=workdir, stdout=self._out, stderr=self._err, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True, preexec_fn=_child_setup,
        )
        self._result: ExecResult | None = None
        self.on_reaped: Callable[[], None] | None = None

    def wait(self) -> ExecResult:
        if self._result is not None:
            return self._result
        deadline = self.t0 + self.req.timeout_s
        timed_out = False
        while True:
            pid, status, ru = self._wait4(os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                timed_out = True
                self.kill()
                pid, status, ru = self._wait4(0)
                break
            time.sleep(0.02)

        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self._out.seek(0)
        self._err.seek(0)
        collected = {}
        for name in self.req.collect:
            p = self.workdir / name
            if p.exists():
                collected[name] = p.read_text(errors="replace")
        self._result = ExecResult(
            argv=self.req.argv, returncode=self.proc.returncode,
            stdout=self._out.read().decode(errors="replace"),
            stderr=self._err.read().decode(errors="replace"),
            wall_s=time.monotonic() - self.t0, cpu_user_s=ru.ru_utime if ru else 0.0,
            cpu_sys_s=ru.ru_stime if ru else 0.0,
            timed_out=timed_out, collected=collected,
        )
        self._out.close()
        self._err.close()
        if timed_out is False and group_alive(self.proc.pid):
            self.kill()  # children the leader left behind
        if self.on_reaped:
            self.on_reaped()
        return self._result

    def _wait4(self, flags: int) -> tuple[int, int, os.struct_rusage | None]:  # type: ignore[name-defined]
        """os.wait4, tolerating a child already reaped by kill() or an interrupted earlier wait()."""
        try:
            pid, status, ru = os.wait4(self.proc.pid, flags)
            return pid, status, ru
        except ChildProcessError:
            return self.proc.pid, 9, None  # reaped elsewhere: report it as killed

    def kill(self) -> None:
        """Kill the generator and everything it started, and wait until they are gone, so
        nothing still holds the target's device when the target is torn down."""
        kill_generator(self.proc.pid, str(self.workdir))
        try:
            os.waitpid(self.proc.pid, os.WNOHANG)
        except ChildProcessError:
            pass


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _proc_table() -> list[tuple[int, int, int, str]]:
    """(pid, ppid, pgid, state) of every live process."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out.append((int(entry), int(fields[1]), int(fields[2]), fields[0]))
    return out


def generator_pids(pgid: int, workdir: str | None) -> set[int]:
    """The process group, its descendants, and anything running in the work dir.

    fio puts each job process in a session of its own (setsid), so the group alone misses
    them; after iolab itself was killed they are orphans, found by their working directory.
    """
    table = [p for p in _proc_table() if p[3] != "Z"]
    pids = {pid for pid, _, grp, _ in table if grp == pgid}
    grew = True
    while grew:
        more = {pid for pid, ppid, _, _ in table if ppid in pids or ppid == pgid} - pids
        pids |= more
        grew = bool(more)
    if workdir:
        for pid, _, _, _ in table:
            try:
                if os.readlink(f"/proc/{pid}/cwd") == workdir:
                    pids.add(pid)
            except OSError:
                continue
    pids.discard(os.getpid())
    return pids


def kill_generator(pgid: int, workdir: str | None, wait_s: float = 30) -> None:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        pids = generator_pids(pgid, workdir)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def group_alive(pgid: int) -> bool:
    return bool(generator_pids(pgid, None))


class HostExecutor(Executor):
    """Runs commands on the host in a private work dir removed at close().

    With a ledger, the work dir and every process group are recorded, so `iolab clean`
    after a kill -9 of iolab also stops orphaned load generators and removes the dir.
    """

    name = "host"

    def __init__(self, parent: Path | None = None, ledger: Ledger | None = None):
        if parent is not None:
            parent.mkdir(parents=True, exist_ok=True)
        self.ledger = ledger
        self.workdir = Path(tempfile.mkdtemp(prefix="iolab-work-", dir=parent))
        self._dir_res = ledger.add("dir", str(self.workdir), recursive=True) if ledger else None

    def spawn(self, req: ExecRequest) -> Running:
        for name, text in req.files.items():
            (self.workdir / name).write_text(text)
        # Ctrl-C must not land between fork and the ledger entry: the child would be untracked.
        old = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            running = _HostRunning(req, self.workdir)
            if self.ledger:
                res = self.ledger.add("pgroup", str(running.proc.pid), start=_start_time(running.proc.pid),
                                      workdir=str(self.workdir))
                running.on_reaped = lambda: self.ledger.forget(res) if self.ledger else None
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        return running

    def close(self) -> None:
        import shutil

        shutil.rmtree(self.workdir, ignore_errors=True)
        if self.ledger and self._dir_res:
            self.ledger.forget(self._dir_res)
            self._dir_res = None


def _start_time(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""
