"""The general fio workload: one job rendered from validated parameters.

Hygiene from ../shared/anchors.md is the default: json+ output with latency kept,
randrepeat=0, time_based with ramp_time, prefill before reads, end_fsync for writes,
fallocate=none, direct I/O.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from iolab.cgroups.trial import mem_available
from iolab.core.errors import TrialFailed
from iolab.core.exec import ExecRequest
from iolab.core.metrics import Metric, MetricSet
from iolab.core.units import format_size, parse_duration, parse_size
from iolab.fio import engine as fio_engine
from iolab.fleet.metrics import FLEET_METRICS
from iolab.targets.base import ANY_STORAGE, FioFleet, Needs, Placement, TargetOffer
from iolab.workloads import fio_bounds
from iolab.workloads.base import Workload, WorkloadParams, WorkloadResult

READS = {"read", "randread"}
RW = Literal["read", "write", "randread", "randwrite", "rw", "randrw"]
DATA_FILE = "iolab-fio.dat"


class FioParams(WorkloadParams):
    kind: Literal["fio"] = "fio"
    rw: RW = "randread"
    bs: int = Field(4096, description="block size, bytes or '4k'")
    size: int = Field(256 << 20, description="file size or device region, bytes or '256M'")
    iodepth: int = Field(1, ge=1, le=4096)
    numjobs: int = Field(1, ge=1, le=256)
    ioengine: Literal["libaio", "io_uring", "psync", "sync", "pvsync2", "posixaio", "null"] = "libaio"
    direct: bool = True
    sync: bool = Field(False, description="open with O_SYNC")
    fsync: int = Field(0, ge=0, description="fsync after every N writes")
    fdatasync: int = Field(0, ge=0, description="fdatasync after every N writes")
    end_fsync: bool | None = Field(None, description="default: on for writes, so buffered writes pay for their flush")
    runtime: float | None = Field(10.0, description="seconds (time_based); 0 or \"none\" = run through size once")
    ramp_time: float = Field(2.0, ge=0)
    rwmixread: int = Field(50, ge=0, le=100)
    prefill: bool = Field(True, description="write the file before a read test (sparse files read as zeros)")
    drop_caches: bool = Field(False, description="drop the page cache before the run (host only)")
    fresh_file: bool = Field(False, description=(
        "remove iolab's data file before the trial, so writes append to a new file (as R2's program "
        "and iozone's write test do) instead of overwriting the file an earlier trial laid out"))

    @field_validator("bs", "size", mode="before")
    @classmethod
    def _size(cls, v: Any) -> int:
        return parse_size(v)

    @field_validator("runtime", mode="before")
    @classmethod
    def _runtime(cls, v: Any) -> Any:
        """0, "none" or None: no time limit (TOML has no null, so a spec says 0 or "none")."""
        if v is None or v == 0 or (isinstance(v, str) and v.strip().lower() in ("none", "0")):
            return None
        return parse_duration(v)

    @field_validator("ramp_time", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> Any:
        return parse_duration(v)

    @model_validator(mode="after")
    def _consistent(self) -> FioParams:
        if self.bs < 512 or self.bs > self.size:
            raise ValueError(f"bs must be between 512 bytes and size ({self.size}), got {self.bs}")
        if self.direct and self.bs % 512:
            raise ValueError(f"bs must be a multiple of 512 with direct I/O, got {self.bs}")
        return self


class FioWorkload(Workload):
    kind: ClassVar[str] = "fio"
    Params: ClassVar[type[WorkloadParams]] = FioParams
    main_metric = "iops"
    metrics: ClassVar[tuple[Metric, ...]] = fio_engine.FIO_METRICS + FLEET_METRICS
    params: FioParams

    @classmethod
    def metric_set(cls, workload: dict[str, Any]) -> MetricSet:
        """Time-based jobs: rates average arithmetically; runtime none (one pass over size): harmonic."""
        base = super().metric_set(workload)
        if "runtime" in workload and workload["runtime"] is None:
            return base.with_aggregate(fio_engine.RATE_METRICS, "harmonic")
        return base

    @classmethod
    def needs(cls, workload: dict[str, Any]) -> Needs:
        """fio on a file in the target's directory, its given file or its device; also on a fleet.
        On the host its I/O buffers must fit in the memory a trial may use (cgroups.trial.Bounds),
        and in a host directory the user named, iolab's data file must be iolab's (own_data_file)."""
        p = FioParams(**workload)
        return Needs(where=frozenset({"host", "guest", "fleet"}), storage=ANY_STORAGE,
                     capacity=p.size, apps=frozenset({"fio"}),
                     why={"capacity": f"size = {format_size(p.size)}: its data file or device region"},
                     check=lambda offer: own_data_file(p, offer))

    def estimate_seconds(self) -> float:
        p = self.params
        if p.runtime is not None:
            return p.runtime + p.ramp_time + 2
        return 5 + p.size / (100 << 20)

    def job_text(self, placement: Placement) -> str:
        p = self.params
        filename = target_filename(placement)
        is_write = p.rw not in READS
        glob: dict[str, Any] = {
            "filename": filename, "size": p.size, "bs": p.bs, "rw": p.rw, "iodepth": p.iodepth,
            "numjobs": p.numjobs, "ioengine": p.ioengine, "direct": p.direct, "sync": p.sync or None,
            "fsync": p.fsync or None, "fdatasync": p.fdatasync or None,
            "end_fsync": (is_write if p.end_fsync is None else p.end_fsync),
            "randrepeat": False, "fallocate": "none", "group_reporting": True,
            "rwmixread": p.rwmixread if p.rw in ("rw", "randrw") else None,
            "percentile_list": "50:95:99:99.9",
        }
        if p.runtime is not None:
            glob.update({"time_based": True, "runtime": f"{p.runtime:g}s", "ramp_time": f"{p.ramp_time:g}s"})
        return fio_engine.render_job(glob, [("iolab", {})])

    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        p = self.params
        if placement.fio_fleet is not None:
            return self._run_on_fleet(placement.fio_fleet, timeout_s)
        facts: dict[str, Any] = {}
        if p.fresh_file:
            if placement.is_block_device or not placement.directory or placement.path:
                raise TrialFailed("fresh_file needs a target that offers a directory (a file iolab creates), "
                                  "not a device")
            remove_data_file(placement)
        if not placement.is_block_device and p.rw not in READS:
            # evidence for reports: an O_SYNC write that extends a file also commits its size
            facts["data_file_bytes_before"] = data_file_bytes(placement)
        if p.rw in READS or p.rw in ("rw", "randrw"):
            if p.prefill and not placement.is_block_device:
                prefill(placement, p.size, timeout_s)
        if p.drop_caches:
            drop_caches(placement)
        job = self.job_text(placement)
        data, res = fio_engine.run_fio(placement.executor, job, timeout_s)
        metrics = fio_engine.summed_metrics(data)
        flags = cpu_flags(res.cpu_busy, p.numjobs) + fio_engine.short_run_flags(data)
        return WorkloadResult(metrics=metrics, raw=data, job_text=job, flags=flags, cpu_busy=res.cpu_busy,
                              manifest=facts, resolution=fio_engine.resolution(data))


    def _run_on_fleet(self, fleet: FioFleet, timeout_s: float) -> WorkloadResult:
        """The same job on every host of a fleet (targets/fleet.py), each on its own file or device."""
        p = self.params
        if p.fresh_file or p.drop_caches:
            raise TrialFailed("fresh_file and drop_caches act on this machine only: not on a fleet")
        wants_prefill = p.prefill and (p.rw in READS or p.rw in ("rw", "randrw"))
        run = fleet.run_fio(self.job_text, timeout_s, p.size if wants_prefill else None)
        return WorkloadResult(metrics=run.metrics, raw=run.raw, job_text=run.job_text, flags=run.flags,
                              manifest=run.facts)


def own_data_file(p: FioParams, offer: TargetOffer) -> str | None:
    """Why this fio workload cannot run on `offer`, or None: on the host its I/O buffers must fit
    in the memory a trial may use. (Its data file is always in a directory iolab made for the
    study, even in a host directory the user named: targets/hostdir.py.)"""
    if offer.where != "host":
        return None
    need, have = fio_bounds.buffer_bytes(p.bs, p.iodepth, p.numjobs), mem_available()
    if have and need > fio_bounds.MEMORY_SHARE * have:
        return (f"bs x iodepth x numjobs = {format_size(need)} of I/O buffers; this machine has "
                f"{format_size(have)} available, and a trial may use {fio_bounds.MEMORY_SHARE:.0%} of it")
    return None


def target_filename(placement: Placement) -> str:
    if placement.path:
        return placement.path
    if placement.directory:
        return f"{placement.directory.rstrip('/')}/{DATA_FILE}"
    raise TrialFailed("the target offers neither a file/device path nor a directory")


def data_file_bytes(placement: Placement) -> int:
    """Size of the workload's data file before the trial (0 if absent): append or overwrite?"""
    res = placement.executor.run(ExecRequest(argv=["stat", "-c", "%s", "--", target_filename(placement)],
                                             timeout_s=30))
    out = res.stdout.strip()
    return int(out) if res.returncode == 0 and out.isdigit() else 0


