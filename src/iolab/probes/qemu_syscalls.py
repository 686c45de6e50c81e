"""What QEMU asks of the host for the image during a trial: syscalls and qcow2/io_uring trace events.

Two sources, both attached to the running QEMU without restarting it:

* **strace -c** on every QEMU thread (-f; threads created later are followed too), for
  fdatasync, fsync, pwrite64, pwritev, pwritev2, io_submit (aio=native: Linux AIO writes,
  no pwrite) and io_uring_enter. SIGINT at stop makes
  strace detach and write its summary table (-o file), which is parsed into counts.
  Only the image is written by QEMU during a trial (the guest's console/log are not
  fdatasync'ed), so these are the image's syscalls.
* **QEMU trace events**, switched on and off over QMP (`trace-event-set-state`) around the
  trial; QEMU's "log" trace backend writes them to its stderr file (RunFiles.stderr),
  read from the offset it had at start. Counted: qcow2 metadata work (L2 table allocation,
  cluster allocation, cache entry writes and cache flushes, split by L2 vs refcount cache)
  and `luring_co_submit` by request type, because with aio=io_uring QEMU submits its
  flushes (IORING_OP_FSYNC) through the ring: a syscall trace sees only io_uring_enter.

host_fdatasync_total = fdatasync + fsync syscalls + io_uring flush submissions;
host_write_requests = pwrite* syscalls + io_submit calls + io_uring write submissions (probe_counts).
The parsers are pure and tested on real captured output (tests/vm/test_sync_parsers.py).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

from qemu.qmp.legacy import QEMUMonitorProtocol

from iolab.core import children
from iolab.core.errors import TrialFailed
from iolab.core.metrics import Metric
from iolab.probes.base import Probe
from iolab.targets.base import Placement

SYSCALLS = ("fdatasync", "fsync", "pwrite64", "pwritev", "pwritev2", "io_submit", "io_uring_enter")
TRACE_EVENTS = ("qcow2_l2_allocate", "qcow2_handle_alloc", "qcow2_cache_entry_flush", "qcow2_cache_flush",
                "qcow2_writev_start_req", "luring_co_submit")
QEMU_AIO_WRITE, QEMU_AIO_FLUSH = 0x0002, 0x0008  # block/raw-aio.h
ATTACH_TIMEOUT_S = 15.0
_ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:(\d+)\s+)?(\w+)\s*$")
_EVENT = re.compile(r"^(?:\d+@[\d.]+:)?(\w+) (.*)$")


def parse_strace_summary(text: str) -> dict[str, int]:
    """{syscall: calls} from strace -c's table (% time, seconds, usecs/call, calls, [errors], syscall)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = _ROW.match(line)
        if m and m.group(3) != "total":
            out[m.group(3)] = int(m.group(1))
    return out


def count_trace_events(text: str) -> dict[str, int]:
    """Counts of the qcow2 / io_uring events in QEMU's log-backend lines."""
    c: Counter[str] = Counter()
    for line in text.splitlines():
        m = _EVENT.match(line.strip())
        if not m or m.group(1) not in TRACE_EVENTS:
            continue
        name, rest = m.groups()
        if name in ("qcow2_cache_entry_flush", "qcow2_cache_flush"):
            l2 = re.search(r"is_l2_cache (\d)", rest)
            name += "_l2" if l2 and l2.group(1) == "1" else "_refcount"
        elif name == "luring_co_submit":
            t = re.search(r"type (\d+)", rest)
            kind = int(t.group(1)) if t else -1
            name = {QEMU_AIO_FLUSH: "luring_flush", QEMU_AIO_WRITE: "luring_write"}.get(kind, "luring_other")
        c[name] += 1
    return dict(c)


