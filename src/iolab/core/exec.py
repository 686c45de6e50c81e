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
from dataclasses import dataclass, field
from pathlib import Path


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

        def _join_cgroups() -> None:  # runs in the child between fork and exec
            for procs in cgroups:
                with open(procs, "w") as f:
                    f.write(str(os.getpid()))

        env = dict(os.environ)
        env.update(req.env)
        self.proc = subprocess.Popen(
            req.argv, cwd=workdir, stdout=self._out, stderr=self._err, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True, preexec_fn=_join_cgroups if cgroups else None,
        )
        self._result: ExecResult | None = None

    def wait(self) -> ExecResult:
        if self._result is not None:
            return self._result
        deadline = self.t0 + self.req.timeout_s
        timed_out = False
        while True:
            pid, status, ru = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                timed_out = True
                self.kill()
                pid, status, ru = os.wait4(self.proc.pid, 0)
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
            wall_s=time.monotonic() - self.t0, cpu_user_s=ru.ru_utime, cpu_sys_s=ru.ru_stime,
            timed_out=timed_out, collected=collected,
        )
        self._out.close()
        self._err.close()
        return self._result

    def kill(self) -> None:
        """Kill the whole session (fio forks one process per job)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class HostExecutor(Executor):
    """Runs commands on the host in a private work dir removed at close()."""

    name = "host"

    def __init__(self, parent: Path | None = None):
        if parent is not None:
            parent.mkdir(parents=True, exist_ok=True)
        self.workdir = Path(tempfile.mkdtemp(prefix="iolab-work-", dir=parent))

    def spawn(self, req: ExecRequest) -> Running:
        for name, text in req.files.items():
            (self.workdir / name).write_text(text)
        return _HostRunning(req, self.workdir)

    def close(self) -> None:
        import shutil

        shutil.rmtree(self.workdir, ignore_errors=True)
