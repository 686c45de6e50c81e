"""R2's write-mode experiment as a workload: one fresh file written with one write mode.

fio can do O_SYNC and O_DIRECT writes but not "memcpy into a shared mapping, then msync",
and it cannot tell whether a mode really bypassed the page cache. The native helper
iolab_writemode does all four modes the same way and reports, next to the time, whether
the open flags took effect and how much of the file stayed in the page cache, so a mode
that silently did not apply (O_DIRECT on a filesystem that caches anyway) is flagged
instead of being reported as a fast device.
"""

from __future__ import annotations

import json
import shlex
import uuid
from typing import Any, ClassVar, Literal

from pydantic import field_validator

from iolab.core.errors import TrialFailed
from iolab.core.exec import ExecRequest, ExecResult
from iolab.core.metrics import Metric
from iolab.core.units import format_size, parse_size
from iolab.native import helper_for as native_helper_for
from iolab.native import helper_stdout
from iolab.targets.base import Needs, Placement
from iolab.workloads.base import Workload, WorkloadParams, WorkloadResult, remove_own_file

HELPER = "iolab_writemode"
MIN_BS = 512
MAX_BS = 1 << 20
MiB = float(1 << 20)
# Above this share of pages cached, O_DIRECT did not bypass the page cache; below the
# complementary share, buffered/mmap writes did not stay cached (memory pressure?).
RESIDENT_LIMIT = 0.10

Mode = Literal["buffered", "o_sync", "o_direct", "mmap"]


class WriteModeParams(WorkloadParams):
    """bs: bytes per write()/memcpy, a power of two in 512 B..1 MiB; size: bytes per trial."""

    kind: Literal["writemode"] = "writemode"
    mode: Mode
    bs: int
    size: int = 5 << 20

    @field_validator("bs", mode="before")
    @classmethod
    def _bs(cls, v: Any) -> int:
        n = parse_size(v)
        if n < MIN_BS or n > MAX_BS or n & (n - 1):
            raise ValueError(f"bs must be a power of two between 512 and 1M, got {v!r}")
        return n

    @field_validator("size", mode="before")
    @classmethod
    def _size(cls, v: Any) -> int:
        n = parse_size(v)
        if n <= 0:
            raise ValueError(f"size must be positive, got {v!r}")
        return n


