"""Running load generators: one interface for the host and for guests.

A workload never calls subprocess itself; it asks the placement's executor. On the host
that is a process in its own session (so Ctrl-C reaches iolab, which then stops it
cleanly) and in a cgroup leaf of its own inside the trial's cgroup (cgroups.trial: its
CPU time is read there and it is ended through it, whatever it forked); in a guest it is
the guest agent. This is what lets one study spec run on either.
"""

from __future__ import annotations

import copy
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from iolab.cgroups.trial import SpawnCgroup, TrialCgroup
from iolab.core import owner as owners
from iolab.core import signals
from iolab.core.resources import Ledger, Resource
from iolab.core.signals import STOP_SIGNALS


@dataclass
class ExecRequest:
    """What to run. `files` are written into the executor's work dir first (e.g. a fio job)."""

    argv: list[str]
    timeout_s: float
    files: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    # cgroup.procs files the process joins before exec (after its own leaf, cgroups.trial),
    # so its first I/O is already charged
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
        """CPU seconds of the generator and everything it started (on the host: its cgroup
        leaf; in a guest: its and its children's rusage) per wall second; 1.0 = one core."""
        return (self.cpu_user_s + self.cpu_sys_s) / self.wall_s if self.wall_s > 0 else 0.0

    def tail(self, n: int = 800) -> str:
        text = (self.stderr or self.stdout or "").strip()
        return text[-n:]


# Where host workloads are placed (docs/architecture.md, "Sessions and autogroups"). "own": each in a
# session of its own (start_new_session), so with kernel.sched_autogroup_enabled = 1 each gets an
# autogroup of its own and, under CPU contention, one group's share against every other session's,
# whatever their thread counts. "shared": in iolab's session (a process group of its own, so the
# terminal's Ctrl-C still reaches iolab alone), sharing iolab's autogroup with whatever else that
# session runs. Set per run by the runner from [study] workload_session; recorded in the manifest.
SESSION_POLICIES = ("own", "shared")
_session_policy = "own"


def set_session_policy(policy: str) -> str:
    """Place the host processes started from now on; returns the previous policy."""
    global _session_policy
    if policy not in SESSION_POLICIES:
        raise ValueError(f"session policy must be one of {SESSION_POLICIES}, got {policy!r}")
    previous, _session_policy = _session_policy, policy
    return previous


def session_policy() -> str:
    return _session_policy


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

    def within(self, cgroup: TrialCgroup | None) -> Executor:
        """This executor, placing the host processes it starts in `cgroup` (a trial's). An
        executor whose processes run elsewhere (a guest) is returned as it is."""
        return self

    def run(self, req: ExecRequest) -> ExecResult:
        proc = self.spawn(req)
        try:
            return proc.wait()
        except BaseException:
            proc.kill()
            raise


class _HostRunning(Running):
    """One process started on the host, in its own session and its own cgroup leaf.

    The leaf (cgroups.trial.SpawnCgroup) holds the process and everything it starts, also
    what escapes its session or is reparented (fio's job processes, a forked sleeper): the
    CPU time of the result is read from it, and kill() ends the whole tree through it."""

    def __init__(self, req: ExecRequest, workdir: Path, leaf: SpawnCgroup, spawn_tag: str | None = None):
        self.req = req
        self.workdir = workdir
        self.leaf = leaf
        self.t0 = time.monotonic()
        self._out = tempfile.TemporaryFile(mode="w+b")
        self._err = tempfile.TemporaryFile(mode="w+b")

        own_session = _session_policy == "own"

        def _child_setup() -> None:  # runs in the child between fork and exec
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
            if not own_session:
                os.setpgid(0, 0)  # iolab's session (its autogroup), but not its terminal's process group
            leaf.join()  # its leaf first, then the groups asked for

        env = dict(os.environ)
        env.update(req.env)
        if spawn_tag:  # inherited by every descendant: `iolab clean` also finds them by it
            env[owners.ENV_SPAWN] = spawn_tag
        self.proc = subprocess.Popen(
            req.argv, cwd=workdir, stdout=self._out, stderr=self._err, stdin=subprocess.DEVNULL,
            env=env, start_new_session=own_session, preexec_fn=_child_setup,
        )
        self._result: ExecResult | None = None
        self.on_reaped: Callable[[], None] | None = None

    def wait(self) -> ExecResult:
        if self._result is not None:
            return self._result
        deadline = self.t0 + self.req.timeout_s
        timed_out = False
        while True:
            pid, status = self._wait(os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                timed_out = True
                self.kill()
                pid, status = self._wait(0)
                break
            time.sleep(0.02)
        wall_s = time.monotonic() - self.t0
        self.leaf.kill()  # children the leader left behind: the result is the whole tree's
        _total, user_s, sys_s = self.leaf.cpu_times()
        self.leaf.remove()

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
            wall_s=wall_s, cpu_user_s=user_s, cpu_sys_s=sys_s, timed_out=timed_out, collected=collected,
        )
        self._out.close()
        self._err.close()
        if self.on_reaped:
            self.on_reaped()
        return self._result

    def _wait(self, flags: int) -> tuple[int, int]:
        """os.waitpid, tolerating a child already reaped by kill() or an interrupted earlier wait()."""
        try:
            return os.waitpid(self.proc.pid, flags)
        except ChildProcessError:
            return self.proc.pid, 9  # reaped elsewhere: report it as killed

    def kill(self) -> None:
        """Kill the process and everything it started (its cgroup leaf), and wait until they
        are gone, so nothing still holds the target's device when the target is torn down."""
        self.leaf.kill()
        try:
            os.waitpid(self.proc.pid, os.WNOHANG)
        except ChildProcessError:
            pass


