"""GuestExecutor: iolab.core.exec's Executor, running commands through the guest agent.

One guest serves many commands (one boot per target setup). Each request gets an id; a
reader thread routes answers to the waiting Running, so spawns may overlap. A guest that
stops answering produces a failed ExecResult that says why, with the console tail, rather
than hanging the trial.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from iolab.core.exec import ExecRequest, ExecResult, Executor, Running
from iolab.vm import protocol as P

# Extra seconds the host waits beyond a command's own timeout before declaring the guest
# hung: the agent enforces the timeout itself, so this only covers a stuck guest.
HOST_GRACE_S = 20.0
KILL_WAIT_S = 5.0
CLOCK_AGENT_VERSION = 2  # the first agent that understands the CLOCK frame
CLOCK_TIMEOUT_S = 10.0
ENTROPY_BYTES = 64


@dataclass(frozen=True)
class ClockStep:
    """What setting the guest's clock did: how far it was off (host minus guest, seconds) and
    the round trip of the request, which bounds how far off it still is."""

    step_s: float
    round_trip_s: float
    reseeded: bool

    def manifest(self) -> dict[str, object]:
        return {"clock_step_s": round(self.step_s, 6), "clock_error_bound_s": round(self.round_trip_s, 6),
                "rng_reseeded": self.reseeded}


class AgentChannel:
    """The host end of the virtio-serial port: connect, hello, request/answer routing."""

    def __init__(self, sock_path: Path, diagnose: Callable[[], str] = lambda: ""):
        self.sock_path = sock_path
        self.diagnose = diagnose
        self.hello: P.Frame | None = None
        self.closed_reason: str | None = None
        self._fs: P.FrameSocket | None = None
        self._answers: dict[int, P.Frame] = {}
        self._cond = threading.Condition()
        # ids start at a random point: a guest restored from a saved state may still hold
        # leftovers of the saved guest's requests (ids counted from 1 there), never ours
        self._next_id = 1 + secrets.randbelow(1 << 30)
        self._reader: threading.Thread | None = None

    def connect(self, timeout_s: float = 10.0) -> None:
        """Connect to QEMU's chardev socket (it exists as soon as QEMU has parsed its args)."""
        deadline = time.monotonic() + timeout_s
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(str(self.sock_path))
                break
            except OSError as exc:
                sock.close()
                if time.monotonic() > deadline:
                    raise P.ChannelClosed(f"cannot connect to the agent socket {self.sock_path}: {exc}") from exc
                time.sleep(0.02)
        self._fs = P.FrameSocket(sock)
        self._reader = threading.Thread(target=self._read_loop, name="iolab-agent-reader", daemon=True)
        self._reader.start()
        self._fs.send(P.PING, 0)  # in case the agent said hello before we connected

    def wait_hello(self, timeout_s: float, alive: Callable[[], bool] = lambda: True) -> P.Frame:
        """Block until the agent greets; raises ChannelClosed / TimeoutError with the reason."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self.hello is None:
                if self.closed_reason:
                    raise P.ChannelClosed(self.closed_reason)
                if not alive():
                    raise P.ChannelClosed("QEMU exited before the guest agent started")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"the guest agent did not start within {timeout_s:.0f} s")
                self._cond.wait(min(left, 0.2))
            return self.hello

    @property
    def agent_version(self) -> int:
        """The agent's protocol level from its hello (0 before the hello or if unreadable)."""
        try:
            return int(self.hello.text("v")) if self.hello is not None else 0
        except ValueError:
            return 0

    def set_clock(self, timeout_s: float = CLOCK_TIMEOUT_S) -> ClockStep:
        """Step the guest's wall clock to the host's and reseed its RNG with fresh host bytes.

        Why: a guest restored from a saved state wakes with the clock of the moment it was saved
        (workloads and probes read time) and the RNG state of every guest restored from it. The
        guest is set to the host time taken just before sending, so it ends up behind by at
        most the request's one-way delay: the round trip is returned as the bound."""
        if self.agent_version < CLOCK_AGENT_VERSION:
            raise P.ChannelClosed(f"the guest agent (version {self.agent_version}) cannot set the clock; "
                                  f"version {CLOCK_AGENT_VERSION} can (rebuild the agent from agent.c)")
        with self._cond:
            fid = self._next_id
            self._next_id += 1
        t0 = time.monotonic()
        host_ns = time.time_ns()
        self._send(P.CLOCK, fid, [("t", str(host_ns)), ("r", os.urandom(ENTROPY_BYTES))])
        frame = self.answer(fid, time.monotonic() + timeout_s)
        rtt = time.monotonic() - t0
        if frame is None:
            raise P.ChannelClosed(self.closed_reason or f"the guest agent did not answer the clock request "
                                                        f"within {timeout_s:.0f} s")
        if frame.type == P.ERROR:
            raise P.ChannelClosed(f"the guest agent refused to set the clock: {frame.text('z')}")
        if frame.number("r", -1) != 0:
            raise P.ChannelClosed(f"clock_settime in the guest failed (errno {-frame.number('r', -1)})")
        reseeded = frame.first("s") is not None and frame.number("s") == 0
        return ClockStep((host_ns - frame.number("b")) / 1e9, rtt, reseeded)

    def _read_loop(self) -> None:
        assert self._fs is not None
        try:
            while True:
                frame = self._fs.recv()
                with self._cond:
                    if frame.type == P.HELLO:
                        self.hello = self.hello or frame
                    else:
                        self._answers[frame.id] = frame
                    self._cond.notify_all()
        except (P.ChannelClosed, ValueError) as exc:
            with self._cond:
                self.closed_reason = self.closed_reason or str(exc)
                self._cond.notify_all()

    def request(self, fields: list[tuple[str, bytes | str]]) -> int:
        with self._cond:
            fid = self._next_id
            self._next_id += 1
        self._send(P.RUN, fid, fields)
        return fid

    def answer(self, fid: int, deadline: float) -> P.Frame | None:
        """The answer to request `fid`, or None at the deadline or when the channel closes."""
        with self._cond:
            while fid not in self._answers:
                left = deadline - time.monotonic()
                if left <= 0 or self.closed_reason:
                    return None
                self._cond.wait(min(left, 0.5))
            return self._answers.pop(fid)

    def kill(self, fid: int) -> None:
        try:
            self._send(P.KILL, fid, [])
        except P.ChannelClosed:
            pass

    def poweroff(self) -> None:
        self._send(P.POWEROFF, 0, [])

    def _send(self, ftype: bytes, fid: int, fields: list[tuple[str, bytes | str]]) -> None:
        if self._fs is None:
            raise P.ChannelClosed("the agent channel is not connected")
        if self.closed_reason:
            raise P.ChannelClosed(self.closed_reason)
        self._fs.send(ftype, fid, fields)

    def close(self) -> None:
        if self._fs is not None:
            self._fs.close()
        if self._reader is not None:
            self._reader.join(timeout=2)
        with self._cond:
            self.closed_reason = self.closed_reason or "closed by the host"
            self._cond.notify_all()


