"""R5's second CPU test: sysbench's cpu test (prime search up to max_prime), events per second.

Debian's sysbench, run where the placement's executor runs it (host or guest). R5 used
max prime 10000 with 1 and 8 threads for 120 s; threads = 0 here means one thread per CPU
of the system the command runs on (`nproc` through the same executor, so inside a guest
it is the guest's vCPUs).
"""

from __future__ import annotations

import re
import shlex
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from iolab.core.errors import TrialFailed
from iolab.core.exec import ExecRequest, ExecResult
from iolab.core.metrics import Metric
from iolab.core.units import parse_duration
from iolab.targets.base import Needs, Placement
from iolab.workloads.base import Workload, WorkloadParams, WorkloadResult

MISSING = ("sysbench is not installed where this trial runs (Debian/Ubuntu: apt-get install "
           "sysbench; in a guest, the image must provide it)")

_EPS = re.compile(r"events per second:\s*([0-9.]+)")
_EVENTS = re.compile(r"total number of events:\s*([0-9]+)")
_TOTAL = re.compile(r"total time:\s*([0-9.]+)s")
_THREADS = re.compile(r"Number of threads:\s*([0-9]+)")
CONTENDED = 0.8  # below this share of the CPUs it could use, a CPU-bound generator was starved


def contention_flags(res: ExecResult, cpus_wanted: int) -> list[str]:
    """A CPU-bound generator that got clearly less CPU time than wall time x the CPUs it can
    use was waiting for a CPU: other load on the machine (or steal). Runs under 1 s are
    not judged (process start and the executor's polling dominate them)."""
    if res.wall_s < 1.0 or res.cpu_busy <= 0 or res.cpu_busy >= CONTENDED * cpus_wanted:
        return []
    return [f"cpu_contended: the generator got {res.cpu_busy:.2f} CPUs of the {cpus_wanted} it could use "
            "(other load on this machine?)"]


class SysbenchCpuParams(WorkloadParams):
    """threads: 0 = one per online CPU where it runs; time: seconds; max_prime: sysbench's bound."""

    kind: Literal["sysbench-cpu"] = "sysbench-cpu"
    threads: int = Field(1, ge=0, le=1024, description="0 = one per CPU (nproc where it runs)")
    time: int = Field(10, ge=1, le=86400, description="seconds (R5 used 120)")
    max_prime: int = Field(10000, ge=3, le=10**8, description="--cpu-max-prime (R5: 10000)")

    @field_validator("time", mode="before")
    @classmethod
    def _time(cls, v: Any) -> Any:
        if isinstance(v, str):
            secs = parse_duration(v)
            if secs != int(secs):
                raise ValueError(f"time must be whole seconds, got {v!r}")
            return int(secs)
        return v


class SysbenchCpuWorkload(Workload):
    kind: ClassVar[str] = "sysbench-cpu"
    Params: ClassVar[type[WorkloadParams]] = SysbenchCpuParams
    main_metric = "events_per_s"
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("events_per_s", "events/s", "higher", "sysbench cpu events (prime searches) per second, fixed time"),
        Metric("threads", "threads", "neither", "threads sysbench ran"),
        Metric("total_events", "events", "neither", "events completed in the fixed time"),
        Metric("cpus", "CPUs", "neither", "online CPUs where sysbench ran (nproc)"),
    )
    params: SysbenchCpuParams

    @classmethod
    def needs(cls, workload: dict[str, Any]) -> Needs:
        """CPU only: sysbench where it runs."""
        return Needs(apps=frozenset({"sysbench"}))

    def estimate_seconds(self) -> float:
        return self.params.time + 1.5

    def command(self, threads: int) -> list[str]:
        p = self.params
        return ["sysbench", "cpu", f"--cpu-max-prime={p.max_prime}", f"--threads={threads}",
                f"--time={p.time}", "run"]

    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        cpus = online_cpus(placement)
        threads = self.params.threads or cpus
        argv = self.command(threads)
        res = _exec(placement, argv, timeout_s)
        if res.timed_out:
            raise TrialFailed(f"sysbench timed out after {timeout_s:g}s")
        if res.returncode == 127:
            raise TrialFailed(MISSING)
        if res.returncode != 0:
            raise TrialFailed(f"sysbench failed (exit {res.returncode}): {res.tail()}")
        raw = parse(res.stdout)
        raw.update(threads=threads, cpus=cpus)
        if raw.get("threads_reported") not in (None, threads):
            raise TrialFailed(f"sysbench ran {raw['threads_reported']} threads, asked for {threads}")
        flags = []
        if threads > cpus:
            flags.append(f"threads_exceed_cpus: {threads} threads on {cpus} CPUs "
                         "(events per second cannot scale past the CPU count)")
        flags += contention_flags(res, min(threads, cpus))
        metrics = {"events_per_s": raw["events_per_s"], "threads": float(threads),
                   "total_events": float(raw["total_events"]), "cpus": float(cpus)}
        return WorkloadResult(metrics=metrics, raw=raw, job_text=shlex.join(argv), flags=flags,
                              cpu_busy=res.cpu_busy)

    def describe(self) -> list[str]:
        p = self.params
        t = "one per CPU (nproc where it runs)" if p.threads == 0 else str(p.threads)
        return [f"workload sysbench-cpu: sysbench cpu, max prime {p.max_prime}, threads {t}, {p.time} s"]


def _exec(placement: Placement, argv: list[str], timeout_s: float) -> ExecResult:
    try:
        return placement.executor.run(ExecRequest(argv=argv, timeout_s=timeout_s))
    except FileNotFoundError as e:  # the host executor cannot exec a missing program
        raise TrialFailed(MISSING if argv[0] == "sysbench" else f"{argv[0]} not found: {e}") from e


def online_cpus(placement: Placement) -> int:
    """CPUs available where the placement's executor runs commands (`nproc` there)."""
    res = _exec(placement, ["nproc"], 30)
    try:
        if res.returncode != 0:
            raise ValueError(f"exit {res.returncode}")
        n = int(res.stdout.strip())
        if n < 1:
            raise ValueError(f"{n} CPUs")
    except ValueError as e:
        raise TrialFailed(f"cannot count CPUs with nproc ({e}): {res.tail()}") from e
    return n


def parse(stdout: str) -> dict[str, Any]:
    """events_per_s, total_events, total_time_s (and threads_reported) from sysbench's text."""
    eps, events, total = _EPS.search(stdout), _EVENTS.search(stdout), _TOTAL.search(stdout)
    if not eps or not events:
        raise TrialFailed(f"sysbench printed no 'events per second' / 'total number of events': "
                          f"{stdout[-400:]!r}")
    out: dict[str, Any] = {"events_per_s": float(eps.group(1)), "total_events": int(events.group(1)),
                           "total_time_s": float(total.group(1)) if total else None, "stdout": stdout}
    th = _THREADS.search(stdout)
    if th:
        out["threads_reported"] = int(th.group(1))
    if out["events_per_s"] <= 0:
        raise TrialFailed(f"sysbench reported {out['events_per_s']} events per second")
    return out