def remove_data_file(placement: Placement) -> None:
    """Remove iolab's own data file (never a path the user named: only DATA_FILE in the directory)."""
    path = f"{str(placement.directory).rstrip('/')}/{DATA_FILE}"
    res = placement.executor.run(ExecRequest(argv=["rm", "-f", "--", path], timeout_s=60))
    if res.returncode != 0:
        raise TrialFailed(f"could not remove {path} for a fresh file: {res.tail()}")


def prefill(placement: Placement, size: int, timeout_s: float) -> None:
    """Write the whole file once, untimed: reads of a sparse file never reach the disk."""
    job = fio_engine.render_job(
        {"filename": target_filename(placement), "size": size, "bs": 1 << 20, "rw": "write",
         "ioengine": "psync", "direct": False, "end_fsync": True, "fallocate": "none"},
        [("prefill", {})])
    fio_engine.run_fio(placement.executor, job, timeout_s)


def drop_caches(placement: Placement) -> None:
    """Drop the page cache for real and check that it happened (Cached must fall)."""
    # iolab's own fixed command, acting on the machine: the one request that runs unconfined
    res = placement.executor.run(ExecRequest(
        argv=["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], timeout_s=60, confined=False))
    if res.returncode != 0:
        raise TrialFailed(f"could not drop caches: {res.tail()}")


def cpu_flags(cpu_busy: float, processes: int) -> list[str]:
    """The load generator is CPU-bound when its processes use ~a full core each."""
    per_proc = cpu_busy / max(processes, 1)
    cores = os.cpu_count() or 1
    if per_proc >= 0.9 or cpu_busy >= 0.9 * cores:
        return [f"generator_cpu_bound: fio used {cpu_busy:.2f} cores for {processes} process(es)"]
    return []