class WriteModeWorkload(Workload):
    """Runs iolab_writemode once per trial on a fresh file in placement.directory."""

    kind: ClassVar[str] = "writemode"
    Params: ClassVar[type[WorkloadParams]] = WriteModeParams
    main_metric = "throughput_mib_s"
    # Every trial writes the same `size` bytes (fixed work): rates average harmonically.
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("throughput_mib_s", "MiB/s", "higher", "bytes written / seconds, until durable (2^20 bytes/s)",
               "harmonic"),
        Metric("seconds", "s", "lower", "time to write the file and make it durable"),
        Metric("calls", "calls", "neither", "write() calls (or memcpy chunks for mmap) made"),
        Metric("syscalls_per_s", "calls/s", "higher", "write()/memcpy operations per second", "harmonic"),
        Metric("resident_fraction", "fraction", "neither",
               "share of the file's pages in the page cache at the end (O_DIRECT should leave ~0)"),
    )

    params: WriteModeParams

    # Rough per-call cost and streaming rate by mode, for the plan's time estimate only.
    _COST: ClassVar[dict[str, tuple[float, float]]] = {
        "buffered": (2e-6, 200 * MiB), "mmap": (1e-6, 200 * MiB),
        "o_direct": (2e-4, 100 * MiB), "o_sync": (1e-3, 50 * MiB),
    }

    @classmethod
    def needs(cls, workload: dict[str, Any]) -> Needs:
        """Its C helper writes a fresh file in a directory (mmap and O_DIRECT need a file)."""
        p = WriteModeParams(**workload)
        return Needs(storage=frozenset({"directory"}), capacity=p.size, apps=frozenset({HELPER}),
                     why={"storage": "it writes a fresh file of its own each trial",
                          "capacity": f"size = {format_size(p.size)}"})

    def estimate_seconds(self) -> float:
        per_call, rate = self._COST[self.params.mode]
        calls = -(-self.params.size // self.params.bs)
        return 0.2 + calls * per_call + self.params.size / rate

    def command(self, helper: str, path: str) -> list[str]:
        """The exact argv of one trial (also the manifest's job_text)."""
        p = self.params
        return [helper, "--mode", p.mode, "--bs", str(p.bs), "--size", str(p.size),
                "--path", path]

    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        if not placement.directory:
            raise TrialFailed("writemode needs a target that offers a directory to create files in")
        path = f"{placement.directory.rstrip('/')}/iolab-writemode-{uuid.uuid4().hex[:12]}.dat"
        argv = self.command(helper_for(placement), path)
        try:
            res = placement.executor.run(ExecRequest(argv=argv, timeout_s=timeout_s))
        finally:
            remove_own_file(placement, path)
        raw = _parse(res, timeout_s)
        return WorkloadResult(metrics=metrics_of(raw), raw=raw, job_text=shlex.join(argv),
                              flags=flags_of(raw), cpu_busy=res.cpu_busy)

    def describe(self) -> list[str]:
        p = self.params
        return [f"workload writemode: mode={p.mode}, bs={format_size(p.bs)}, "
                f"size={format_size(p.size)} (fresh file, durable at the end of each trial)"]


def helper_for(placement: Placement) -> str:
    return native_helper_for(HELPER, placement)



def _parse(res: ExecResult, timeout_s: float) -> dict[str, Any]:
    """The helper's JSON, or TrialFailed with its stderr tail."""
    text = helper_stdout(res, HELPER, timeout_s)
    try:
        raw = json.loads(text)
        if not isinstance(raw, dict) or "bytes_per_s" not in raw:
            raise ValueError("not a result object")
    except ValueError as e:
        raise TrialFailed(f"{HELPER} printed no valid JSON ({e}): {res.stdout[-400:]!r}") from e
    return raw


def resident_fraction(raw: dict[str, Any]) -> float:
    total = raw.get("total_pages") or 0
    return raw.get("resident_pages", 0) / total if total else 0.0


def metrics_of(raw: dict[str, Any]) -> dict[str, float]:
    seconds = float(raw["seconds"])
    calls = float(raw["calls"])
    return {
        "throughput_mib_s": float(raw["bytes_per_s"]) / MiB,
        "seconds": seconds,
        "calls": calls,
        "syscalls_per_s": calls / seconds if seconds > 0 else 0.0,
        "resident_fraction": resident_fraction(raw),
    }


def flags_of(raw: dict[str, Any]) -> list[str]:
    """Confounders: a mode whose flag was not set, or whose page-cache footprint is wrong."""
    mode = raw.get("mode", "?")
    eff = raw.get("flags_effective") or {}
    pct = 100.0 * resident_fraction(raw)
    flags: list[str] = []
    if mode == "o_direct" and not eff.get("o_direct"):
        flags.append("mode_not_effective: o_direct flag not set on the open file")
    if mode == "o_sync" and not eff.get("o_sync"):
        flags.append("mode_not_effective: o_sync flag not set on the open file")
    if mode == "o_direct" and pct > 100 * RESIDENT_LIMIT:
        flags.append(f"mode_not_effective: o_direct left {pct:.0f}% of pages cached")
    if mode in ("buffered", "mmap") and pct < 100 * (1 - RESIDENT_LIMIT):
        flags.append(f"mode_not_effective: {mode} left only {pct:.0f}% of pages cached "
                     "(evicted under memory pressure, or the filesystem bypasses the cache)")
    flags += [f"helper_warning: {e}" for e in raw.get("errors") or []]
    return flags
