"""Sync writes with a known number of syncs (R3): Mobibench-style `append` and `overwrite`,
and a dd-style `sequential` variant.

append / overwrite: every write is `bs` bytes (64 KiB) followed by fdatasync(); fio does
the I/O (buffered, psync, fdatasync=1, end_fsync=1), so one trial makes `count` writes and
`count` data syncs: count-1 fdatasync() calls counted by fio (sync.lat_ns.N) plus the
final fsync().

sequential (R3's dd append): what `dd if=/dev/zero of=TARGET bs=64k count=N oflag=dsync` does. The file or
device is opened with O_DSYNC (fio sync=dsync) and written sequentially with plain
buffered pwrite(); no fdatasync()/fsync() call is made at all. Each O_DSYNC write returns
only once its data is durable: the kernel runs the same data sync as fdatasync() on that
range before returning (generic_write_sync), so **each write is its own sync** and the
trial's data syncs = `count` writes (fio's sync.lat_ns.N must stay 0). Layout as append:
a region / new file never written before.

sequential-overwrite (R3's dd overwrite, `conv=notrunc`): the same O_DSYNC writes, in order,
over the overwrite region (prepared as for overwrite): allocated, so no metadata to update.

Why not plain kind "fio": the two patterns need a layout that survives repetitions on a
shared target, and fio's options cannot express "a region nobody wrote before":

* append: a region (raw device) or a new file (guest ext4) never written before, so a
  fresh qcow2 image must allocate clusters (and L2 tables, refcounts) for it. Each trial
  takes the next unused slot; a counter in the executor's work dir (per target, per run)
  remembers the slots used.
* sequential: the append layout (its own slots from the same counter; a new file
  `iolab-sync-sequential-<slot>.dat` on ext4), written in order with O_DSYNC.
* overwrite: one fixed region / file written once before the trials (prepare_overwrite,
  called by the study's before_group hook, i.e. before any probe starts), then rewritten
  in random order by every trial: already allocated, so no metadata updates are needed.
  If the region was not prepared, the trial prepares it itself and is flagged
  `prefill_in_trial`, because its probe counts then include the prefill.

Layout on the raw device: [0, count*bs) is the overwrite region, append / sequential slots
follow it, handed out by a byte counter that starts past the largest overwrite region
prepared so far, so trials of different `count` or `bs` on one target never overlap.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from iolab.core.errors import TrialFailed
from iolab.core.exec import ExecRequest
from iolab.core.metrics import Metric, MetricSet
from iolab.core.units import format_size, parse_size
from iolab.fio import engine as fio_engine
from iolab.targets.base import ANY_STORAGE, Needs, Placement
from iolab.workloads.base import Workload, WorkloadParams, WorkloadResult

# Relative: the executor's private work dir (a host target's own dir, or the guest's
# /run/iolab/work), so two runs, or two targets of one run, never share the counter or markers.
STATE_DIR = "iolab-sync-writes"
OVERWRITE_FILE = "iolab-sync-overwrite.dat"


class SyncWritesParams(WorkloadParams):
    kind: Literal["sync-writes"] = "sync-writes"
    pattern: Literal["append", "overwrite", "sequential", "sequential-overwrite"] = "append"
    bs: int = Field(64 << 10, description="bytes per write, bytes or '64k'")
    count: int = Field(128, ge=2, le=100_000, description="writes (= data syncs) per trial")

    @field_validator("bs", mode="before")
    @classmethod
    def _size(cls, v: Any) -> int:
        return parse_size(v)

    @property
    def region(self) -> int:
        return self.bs * self.count

    @property
    def dsync(self) -> bool:
        """O_DSYNC writes (dd oflag=dsync): each write its own sync, no sync calls."""
        return self.pattern in ("sequential", "sequential-overwrite")

    @property
    def overwrites(self) -> bool:
        """Writes into the region prepared once before the trials (prepare_overwrite)."""
        return self.pattern in ("overwrite", "sequential-overwrite")


def _sh(placement: Placement, script: str, *args: str, timeout_s: float = 60) -> str:
    res = placement.executor.run(ExecRequest(["sh", "-c", script, "sh", *args], timeout_s=timeout_s))
    if res.returncode != 0:
        raise TrialFailed(f"sync-writes: {script.split(';')[0]} failed (rc {res.returncode}): {res.tail()}")
    return res.stdout


def _marker(p: SyncWritesParams) -> str:
    return f"{STATE_DIR}/overwrite-{p.bs}-{p.count}.ready"


def overwrite_filename(placement: Placement) -> str:
    if placement.is_block_device and placement.path:
        return placement.path
    if placement.directory:
        return f"{placement.directory.rstrip('/')}/{OVERWRITE_FILE}"
    raise TrialFailed("the target offers neither a block device nor a directory")


def prepare_overwrite(placement: Placement, p: SyncWritesParams, timeout_s: float = 600) -> bool:
    """Write the overwrite region once (sequential 1 MiB writes + fsync + sync). True if it wrote."""
    if _sh(placement, 'mkdir -p "$1"; [ -e "$2" ] && echo yes || echo no', STATE_DIR, _marker(p)).strip() == "yes":
        return False
    job = fio_engine.render_job(
        {"filename": overwrite_filename(placement), "size": p.region, "offset": 0, "bs": min(1 << 20, p.region),
         "rw": "write", "ioengine": "psync", "direct": False, "end_fsync": True, "fallocate": "none"},
        [("prefill", {})])
    fio_engine.run_fio(placement.executor, job, timeout_s)
    _sh(placement, 'sync; touch "$1"; e=$(cat "$2/overwrite.end" 2>/dev/null || echo 0); '
                   '[ "$e" -lt "$3" ] && echo "$3" > "$2/overwrite.end"; true', _marker(p), STATE_DIR, str(p.region))
    return True


def next_append_slot(placement: Placement, region: int) -> tuple[int, int]:
    """(slot, byte offset) never handed out before on this target: the slot names a new file,
    the offset a fresh region of `region` bytes on a raw device. Offsets come from a byte
    counter (not slot x region), so trials of different sizes never overlap, and they start
    past every overwrite region prepared so far (`overwrite.end`). Both counters live in the
    executor's work dir."""
    out = _sh(placement, 'mkdir -p "$1"; n=$(cat "$1/append.next" 2>/dev/null || echo 0); '
                         'echo $((n+1)) > "$1/append.next"; '
                         'o=$(cat "$1/append.offset" 2>/dev/null || echo 0); '
                         'e=$(cat "$1/overwrite.end" 2>/dev/null || echo 0); '
                         '[ "$o" -lt "$e" ] && o=$e; [ "$o" -lt "$2" ] && o=$2; '
                         'echo $((o+$2)) > "$1/append.offset"; echo "$n $o"', STATE_DIR, str(region))
    slot, offset = out.split()[-2:]
    return int(slot), int(offset)


