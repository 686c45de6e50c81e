"""The host executor: each load generator a process in its own session and in a cgroup leaf
of its own inside the trial's cgroup (cgroups.trial.SpawnCgroup), so its CPU time is read
there and it is ended through it, whatever it forked. The interface it implements is
core/exec.py (the guest's is vm/executor.py).

It registers the "pgroup" resource kind, which it alone creates: a process it started and
everything that process started, undone through the leaf.
"""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import IO

from iolab.cgroups import processes as cgroup_processes
from iolab.cgroups.trial import SpawnCgroup
from iolab.core import cleaners, confine, diskguard, signals, socketfilter
from iolab.core import owner as owners
from iolab.core.confine import Confinement
from iolab.core.errors import RefusedError
from iolab.core.exec import MAX_OUTPUT, ExecRequest, ExecResult, Executor, ProcessGroup, Running, session_policy
from iolab.core.resources import ORDER_PROCESSES, Ledger, Resource, ResourceKind, register_kind
from iolab.core.signals import STOP_SIGNALS


class _HostRunning(Running):
    """One process started on the host, in its own session and its own cgroup leaf.

    The leaf (cgroups.trial.SpawnCgroup) holds the process and everything it starts, also
    what escapes its session or is reparented (fio's job processes, a forked sleeper): the
    CPU time of the result is read from it, and kill() ends the whole tree through it."""

    def __init__(self, req: ExecRequest, workdir: Path, leaf: SpawnCgroup, spawn_tag: str | None = None,
                 argv: list[str] | None = None, pass_fds: tuple[int, ...] = ()):
        self.req = req
        self.workdir = workdir
        self.leaf = leaf
        self.t0 = time.monotonic()
        self._out = tempfile.TemporaryFile(mode="w+b")
        self._err = tempfile.TemporaryFile(mode="w+b")

        own_session = session_policy() == "own"

        def _child_setup() -> None:  # runs in the child between fork and exec
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
            if not own_session:
                os.setpgid(0, 0)  # iolab's session (its autogroup), but not its terminal's process group
            leaf.join()  # its leaf first, then the groups asked for

        env = dict(os.environ)
        env.update(req.env)
        if spawn_tag:  # inherited by every descendant: `iolab clean` also finds them by it
            env[owners.ENV_SPAWN] = spawn_tag
        self.confined = argv is not None and argv != req.argv
        self.proc = subprocess.Popen(
            argv or req.argv, cwd=workdir, stdout=self._out, stderr=self._err, stdin=subprocess.DEVNULL,
            env=env, start_new_session=own_session, preexec_fn=_child_setup, pass_fds=pass_fds,
        )
        self._result: ExecResult | None = None
        self.on_reaped: Callable[[], None] | None = None

    def wait(self) -> ExecResult:
        if self._result is not None:
            return self._result
        deadline = self.t0 + self.req.timeout_s
        timed_out = exceeded = False
        while True:
            pid, status = self._wait(os.WNOHANG)
            if pid:
                break
            exceeded = _spooled(self._out) > MAX_OUTPUT or _spooled(self._err) > MAX_OUTPUT
            if exceeded or time.monotonic() > deadline:
                timed_out = not exceeded
                self.kill()
                pid, status = self._wait(0)
                break
            time.sleep(0.02)
        wall_s = time.monotonic() - self.t0
        self.leaf.kill()  # children the leader left behind: the result is the whole tree's
        _total, user_s, sys_s = self.leaf.cpu_times()
        self.leaf.remove()

        code = os.waitstatus_to_exitcode(status)
        self.proc.returncode = confine.returncode(code) if self.confined else code
        self._out.seek(0)
        self._err.seek(0)
        collected = {}
        for name in self.req.collect:
            text = _read_capped(self.workdir / name)
            if text is not None:
                collected[name] = text
        self._result = ExecResult(
            argv=self.req.argv, returncode=self.proc.returncode,
            stdout=self._out.read(MAX_OUTPUT).decode(errors="replace"),
            stderr=self._err.read(MAX_OUTPUT).decode(errors="replace"),
            wall_s=wall_s, cpu_user_s=user_s, cpu_sys_s=sys_s, timed_out=timed_out, collected=collected,
            output_exceeded=exceeded,
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

    def send_signal(self, sig: int) -> None:
        """Send `sig` to the command (fio's client asks its server to stop the job on SIGINT).
        Confined, the process iolab started is bwrap, which passes no signal on and would die
        of it: the signal goes to every process of the leaf but bwrap's own, i.e. the command
        and what it started."""
        targets = [self.proc.pid] if not self.confined else [
            pid for pid in self.leaf.pids() if _comm(pid) not in ("bwrap", None)]
        for pid in targets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

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

    With a `confinement` (core.confine; every target that runs a trial's I/O gives one),
    each process runs inside it, the work dir writable besides what the confinement names.

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
                 cgroup: ProcessGroup | None = None, confinement: Confinement | None = None):
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
        self.confinement = confinement.with_writable(str(self.workdir)) if confinement is not None else None
        if confinement is not None and confinement.user is not None:  # own_dir_only: the work dir is the user's
            os.chown(self.workdir, *confinement.user)
            os.chmod(self.workdir, 0o711)  # bwrap enters it before the user switch, with no capability left

    def within(self, cgroup: ProcessGroup | None) -> HostExecutor:
        """This executor (same work dir and ledger), placing what it starts in `cgroup`."""
        view = copy.copy(self)
        view.cgroup = cgroup
        view._owns_workdir = False  # the work dir stays the original's to remove
        return view

    def spawn(self, req: ExecRequest) -> Running:
        for name, text in req.files.items():
            (self.workdir / name).write_text(text)
        tag = uuid.uuid4().hex[:16]
        leaf: SpawnCgroup = self.cgroup.spawn_group(tag) if self.cgroup is not None else SpawnCgroup.standalone(tag)
        leaf.place(req.cgroup_procs)
        with self._filter_fd(req) as seccomp_fd:
            return self._spawn(req, leaf, tag, seccomp_fd)

    def _filter_fd(self, req: ExecRequest) -> AbstractContextManager[int | None]:
        """The unix-socket filter's fd for a confined request (core/socketfilter.py), else none."""
        if self.confinement is None or not req.confined or not self.confinement.filtered:
            return contextlib.nullcontext()
        return socketfilter.program_fd()

    def _spawn(self, req: ExecRequest, leaf: SpawnCgroup, tag: str, seccomp_fd: int | None) -> Running:
        argv = self.confined_argv(req, seccomp_fd)
        fds = (seccomp_fd,) if seccomp_fd is not None else ()
        if argv != req.argv and "TMPDIR" not in req.env:
            # /tmp is read-only in the confinement: temporary files (iperf3's stream buffers,
            # mkstemp in /tmp unless TMPDIR says where) go to the one place it may write
            req = replace(req, env={**req.env, "TMPDIR": str(self.workdir)})
        if self.ledger is None:
            with signals.held():
                leaf.make()
                return _started(req, self.workdir, leaf, tag, argv, fds)
        ledger = self.ledger
        with ledger.creating("pgroup", "", spawn=tag, **leaf.ledger_info()) as res:
            leaf.make()
            running = _started(req, self.workdir, leaf, tag, argv, fds)
            ledger.update(res, ident=str(running.proc.pid), start=_start_time(running.proc.pid))
        running.on_reaped = lambda: ledger.forget(res)
        return running

    def confined_argv(self, req: ExecRequest, seccomp_fd: int | None = None) -> list[str]:
        """The argv that runs `req`: inside the confinement (the request's devices granted only
        if the user named them with --destroy-data), or as it is without one. `seccomp_fd`: the
        unix-socket filter a filtered confinement needs (socketfilter.program_fd())."""
        if self.confinement is None or not req.confined:
            return list(req.argv)
        for dev in req.devices:
            if not diskguard.destroy_allowed(dev):
                raise RefusedError(f"{dev}: a process may write a block device iolab did not make only when the "
                                   f"user names it with --destroy-data {dev}")
        confinement = replace(self.confinement, share_net=True) if req.network else self.confinement
        return confinement.argv(req.argv, cwd=str(self.workdir), extra_devices=req.devices, seccomp_fd=seccomp_fd)

    def close(self) -> None:
        if not self._owns_workdir:
            return
        shutil.rmtree(self.workdir, ignore_errors=True)
        if self.ledger and self._dir_res:
            self.ledger.forget(self._dir_res)
            self._dir_res = None


def _started(req: ExecRequest, workdir: Path, leaf: SpawnCgroup, tag: str, argv: list[str],
             pass_fds: tuple[int, ...] = ()) -> _HostRunning:
    """Popen in the leaf made just before; a Popen that fails leaves no leaf behind."""
    try:
        return _HostRunning(req, workdir, leaf, tag, argv, pass_fds)
    except BaseException:
        leaf.remove()
        raise


def _comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _start_time(pid: int) -> str:
    start = owners.start_time(pid)
    return "" if start is None else str(start)


def _spooled(f: IO[bytes]) -> int:
    """Bytes a process wrote to its spooled stdout or stderr so far."""
    try:
        return os.fstat(f.fileno()).st_size
    except (OSError, ValueError):
        return 0


def _read_capped(path: Path) -> str | None:
    """A collected file's text, at most MAX_OUTPUT bytes of it; None if absent or not a regular file
    (a job can make its output name a FIFO or a link to /dev/zero)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = f.read(MAX_OUTPUT + 1)
    text = data[:MAX_OUTPUT].decode(errors="replace")
    return text + (f"\n[iolab: cut at {MAX_OUTPUT >> 20} MiB]" if len(data) > MAX_OUTPUT else "")


def _pgroup(res: Resource) -> None:
    """A process an executor started and everything it started: ended through its cgroup leaf.

    A pending entry names the leaf too (it is made inside the pending window, before the
    process), so whatever exists is in it. The leaf's kill group is the leaf itself, or the
    group the process was placed in instead (v2: a weighted group inside the trial cgroup).
    Entries of iolab before trial cgroups have no leaf: their processes are found by the
    IOLAB_SPAWN tag they inherited."""
    leaves = [Path(d) for d in res.info.get("cgroups") or []]
    if not leaves:
        spawn = res.info.get("spawn")
        if spawn:
            cleaners.kill_tagged(lambda p: p.spawn == spawn)
        return
    group = res.info.get("kill")
    if group and owners.PREFIX in str(group):  # only ever a group iolab made
        cgroup_processes.kill(Path(group))
    cgroup_processes.destroy(leaves)


# how `iolab clean --all` finds them: every process a dead owner started, by its IOLAB_OWNER tag
register_kind(ResourceKind("pgroup", ORDER_PROCESSES, _pgroup, cleaners.sweep_processes))