def request_fields(req: ExecRequest) -> list[tuple[str, bytes | str]]:
    """An ExecRequest as agent fields; names are checked here so errors name the culprit."""
    if not req.argv:
        raise ValueError("empty argv")
    fields: list[tuple[str, bytes | str]] = [("a", a) for a in req.argv]
    fields.append(("t", str(max(1, int(req.timeout_s * 1000)))))
    for name, text in req.files.items():
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"guest work-dir file names must be plain names, got {name!r}")
        fields += [("f", name), ("d", text)]
    for key, value in req.env.items():
        if not key or "=" in key or "\0" in key + value:
            raise ValueError(f"invalid environment variable name {key!r}")
        fields.append(("e", f"{key}={value}"))
    fields += [("g", p) for p in req.cgroup_procs]
    fields += [("c", c) for c in req.collect]
    return fields


def result_from(req: ExecRequest, frame: P.Frame) -> ExecResult:
    if frame.type == P.ERROR:
        return failed_result(req, f"the guest agent refused the request: {frame.text('z')}", 0.0)
    collected: dict[str, str] = {}
    name: str | None = None
    for tag, value in frame.fields:
        if tag == "n":
            name = value.decode(errors="replace")
        elif tag == "d" and name is not None:
            collected[name] = value.decode(errors="replace")
            name = None
    return ExecResult(
        argv=list(req.argv), returncode=frame.number("r", -1),
        stdout=frame.text("o"), stderr=frame.text("e"),
        wall_s=frame.number("w") / 1e9, cpu_user_s=frame.number("u") / 1e6,
        cpu_sys_s=frame.number("s") / 1e6, timed_out=bool(frame.number("x")),
        collected=collected,
    )