class SyncWritesWorkload(Workload):
    kind: ClassVar[str] = "sync-writes"
    Params: ClassVar[type[WorkloadParams]] = SyncWritesParams
    main_metric = "write_iops"
    # fio writes `count` blocks per trial (fixed work, not time_based): rates average harmonically.
    metrics: ClassVar[tuple[Metric, ...]] = (
        *MetricSet(fio_engine.FIO_METRICS).with_aggregate(fio_engine.RATE_METRICS, "harmonic"),
        Metric("guest_writes", "writes", "neither", "write() calls the trial made (must equal count)"),
        Metric("guest_fdatasync_calls", "calls", "neither", "fdatasync() calls fio made"),
        Metric("guest_end_fsync", "calls", "neither", "the final fsync() (1 for append/overwrite, 0 for O_DSYNC)"),
        Metric("guest_dsync_writes", "writes", "neither", "writes made durable by O_DSYNC (sequential pattern)"),
        Metric("guest_syncs", "syncs", "neither", "data syncs the guest asked for: one per write"),
    )
    params: SyncWritesParams

    @classmethod
    def needs(cls, workload: dict[str, Any]) -> Needs:
        """fio's synced writes into a region of a file or a device, and its state directory."""
        p = SyncWritesParams(**workload)
        return Needs(storage=ANY_STORAGE, capacity=2 * p.region, apps=frozenset({"fio"}),
                     why={"capacity": f"bs x count = {format_size(p.region)} of writes, and as much laid out "
                                       "for the overwrite patterns"})

    def estimate_seconds(self) -> float:
        # measured under TCG with strace attached: 35-250 write+sync pairs/s, so 20/s is pessimistic;
        # the trial timeout (3x this + 60 s) stays generous
        return 5 + self.params.count * 0.05

    def _job(self, placement: Placement) -> tuple[str, dict[str, Any]]:
        p = self.params
        glob: dict[str, Any] = {"size": p.region, "bs": p.bs, "ioengine": "psync", "direct": False,
                                "fdatasync": 1, "end_fsync": True, "randrepeat": False, "fallocate": "none",
                                "iodepth": 1, "numjobs": 1, "group_reporting": True}
        if p.dsync:
            # dd oflag=dsync: O_DSYNC open, every write durable on return, no sync calls at all
            glob.update(fdatasync=None, end_fsync=False, sync="dsync")
        where: dict[str, Any] = {"pattern": p.pattern}
        if p.overwrites:  # Mobibench overwrite: random order; dd conv=notrunc: in order
            glob.update(filename=overwrite_filename(placement), offset=0,
                        rw="write" if p.dsync else "randwrite")
            where["filename"] = glob["filename"]
        else:  # append, sequential: a region / file never written before
            slot, offset = next_append_slot(placement, p.region)
            glob["rw"] = "write"
            if placement.is_block_device and placement.path:
                glob.update(filename=placement.path, offset=offset)
                where.update(filename=placement.path, offset=offset, slot=slot)
            elif placement.directory:
                glob["filename"] = f"{placement.directory.rstrip('/')}/iolab-sync-{p.pattern}-{slot}.dat"
                where.update(filename=glob["filename"], slot=slot)
            else:
                raise TrialFailed("the target offers neither a block device nor a directory")
        return fio_engine.render_job(glob, [("sync_writes", {})]), where

    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        p = self.params
        flags = []
        if p.overwrites and prepare_overwrite(placement, p, timeout_s):
            flags.append("prefill_in_trial: the overwrite region was written during this trial, so its "
                         "probe counts include the prefill")
        job, where = self._job(placement)
        data, res = fio_engine.run_fio(placement.executor, job, timeout_s)
        metrics = fio_engine.summed_metrics(data)
        jobs = data.get("jobs") or [{}]
        fdatasyncs = sum(int(((j.get("sync") or {}).get("lat_ns") or {}).get("N", 0)) for j in jobs)
        writes = int(sum(float((j.get("write") or {}).get("total_ios", 0)) for j in jobs))
        if writes != p.count:
            raise TrialFailed(f"sync-writes: fio made {writes} writes, expected {p.count}")
        if p.dsync:
            # O_DSYNC: no sync calls; each write is its own data sync (docs/studies/sync-amplification.md)
            metrics.update({"guest_writes": float(writes), "guest_fdatasync_calls": float(fdatasyncs),
                            "guest_end_fsync": 0.0, "guest_dsync_writes": float(writes),
                            "guest_syncs": float(writes + fdatasyncs)})
            if fdatasyncs:
                flags.append(f"sync_count_mismatch: {fdatasyncs} fdatasync calls in an O_DSYNC run")
        else:
            # fio counts its fdatasync() calls (sync.lat_ns.N; total_ios stays 0 in fio 3.33); the last
            # write is made durable by end_fsync's fsync(), so data syncs = N + 1 = one per write.
            metrics.update({"guest_writes": float(writes), "guest_fdatasync_calls": float(fdatasyncs),
                            "guest_end_fsync": 1.0, "guest_dsync_writes": 0.0, "guest_syncs": float(fdatasyncs + 1)})
            if fdatasyncs + 1 != writes:
                flags.append(f"sync_count_mismatch: {fdatasyncs} fdatasync + 1 fsync for {writes} writes")
        return WorkloadResult(metrics=metrics, raw={"fio": data, "layout": where}, job_text=job, flags=flags,
                              cpu_busy=res.cpu_busy, resolution=fio_engine.resolution(data))
