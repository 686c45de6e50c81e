"""iozone's tests (R1) reproduced with fio, one test x record size per trial.

iozone semantics kept: `write` creates a new empty file; `rewrite` writes the existing
file again without truncating; `read` follows one untimed priming read; `reread` is the
second pass over a file just read; `randread`/`randwrite` touch every record exactly once
in a fixed shuffled order (fio's random map, fixed seed). Flushes are inside the timing
(end_fsync, like iozone -e); O_DIRECT like iozone -I. Results in KB/s, 1024-based.

On a target that offers a block device (a loop device without a filesystem, a `device`
target, a guest disk without guest_fs) the tests run on the device's first `file_size`
bytes. There is no file to create there, so `write` is a first full pass over blocks that
already exist: an overwrite, measured like `rewrite`, and flagged `iozone_write_on_device`.
It is not emulated with a discard (BLKDISCARD) before the pass: discard is not available
everywhere (many virtual disks, SATA without TRIM), costs what the device makes it cost, and
on thin layers (a loop device's image file, qcow2) turns the range into holes, so the read
trials that follow would read holes instead of the disk. Nothing is ever removed on a
device: only iolab's own file in a target directory is deleted before a `write`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from iolab.core.errors import TrialFailed
from iolab.core.exec import ExecRequest, Executor
from iolab.core.metrics import Metric, MetricSet
from iolab.core.units import format_size, parse_size
from iolab.fio import engine as fio_engine
from iolab.targets.base import ANY_STORAGE, Needs, Placement
from iolab.workloads.base import Workload, WorkloadParams, WorkloadResult
from iolab.workloads.fio import cpu_flags

Test = Literal["write", "rewrite", "read", "reread", "randread", "randwrite"]
FILE = "iolab-iozone.tmp"
RANDSEED = 20180101  # fixed: every repetition uses the same shuffled order, as iozone does


class IozoneParams(WorkloadParams):
    kind: Literal["iozone"] = "iozone"
    test: Test = "write"
    record: int = Field(4096, description="record size, bytes or '4k'")
    file_size: int = Field(100 << 20, description="file size, bytes or '100M'")
    direct: bool = True

    @field_validator("record", "file_size", mode="before")
    @classmethod
    def _size(cls, v: Any) -> int:
        return parse_size(v)

    @model_validator(mode="after")
    def _fits(self) -> IozoneParams:
        if self.record > self.file_size or self.file_size % self.record:
            raise ValueError(f"file_size ({self.file_size}) must be a multiple of record ({self.record})")
        if self.direct and self.record % 512:
            raise ValueError("record must be a multiple of 512 with direct I/O")
        return self


class IozoneWorkload(Workload):
    kind: ClassVar[str] = "iozone"
    Params: ClassVar[type[WorkloadParams]] = IozoneParams
    main_metric = "kbps"
    # Every trial moves the whole file once (fixed work): rates average harmonically.
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("kbps", "KiB/s", "higher", "iozone's figure: the timed pass's bandwidth in KiB/s (1024-based)",
               "harmonic"),
        *MetricSet(fio_engine.FIO_METRICS).with_aggregate(fio_engine.RATE_METRICS, "harmonic"),
    )
    params: IozoneParams

    @classmethod
    def needs(cls, workload: dict[str, Any]) -> Needs:
        """fio on its own file in a directory, or on the first file_size bytes of a device."""
        p = IozoneParams(**workload)
        return Needs(storage=ANY_STORAGE, capacity=p.file_size, apps=frozenset({"fio"}),
                     why={"capacity": f"file_size = {format_size(p.file_size)}"})

    def estimate_seconds(self) -> float:
        passes = 2 if self.params.test in ("read", "reread") else 1
        per_pass = self.params.file_size / (40 << 20 if self.params.record < (64 << 10) else 150 << 20)
        return 2 + passes * per_pass

    def _job(self, path: str, rw: str, *, timed: bool) -> str:
        p = self.params
        opts: dict[str, Any] = {
            "filename": path, "size": p.file_size, "bs": p.record, "rw": rw, "ioengine": "psync",
            "direct": p.direct, "end_fsync": rw in ("write", "randwrite"), "fallocate": "none",
            "randrepeat": True, "randseed": RANDSEED, "percentile_list": "50:95:99",
        }
        return fio_engine.render_job(opts, [("timed" if timed else "untimed", {})])

    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        p = self.params
        path = _path(placement)
        ex = placement.executor
        flags: list[str] = []
        if on_device(placement, path):
            size = device_bytes(ex, path)
            if size < p.file_size:
                raise TrialFailed(f"file_size {format_size(p.file_size)} is larger than the device {path} "
                                  f"({format_size(size)}); iozone's tests run on its first file_size bytes")
            if p.test == "write":
                flags.append(f"iozone_write_on_device: {path} is a block device: nothing to create, so `write` "
                             "overwrites existing blocks and measures what `rewrite` measures")
        elif p.test == "write":
            ex.run(ExecRequest(argv=["rm", "-f", "--", _own_file(placement, path)], timeout_s=30))
        elif not _exists(placement, path, p.file_size):
            fio_engine.run_fio(ex, self._job(path, "write", timed=False), timeout_s)
        if p.test in ("read", "reread"):
            fio_engine.run_fio(ex, self._job(path, "read", timed=False), timeout_s)  # priming pass
        rw = {"rewrite": "write", "reread": "read"}.get(p.test, p.test)
        job = self._job(path, rw, timed=True)
        data, res = fio_engine.run_fio(ex, job, timeout_s)
        m = fio_engine.summed_metrics(data)
        side = "read" if rw in ("read", "randread") else "write"
        m["kbps"] = m.get(f"{side}_bw_mib_s", 0.0) * 1024.0
        resolution = fio_engine.resolution(data)
        if f"{side}_bw_mib_s" in resolution:
            resolution["kbps"] = resolution[f"{side}_bw_mib_s"] * 1024.0
        return WorkloadResult(metrics=m, raw=data, job_text=job,
                              flags=flags + cpu_flags(res.cpu_busy, 1) + fio_engine.short_run_flags(data),
                              cpu_busy=res.cpu_busy, resolution=resolution)


def on_device(placement: Placement, path: str) -> bool:
    """The tests run on the target's block device itself (not on a file in its directory)."""
    return placement.is_block_device and path == placement.path