def causes_from_events(ev: dict[str, int]) -> dict[str, int]:
    """The qcow2 metadata work behind extra syncs, named for the report."""
    return {
        "l2_table_allocations": ev.get("qcow2_l2_allocate", 0),
        "cluster_allocations": ev.get("qcow2_handle_alloc", 0),
        "l2_table_writes": ev.get("qcow2_cache_entry_flush_l2", 0),
        "refcount_block_writes": ev.get("qcow2_cache_entry_flush_refcount", 0),
        "l2_cache_flushes": ev.get("qcow2_cache_flush_l2", 0),
        "refcount_cache_flushes": ev.get("qcow2_cache_flush_refcount", 0),
    }


def probe_counts(calls: dict[str, int], events: dict[str, int] | None) -> dict[str, Any]:
    """The probe's result from strace's {syscall: calls} and the trace-event counts (None: no trace).

    host_fdatasync_total = fdatasync + fsync syscalls + io_uring flush submissions (each is
    one request to the host kernel to make the image durable); host_write_requests =
    pwrite64/pwritev/pwritev2 syscalls + io_submit calls (aio=native; each carries one or
    more writes or reads) + io_uring write submissions.
    """
    out: dict[str, Any] = {f"host_{s}": calls.get(s, 0) for s in SYSCALLS}
    out["host_pwrite"] = sum(calls.get(s, 0) for s in ("pwrite64", "pwritev", "pwritev2"))
    if events is not None:
        out["trace_events"] = dict(events)
        out["io_uring_flushes"] = events.get("luring_flush", 0)
        out["io_uring_writes"] = events.get("luring_write", 0)
        out["causes"] = causes_from_events(events)
        out["io_uring_counted"] = True
    else:
        out["io_uring_flushes"] = 0
        out["io_uring_writes"] = 0
        out["io_uring_counted"] = False
    out["host_fdatasync_total"] = out["host_fdatasync"] + out["host_fsync"] + out["io_uring_flushes"]
    out["host_write_requests"] = out["host_pwrite"] + out["host_io_submit"] + out["io_uring_writes"]
    return out


