"""One QEMU process from start to reaped: ledger entry, boot (or restore) to the agent's hello,
shutdown.

The process is recorded in the ledger (pending, with its -name tag) before it is
started, with SIGINT/SIGTERM/SIGHUP held until its pid is recorded (`Ledger.creating`),
so a crash or kill of iolab at any instant leaves a tag or a tagged pid for `iolab clean`
(iolab.vm.cleanup, imported here so its "process" cleaner is registered).

A guest restored from a saved state (vm/restore.py) starts the same way with `-incoming fd:N`;
once the state is loaded it is still paused, `Incoming.before_run` attaches what the trial
needs, and only then does it run. Every guest whose agent can (version 2) gets the host's
wall clock and fresh entropy before start() returns, booted or restored alike.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from qemu.qmp.legacy import QEMUMonitorProtocol

import iolab.vm.cleanup  # noqa: F401  (registers the "process" cleaner QemuVM relies on)
from iolab.core import children
from iolab.core.confine import returncode
from iolab.core.resources import Ledger, Resource
from iolab.vm import qmp as qmp_session
from iolab.vm.cmdline import RunFiles, VmSpec, build_command, confinement, qemu_system
from iolab.vm.errors import VmError
from iolab.vm.executor import CLOCK_AGENT_VERSION, AgentChannel, ClockStep

BOOT_TIMEOUT_S = {"kvm": 30.0, "tcg": 90.0}
AGENT_CONNECT_TIMEOUT_S = 10.0
QUIT_TIMEOUT_S = 3.0
# How long kill() waits for QEMU itself to be gone once bwrap, its parent, is reaped: a SIGKILLed
# QEMU with a large guest can take a moment to exit on a loaded machine, and until then its
# sockets still listen at paths the next QEMU of the same run directory reuses.
QEMU_EXIT_WAIT_S = 10.0


@dataclass(frozen=True)
class Incoming:
    """A saved state to restore instead of booting: its open descriptor (inherited by QEMU as
    `-incoming fd:N`), and what to do while the loaded guest is still paused (attach disks)."""

    fd: int
    before_run: Callable[[QEMUMonitorProtocol], None] = lambda qmp: None


@dataclass
class QemuVM:
    """One QEMU process: start (boot to agent hello), QMP, shutdown; always reaped."""

    spec: VmSpec
    files: RunFiles
    ledger: Ledger
    proc: subprocess.Popen[bytes] | None = None
    argv: list[str] = field(default_factory=list)
    qmp: QEMUMonitorProtocol | None = None
    channel: AgentChannel | None = None
    kernel_release: str | None = None
    boot_seconds: float | None = None
    started_at: float | None = None  # time.monotonic() just before QEMU was launched
    restored: bool = False  # started from a saved state (Incoming), not booted
    restore_seconds: float | None = None  # launch until the loaded state ran (restored guests)
    clock: ClockStep | None = None  # what setting the guest's clock did (agent version 2 on)
    qemu_pid: int | None = None  # QEMU itself; self.proc is bwrap, its parent
    _res: Resource | None = None

    @property
    def pid(self) -> int | None:
        """QEMU's host pid (bwrap's child: QEMU runs confined, core/confine.py), for probes."""
        return self.qemu_pid or (self.proc.pid if self.proc else None)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, boot_timeout_s: float | None = None, incoming: Incoming | None = None) -> None:
        """Launch (or restore, with `incoming`) and wait for the agent's hello; on any failure
        kill QEMU and raise VmError."""
        self.files.directory.mkdir(parents=True, exist_ok=True)
        for sock in (self.files.qmp, self.files.agent):
            # an earlier QEMU of this directory (a failed restore's, vm/restore.py boot_instead) may
            # still be listening on them while its exit runs: unlinked, the paths can only reach ours
            sock.unlink(missing_ok=True)
        fd = self.spec.secret.open_fd() if self.spec.secret is not None else None
        inherited = tuple(f for f in (fd, incoming.fd if incoming else None) if f is not None)
        try:
            self.argv = build_command(self.spec, self.files, qemu_system(), secret_fd=fd,
                                      incoming_fd=incoming.fd if incoming else None)
            info_r, info_w = os.pipe()
            launch = confinement(self.spec, self.files).argv(self.argv, cwd=str(self.files.directory),
                                                             info_fd=info_w)
            t0 = self.started_at = time.monotonic()
            # pending entry first: a kill before the pid is known leaves the -name tag to find QEMU by
            with open(self.files.stderr, "wb") as err, \
                    self.ledger.creating("process", "", tag=self.spec.tag, what="qemu", argv0=self.argv[0]) as res:
                self.proc = children.start(launch, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                           start_new_session=True, pass_fds=(info_w, *inherited))
                self.ledger.update(res, ident=str(self.proc.pid))
            self._res = res
            os.close(info_w)
            self.qemu_pid = _child_pid(info_r)
            if self.qemu_pid is not None:  # the cleaner checks a pid runs QEMU: bwrap's would not
                self.ledger.update(res, ident=str(self.qemu_pid))
        finally:
            if fd is not None:
                os.close(fd)
        timeout = boot_timeout_s or BOOT_TIMEOUT_S[self.spec.accel]
        try:
            self.channel = AgentChannel(self.files.agent, diagnose=self.diagnosis)
            self.channel.connect(timeout_s=AGENT_CONNECT_TIMEOUT_S)
            # QEMU greets on QMP only once an incoming state is loaded: the boot timeout bounds both
            self.qmp = qmp_session.connect(self.files.qmp, alive=self.alive,
                                           **({"timeout_s": timeout} if incoming else {}))
            if incoming is not None:
                self._run_restored(incoming, t0 + timeout)
            hello = self.channel.wait_hello(max(timeout - (time.monotonic() - t0), 1.0), alive=self.alive)
            if self.channel.agent_version >= CLOCK_AGENT_VERSION:
                self.clock = self.channel.set_clock()
        except BaseException as exc:
            self.kill()
            if not isinstance(exc, Exception):  # Ctrl-C: already cleaned up, let it through
                raise
            why = str(exc) or type(exc).__name__
            raise VmError(f"guest {self.spec.tag} did not come up: {why}\n{self.diagnosis()}") from exc
        self.kernel_release = hello.text("k")
        self.boot_seconds = time.monotonic() - t0

    def _run_restored(self, incoming: Incoming, deadline: float) -> None:
        """Wait until the saved state is loaded (QEMU leaves `inmigrate`; a state that does not
        load ends QEMU, with the reason on its stderr), attach what the trial needs while the
        guest is paused (it was saved stopped), then let it run."""
        assert self.qmp is not None and self.started_at is not None
        while (status := _status(self.qmp)) == "inmigrate":
            if time.monotonic() > deadline:
                raise TimeoutError("the saved state did not load before the boot timeout")
            time.sleep(0.01)
        if status != "paused":
            raise VmError(f"the restored guest is {status!r} after loading its state, expected 'paused'")
        incoming.before_run(self.qmp)
        self.qmp.cmd("cont")
        self.restored = True
        self.restore_seconds = time.monotonic() - self.started_at

    def console_tail(self, n: int = 3000) -> str:
        try:
            data = self.files.console.read_bytes()[-n:]
        except OSError:
            return ""
        return data.decode(errors="replace").replace("\x1b", "")

    def diagnosis(self) -> str:
        """Why a guest failed, for error messages: QEMU's exit, its stderr, the console tail."""
        parts = []
        if self.proc is not None and self.channel is not None and self.channel.closed_reason:
            self._wait_exit(2.0)  # the channel closes a moment before QEMU can be reaped
        if self.proc is not None and self.proc.poll() is not None:
            parts.append(f"QEMU exited with status {returncode(self.proc.returncode)}")
        try:
            err = self.files.stderr.read_text(errors="replace").strip()
        except OSError:
            err = ""
        if err:
            parts.append("QEMU stderr:\n" + err[-1500:])
        tail = self.console_tail()
        parts.append("guest console tail:\n" + (tail if tail.strip() else "(empty)"))
        return "\n".join(parts)

    def shutdown(self, timeout_s: float = 15.0) -> None:
        """Agent power-off, then QMP quit, then SIGKILL: each step only if the last one failed."""
        if self.alive() and self.channel is not None and self.channel.hello is not None:
            try:
                self.channel.poweroff()
            except Exception:
                pass
            self._wait_exit(timeout_s / 2)
        if self.alive() and self.qmp is not None:
            try:
                self.qmp.settimeout(QUIT_TIMEOUT_S)
                self.qmp.cmd("quit")
            except Exception:  # QEMU may close the monitor before it answers
                pass
            self._wait_exit(timeout_s / 2)
        self.kill()

    def _wait_exit(self, timeout_s: float) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass

    def kill(self) -> None:
        """Kill and reap QEMU, close the channels, release the ledger entry. Idempotent."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc is not None:
            self.proc.wait()
            if self.qemu_pid is not None:
                _wait_gone(self.qemu_pid, QEMU_EXIT_WAIT_S)
        if self.channel is not None:
            self.channel.close()
        if self.qmp is not None:
            qmp_session.close(self.qmp)
            self.qmp = None
        if self._res is not None:
            self.ledger.forget(self._res)  # reaped above: nothing left for the cleaner
            self._res = None


def _wait_gone(pid: int, timeout_s: float) -> None:
    """Until `pid` has exited (gone, or a zombie: its files, sockets included, are closed by then),
    at most `timeout_s`. QEMU is bwrap's child (core/confine.py: no pid namespace of its own), so
    reaping bwrap does not wait for it: SIGKILL to the group reaches both, but QEMU's exit runs when
    it is next scheduled. A QEMU started at once in the same run directory (a failed restore's boot,
    vm/restore.py boot_instead) then found the old agent socket still listening, connected to it,
    and lost it a moment later (a broken pipe while the parallel suite loaded the machine)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.01)


def _status(qmp: QEMUMonitorProtocol) -> str:
    reply = qmp.cmd("query-status")
    return str(reply.get("status")) if isinstance(reply, dict) else ""


def _child_pid(fd: int, timeout_s: float = 10.0) -> int | None:
    """The pid bwrap reports on its info fd (JSON {"child-pid": N}); None if it says nothing
    (it failed before starting QEMU: the diagnosis shows its stderr). Closes the fd."""
    data = b""
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if not ready:
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
            if b"}" in data:
                break
    finally:
        os.close(fd)
    try:
        return int(json.loads(data.decode())["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None