def device_bytes(executor: Executor, path: str) -> int:
    """The size of the block device at `path`, from sysfs where the executor runs (host or guest)."""
    script = 'd=$(readlink -f "$1") && [ -b "$d" ] && cat "/sys/class/block/${d##*/}/size"'
    res = executor.run(ExecRequest(argv=["sh", "-c", script, "sh", path], timeout_s=30))
    try:
        return int(res.stdout.split()[0]) * 512
    except (IndexError, ValueError):
        raise TrialFailed(f"{path} is not a block device where the trial runs ({res.tail() or 'no size'})") from None


def _own_file(placement: Placement, path: str) -> str:
    """The only path `write` may remove: iolab's own file in the target's directory."""
    if not placement.directory or path != f"{placement.directory.rstrip('/')}/{FILE}":
        raise TrialFailed(f"refusing to remove {path}: iozone's write only replaces its own {FILE}")
    return path


def _path(placement: Placement) -> str:
    if placement.directory:
        return f"{placement.directory.rstrip('/')}/{FILE}"
    if placement.path:
        return placement.path
    raise ValueError("the target offers neither a directory nor a device")


def _exists(placement: Placement, path: str, size: int) -> bool:
    if placement.is_block_device and path == placement.path:
        return True
    r = placement.executor.run(ExecRequest(argv=["stat", "-c", "%s", path], timeout_s=30))
    return r.returncode == 0 and r.stdout.strip() == str(size)