class QemuSyscalls(Probe):
    name: ClassVar[str] = "qemu_syscalls"
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("host_{call:fdatasync|fsync|pwrite64|pwritev|pwritev2|io_submit|io_uring_enter}", "calls", "neither",
               "that syscall's calls by every QEMU thread (strace -c)"),
        Metric("host_pwrite", "calls", "neither", "pwrite64 + pwritev + pwritev2 calls"),
        Metric("io_uring_{op:flushes|writes}", "requests", "neither",
               "flushes / writes QEMU submitted through io_uring (trace event luring_co_submit)"),
        Metric("host_fdatasync_total", "syncs", "neither",
               "host syncs for the image: fdatasync + fsync calls + io_uring flushes"),
        Metric("host_write_requests", "requests", "neither",
               "host write requests: pwrite* calls + io_submit calls + io_uring writes"),
        Metric("trace_events.{event:word}", "events", "neither", "QEMU trace events counted over the trial"),
        Metric("causes.{cause:word}", "events", "neither", "qcow2 metadata work behind extra syncs, by kind"),
    )
    attributes: ClassVar[tuple[str, ...]] = ("io_uring_counted", "qemu_pid", "notes")
    default: ClassVar[bool] = False  # strace slows QEMU: only studies that count syscalls ask for it

    @classmethod
    def applies_to(cls, placement: Placement) -> bool:
        return bool(placement.extras.get("qemu_pid"))

    def start(self, placement: Placement) -> None:
        self.pid = int(placement.extras["qemu_pid"])
        self.vm = placement.extras.get("vm")
        self.qmp: QEMUMonitorProtocol | None = placement.extras.get("qmp")
        self.notes: list[str] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.tmp = Path(tempfile.mkdtemp(prefix="iolab-strace-"))
        self.out = self.tmp / "summary.txt"
        self._start_trace()
        exe = "strace"
        # strace is one of the trial's processes: in a leaf of the trial cgroup, ended with the trial
        cgroup = placement.trial_cgroup
        self.leaf = cgroup.spawn_group(f"strace-{uuid.uuid4().hex[:8]}") if cgroup is not None else None
        if self.leaf is not None:
            self.leaf.make()
        try:
            self.proc = children.start(
                [exe, "-f", "-qq", "-c", "-o", str(self.out), "-p", str(self.pid),
                 "-e", "trace=" + ",".join(SYSCALLS)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                preexec_fn=self.leaf.join if self.leaf is not None else None)
        except FileNotFoundError as exc:
            self._stop_trace()
            self._remove_leaf()
            raise TrialFailed("the qemu_syscalls probe needs strace (Debian: apt-get install strace)") from exc
        self._wait_attached()

    def _threads(self) -> list[Path]:
        return list(Path(f"/proc/{self.pid}/task").glob("*"))

    def _wait_attached(self) -> None:
        """Every QEMU thread has strace as its tracer, or the first syscalls would be missed."""
        assert self.proc is not None
        deadline = time.monotonic() + ATTACH_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = (self.proc.stderr.read() if self.proc.stderr else b"").decode(errors="replace")
                self._stop_trace()
                raise TrialFailed(f"strace could not attach to QEMU pid {self.pid}: {err.strip()[-500:]}")
            tracers = []
            for task in self._threads():
                try:
                    status = (task / "status").read_text()
                except OSError:
                    continue
                traced = re.search(r"^TracerPid:\s*(\d+)", status, re.M)
                if traced:  # every Linux status file has the line; a thread without it is not traced
                    tracers.append(traced.group(1))
            if tracers and all(t == str(self.proc.pid) for t in tracers):
                return
            time.sleep(0.05)
        self._kill()
        self._stop_trace()
        raise TrialFailed(f"strace did not attach to every QEMU thread within {ATTACH_TIMEOUT_S:.0f}s")

    # ---------------------------------------------------------------- trace events

    def _qmp_trace(self, enable: bool) -> bool:
        if self.qmp is None:
            return False
        try:
            for ev in TRACE_EVENTS:
                self.qmp.cmd("trace-event-set-state", name=ev, enable=enable)
            return True
        except Exception as exc:
            self.notes.append(f"trace events unavailable: {exc}")
            return False

    def _stderr_path(self) -> Path | None:
        files = getattr(self.vm, "files", None)
        return getattr(files, "stderr", None)

    def _start_trace(self) -> None:
        path = self._stderr_path()
        self.trace_offset = path.stat().st_size if path and path.exists() else None
        self.tracing = self.trace_offset is not None and self._qmp_trace(True)

    def _stop_trace(self) -> dict[str, int] | None:
        if not getattr(self, "tracing", False):
            return None
        self.tracing = False
        self._qmp_trace(False)
        time.sleep(0.1)
        path = self._stderr_path()
        if path is None or self.trace_offset is None:
            return None
        with open(path, "rb") as f:
            f.seek(self.trace_offset)
            text = f.read().decode(errors="replace")
        return count_trace_events(text)

    # ---------------------------------------------------------------- stop

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        self._remove_leaf()

    def _remove_leaf(self) -> None:
        """strace's leaf (its CPU time stays in the trial cgroup's total)."""
        leaf = getattr(self, "leaf", None)
        if leaf is not None:
            leaf.remove()
            self.leaf = None

    def stop(self) -> dict[str, Any]:
        events = self._stop_trace()
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self._kill()
            raise TrialFailed("strace did not detach from QEMU within 30s") from None
        self._remove_leaf()
        text = self.out.read_text() if self.out.exists() else ""
        for p in self.tmp.iterdir():
            p.unlink()
        self.tmp.rmdir()
        calls = parse_strace_summary(text)
        if not text.strip():
            self.notes.append("strace wrote an empty summary: QEMU made none of the traced syscalls")
        out = probe_counts(calls, events)
        out["qemu_pid"] = self.pid
        if events is None:
            self.notes.append("io_uring flushes NOT counted (no QEMU trace events): with aio=io_uring "
                              "host_fdatasync misses flushes submitted through the ring")
        if self.notes:
            out["notes"] = self.notes
        return out
