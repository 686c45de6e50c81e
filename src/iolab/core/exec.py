"""Running load generators: one interface for the host and for guests.

A workload never calls subprocess itself; it asks the placement's executor. On the host
that is a process in its own session (so Ctrl-C reaches iolab, which then stops it
cleanly) and in a cgroup leaf of its own inside the trial's cgroup (cgroups/executor.py,
HostExecutor: its CPU time is read there and it is ended through it, whatever it forked);
in a guest it is the guest agent (vm/executor.py). This is what lets one study spec run on
either. This module is the interface alone: core names no cgroup, so cgroups (which keeps
its state in core's ledger) sits above it and the host executor with it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Protocol


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
    # files to read back from the work dir after the run (e.g. fio --output), each up to MAX_OUTPUT
    collect: list[str] = field(default_factory=list)
    # block devices this process may also write (a device an imported job file names): on a
    # confined host executor each must be one the user named with --destroy-data
    devices: list[str] = field(default_factory=list)
    # False only for iolab's own fixed commands that act on the machine (dropping the page
    # cache): never for a process whose arguments or input come from a spec or a job file
    confined: bool = True
    # True for a process that talks to another process over the host's loopback (iperf3's
    # server and client, two processes in two confinements): on a confined host executor it
    # keeps the host's network namespace instead of a private one (where 127.0.0.1 is its
    # own); what it may write and which devices it sees stay the same
    network: bool = False


# What is read back of a process's stdout, stderr and each collected file. A process whose
# stdout or stderr grows past it is killed (fio told to write its data to stdout, `filename=-`,
# would otherwise fill the spool file and iolab's memory).
MAX_OUTPUT = 64 << 20


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
    output_exceeded: bool = False  # killed because stdout/stderr grew past MAX_OUTPUT

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

    def send_signal(self, sig: int) -> None:
        """Send `sig` to the command itself (where the executor can)."""
        raise NotImplementedError(f"{type(self).__name__} cannot signal its process")


class ProcessGroup(Protocol):
    """Where a trial's host processes are placed (cgroups.trial.TrialCgroup): all an executor
    asks of it is a leaf per process it starts."""

    def spawn_group(self, tag: str) -> Any: ...


class Executor(ABC):
    """Where commands of a trial run (host, or a guest agent)."""

    name: str = "executor"

    @abstractmethod
    def spawn(self, req: ExecRequest) -> Running: ...

    def within(self, cgroup: ProcessGroup | None) -> Executor:
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