def failed_result(req: ExecRequest, reason: str, wall_s: float, timed_out: bool = False) -> ExecResult:
    return ExecResult(argv=list(req.argv), returncode=-1, stdout="", stderr=reason,
                      wall_s=wall_s, cpu_user_s=0.0, cpu_sys_s=0.0, timed_out=timed_out)


def _with_view(res: ExecResult, view: str) -> ExecResult:
    """A command that timed out carries what the host side saw of the guest's disk at the timeout
    (QEMU's queues, vm/virtio_queues.py), so a hung I/O says which layer holds it."""
    if not res.timed_out or not view:
        return res
    return replace(res, stderr=f"{res.stderr}\nQEMU's view of the disk's queues at the timeout:\n{view}")


class _GuestRunning(Running):
    def __init__(self, channel: AgentChannel, req: ExecRequest, grace_s: float,
                 host_view: Callable[[], str] | None = None):
        self.channel = channel
        self.req = req
        self.grace_s = grace_s
        self.host_view = host_view
        self.t0 = time.monotonic()
        self._result: ExecResult | None = None
        self.fid = channel.request(request_fields(req))

    def wait(self) -> ExecResult:
        if self._result is None:
            self._result = self._wait()
        return self._result

    def _wait(self) -> ExecResult:
        frame = self.channel.answer(self.fid, self.t0 + self.req.timeout_s)
        # The host side's view is taken as the command's timeout passes, before the agent has ended
        # what the command started (up to 10 s: a process that waits in the kernel for I/O): by the
        # time the answer comes, a held request may have completed (a throttled disk did)
        view = ""
        if frame is None and self.host_view is not None and not self.channel.closed_reason:
            view = self.host_view()
        if frame is None:
            frame = self.channel.answer(self.fid, self.t0 + self.req.timeout_s + self.grace_s)
        if frame is None and not self.channel.closed_reason:
            self.channel.kill(self.fid)
            frame = self.channel.answer(self.fid, time.monotonic() + KILL_WAIT_S)
        if frame is not None:
            return _with_view(result_from(self.req, frame), view)
        wall = time.monotonic() - self.t0
        if self.channel.closed_reason:
            why = f"the guest went away while running the command: {self.channel.closed_reason}"
            timed_out = False
        else:
            why = (f"the guest agent did not answer within {self.req.timeout_s + self.grace_s:.0f} s "
                   f"(command timeout {self.req.timeout_s:.0f} s + {self.grace_s:.0f} s grace): "
                   f"the guest looks hung")
            timed_out = True
        tail = self.channel.diagnose()
        return _with_view(failed_result(self.req, why + (f"\nguest console tail:\n{tail}" if tail else ""), wall,
                                        timed_out), view)

    def kill(self) -> None:
        self.channel.kill(self.fid)


class GuestExecutor(Executor):
    """Runs commands inside a booted guest; the work dir is /run/iolab/work in the guest."""

    name = "guest"
    workdir = "/run/iolab/work"

    def __init__(self, channel: AgentChannel, grace_s: float = HOST_GRACE_S,
                 host_view: Callable[[], str] | None = None):
        self.channel = channel
        self.grace_s = grace_s
        self.host_view = host_view  # what the host sees of the guest's disk (vm.virtio_queues), for timeouts

    def spawn(self, req: ExecRequest) -> Running:
        return _GuestRunning(self.channel, req, self.grace_s, self.host_view)

    def close(self) -> None:
        """Nothing to remove on the host: the work dir lives and dies with the guest."""