class HostExecutor(Executor):
    """Runs commands on the host in a private work dir removed at close().

    Every process goes into a cgroup leaf of its own (cgroups.trial): inside the trial's
    cgroup when the executor was given one (`within()`, the runner does it per trial),
    else at the hierarchy root. With a ledger, the work dir and every process are recorded
    *before* they are created (pending entries), so `iolab clean` after a kill -9 of iolab
    at any instant also ends orphaned processes (through their cgroup) and removes the dir.
    The work dir's name carries the owner's tag (core.owner), so `iolab clean --all` of any
    data dir knows whose it is.
    """

    name = "host"

    def __init__(self, parent: Path | None = None, ledger: Ledger | None = None,
                 cgroup: TrialCgroup | None = None):
        parent = parent if parent is not None else Path(tempfile.gettempdir())
        parent.mkdir(parents=True, exist_ok=True)
        self.ledger = ledger
        self.cgroup = cgroup
        self.workdir = parent / owners.tag("work", uuid.uuid4().hex[:8])
        self._dir_res: Resource | None = None
        self._owns_workdir = True
        if ledger is None:
            self.workdir.mkdir(mode=0o700)
        else:
            with ledger.creating("dir", str(self.workdir), recursive=True) as res:
                self.workdir.mkdir(mode=0o700)
            self._dir_res = res

    def within(self, cgroup: TrialCgroup | None) -> HostExecutor:
        """This executor (same work dir and ledger), placing what it starts in `cgroup`."""
        view = copy.copy(self)
        view.cgroup = cgroup
        view._owns_workdir = False  # the work dir stays the original's to remove
        return view

    def spawn(self, req: ExecRequest) -> Running:
        for name, text in req.files.items():
            (self.workdir / name).write_text(text)
        tag = uuid.uuid4().hex[:16]
        leaf = self.cgroup.spawn_group(tag) if self.cgroup is not None else SpawnCgroup.standalone(tag)
        leaf.place(req.cgroup_procs)
        if self.ledger is None:
            with signals.held():
                leaf.make()
                return _started(req, self.workdir, leaf, tag)
        ledger = self.ledger
        with ledger.creating("pgroup", "", spawn=tag, **leaf.ledger_info()) as res:
            leaf.make()
            running = _started(req, self.workdir, leaf, tag)
            ledger.update(res, ident=str(running.proc.pid), start=_start_time(running.proc.pid))
        running.on_reaped = lambda: ledger.forget(res)
        return running

    def close(self) -> None:
        if not self._owns_workdir:
            return
        shutil.rmtree(self.workdir, ignore_errors=True)
        if self.ledger and self._dir_res:
            self.ledger.forget(self._dir_res)
            self._dir_res = None


def _started(req: ExecRequest, workdir: Path, leaf: SpawnCgroup, tag: str) -> _HostRunning:
    """Popen in the leaf made just before; a Popen that fails leaves no leaf behind."""
    try:
        return _HostRunning(req, workdir, leaf, tag)
    except BaseException:
        leaf.remove()
        raise


def _start_time(pid: int) -> str:
    start = owners.start_time(pid)
    return "" if start is None else str(start)
