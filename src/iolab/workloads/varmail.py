"""Filebench's varmail personality (a mail server's small-file, fsync-heavy load) as a workload.

R3 measured varmail; Filebench is not packaged for Debian, so the native helper
iolab_varmail runs varmail.f's flow with its defaults and rules (docs/workloads-varmail.md
says where each one comes from). The parameters keep varmail.f's variable names. A trial
preallocates a fresh file set in a directory of its own, runs for `duration` seconds
(varmail.f: `run 60`) or a fixed number of `iterations`, and removes the set.

The file set's size is bounded before anything runs: at spec time against what the target
offers (a loop or guest ext4 of known size, a host directory's free space), and again by
the helper against the real free space and inodes where it runs (core/sizing.py).
"""

from __future__ import annotations

import json
import secrets
import shlex
import uuid
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from iolab.core import sizing
from iolab.core.errors import TrialFailed
from iolab.core.exec import ExecRequest, ExecResult
from iolab.core.metrics import Metric, MetricSet
from iolab.core.units import format_size, parse_size, positive_duration
from iolab.native import helper_for, helper_stdout
from iolab.targets.base import Needs, Placement
from iolab.workloads.base import Workload, WorkloadParams, WorkloadResult

HELPER = "iolab_varmail"
OPS = ("delete", "create", "append", "fsync", "open", "read", "close")
# varmail.f gives each thread memsize=10m, and Filebench refuses an I/O larger than that.
MAX_IO = 10 << 20
MAX_FILESIZE = 1 << 30
DEFAULT_DURATION = 60.0  # varmail.f ends with `run 60`
MB = 1e6
RATES = ("ops_per_s", "fsyncs_per_s", "mb_per_s")
# Rough cost of one iteration (two fsyncs dominate) and of preallocating, for the plan's estimate only.
ITERATION_S = 0.02
PREALLOC_RATE = 100 * MB
PREALLOC_FILE_S = 2e-4


class VarmailParams(WorkloadParams):
    """varmail.f's variables and defaults; `duration` or `iterations` ends a trial."""

    kind: Literal["varmail"] = "varmail"
    nfiles: int = Field(1000, ge=1, le=1_000_000, description="file set entries ($nfiles)")
    meanfilesize: int = Field(16 << 10, description="mean file size, bytes or '16k' ($filesize: cvar-gamma mean:16384)")
    filesize_gamma: float = Field(1.5, ge=0, le=100, description="gamma shape of the sizes ($filesize's gamma:1.5); "
                                                                 "0 = every file exactly meanfilesize")
    meandirwidth: int = Field(1_000_000, ge=1, le=1_000_000_000, description="files per directory ($meandirwidth)")
    nthreads: int = Field(16, ge=1, le=256, description="threads running the flow ($nthreads)")
    iosize: int = Field(1 << 20, description="readwholefile's read size, bytes or '1m' ($iosize; R3 used 64k)")
    meanappendsize: int = Field(16 << 10, description="appendfilerand's iosize ($meanappendsize): each append is "
                                                      "0 .. meanappendsize-2 bytes, uniform (mean about half)")
    prealloc: int = Field(80, ge=0, le=100, description="% of the entries that exist at the start (prealloc=80)")
    duration: float | None = Field(None, description="seconds, or '60s'; default 60 unless iterations is given")
    iterations: int | None = Field(None, ge=1, le=1_000_000_000, description="iterations of the flow, all threads "
                                                                            "together (fixed work instead of time)")
    seed: int | None = Field(None, ge=0, le=(1 << 63) - 1, description="file sizes and appends; default: a new "
                                                                       "seed per trial (recorded in its command)")

    @field_validator("meanfilesize", mode="before")
    @classmethod
    def _filesize(cls, v: Any) -> int:
        n = parse_size(v, allow_zero=True)
        if n > MAX_FILESIZE:
            raise ValueError(f"meanfilesize must be at most 1G, got {v!r}")
        return n

    @field_validator("iosize", "meanappendsize", mode="before")
    @classmethod
    def _io(cls, v: Any) -> int:
        n = parse_size(v)
        if n > MAX_IO:
            raise ValueError(f"must be at most 10m (varmail.f's per-thread memsize), got {v!r}")
        return n

    @field_validator("duration", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        return positive_duration(v, "duration")

    @model_validator(mode="before")
    @classmethod
    def _one_end(cls, values: Any) -> Any:
        """A trial ends after `duration` or after `iterations`: never both, the default is 60 s."""
        if not isinstance(values, dict):
            return values
        if values.get("duration") is not None and values.get("iterations") is not None:
            raise ValueError("give duration or iterations, not both")
        if values.get("iterations") is None and values.get("duration") is None:
            return {**values, "duration": DEFAULT_DURATION}
        return values

    @property
    def mean_append(self) -> float:
        """appendfilerand's mean size: uniform on 0 .. meanappendsize-2."""
        return max(self.meanappendsize - 2, 0) / 2

    def footprint(self) -> int:
        return sizing.fileset_bytes(self.nfiles, self.meanfilesize, self.mean_append)


class VarmailWorkload(Workload):
    """Runs iolab_varmail once per trial on a fresh file set in placement.directory."""

    kind: ClassVar[str] = "varmail"
    Params: ClassVar[type[WorkloadParams]] = VarmailParams
    main_metric = "ops_per_s"
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("ops_per_s", "ops/s", "higher", "varmail operations (all 7 kinds, 13 per iteration) per second: "
                                               "Filebench's ops/s"),
        Metric("fsyncs_per_s", "ops/s", "higher", "fsync() operations per second (2 per iteration)"),
        Metric("mb_per_s", "MB/s", "higher", "bytes appended + bytes read per second, MB = 10^6 bytes "
                                             "(Filebench's mb/s is 2^20 bytes)"),
        Metric("lat_{stat:mean|p95|p99}_us", "µs", "lower", "latency of one operation, all kinds together "
                                                            "(Filebench's ms/op is the mean)"),
        Metric("{op:delete|create|append|fsync|open|read|close}_lat_{stat:mean|p95|p99}_us", "µs", "lower",
               "latency of one operation of that kind (read: one whole readwholefile)"),
        Metric("{op:delete|create|append|fsync|open|read|close}_ops", "ops", "neither",
               "operations of that kind done in the trial"),
        Metric("iterations", "iterations", "neither", "passes of the 13-operation flow, all threads together"),
        Metric("seconds", "s", "neither", "time of the flow phase (preallocation excluded)"),
        Metric("appended_bytes", "bytes", "neither", "bytes appended by appendfilerand"),
        Metric("read_bytes", "bytes", "neither", "bytes read by readwholefile"),
        Metric("delete_skipped", "ops", "neither", "deletes that found their file open in another thread and "
                                                   "were skipped, as Filebench does"),
    )
    params: VarmailParams

    @classmethod
    def metric_set(cls, workload: dict[str, Any]) -> MetricSet:
        """A trial of fixed iterations is fixed work: its rates average harmonically."""
        base = super().metric_set(workload)
        return base.with_aggregate(RATES, "harmonic") if workload.get("iterations") else base

    @classmethod
    def needs(cls, workload: dict[str, Any]) -> Needs:
        """A directory whose filesystem has room for the whole file set (bytes and inodes), when
        the target knows its room before the run; the helper checks the real free space too."""
        p = VarmailParams(**workload)
        size = f"nfiles = {p.nfiles}, meanfilesize = {format_size(p.meanfilesize)}"
        return Needs(storage=frozenset({"directory"}), capacity=p.footprint(), inodes=p.nfiles + 2,
                     apps=frozenset({HELPER}),
                     why={"storage": "it makes a file set of its own",
                          "capacity": f"{size}: the file set may grow to that (docs/workloads-varmail.md#sizing); "
                                      "lower nfiles or meanfilesize, or give the target more room",
                          "inodes": f"{size}: one inode per file; lower nfiles"})

    def estimate_seconds(self) -> float:
        p = self.params
        preallocated = p.nfiles * p.prealloc / 100
        setup = 1.0 + preallocated * (p.meanfilesize / PREALLOC_RATE + PREALLOC_FILE_S)
        if p.iterations is not None:
            return setup + p.iterations * ITERATION_S / min(p.nthreads, 4)
        assert p.duration is not None  # the model validator sets one of the two
        return setup + p.duration

    def command(self, helper: str, directory: str, seed: int) -> list[str]:
        """The exact argv of one trial (also the manifest's job_text: rerunnable with its seed)."""
        p = self.params
        end = ["--iterations", str(p.iterations)] if p.iterations is not None else ["--duration", f"{p.duration:g}"]
        return [helper, "--dir", directory, "--nfiles", str(p.nfiles), "--meanfilesize", str(p.meanfilesize),
                "--filesize-gamma", f"{p.filesize_gamma:g}", "--meandirwidth", str(p.meandirwidth),
                "--nthreads", str(p.nthreads), "--iosize", str(p.iosize), "--meanappendsize", str(p.meanappendsize),
                "--prealloc", str(p.prealloc), *end, "--seed", str(seed), "--min-free", str(p.footprint())]

    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        if not placement.directory:
            raise TrialFailed("varmail needs a target that offers a directory (a filesystem) to make its files in")
        seed = self.params.seed if self.params.seed is not None else secrets.randbits(63)
        directory = f"{placement.directory.rstrip('/')}/iolab-varmail-{uuid.uuid4().hex[:12]}"
        argv = self.command(helper_for(HELPER, placement), directory, seed)
        try:
            res = placement.executor.run(ExecRequest(argv=argv, timeout_s=timeout_s))
        finally:
            placement.executor.run(ExecRequest(argv=["rm", "-rf", "--", directory], timeout_s=600))
        raw = parse(res, timeout_s)
        if self.params.iterations is not None and raw["iterations"] != self.params.iterations:
            raise TrialFailed(f"{HELPER} ran {raw['iterations']} iterations, asked for {self.params.iterations}")
        return WorkloadResult(metrics=metrics_of(raw), raw=raw, job_text=shlex.join(argv), flags=flags_of(raw),
                              cpu_busy=res.cpu_busy, manifest={"seed": seed, "prealloc": raw["prealloc"]})

    def describe(self) -> list[str]:
        p = self.params
        end = f"{p.iterations} iterations" if p.iterations is not None else f"{p.duration:g} s"
        return [f"workload varmail: Filebench's varmail flow (iolab_varmail), {p.nthreads} threads for {end}, "
                f"file set of {p.nfiles} entries ({p.prealloc}% preallocated, mean {format_size(p.meanfilesize)}, "
                f"gamma {p.filesize_gamma:g}), iosize {format_size(p.iosize)}, meanappendsize "
                f"{format_size(p.meanappendsize)}; needs up to {sizing.mib(p.footprint())} where it runs"]


def parse(res: ExecResult, timeout_s: float) -> dict[str, Any]:
    """The helper's JSON, checked for what the metrics need; TrialFailed with the reason otherwise."""
    text = helper_stdout(res, HELPER, timeout_s)
    try:
        raw = json.loads(text)
        for op in (*OPS, "all"):
            section = raw["all"] if op == "all" else raw["ops"][op]
            for key in ("count", "mean_us", "p95_us", "p99_us"):
                float(section[key])
        if float(raw["elapsed_s"]) <= 0 or int(raw["iterations"]) < 1:
            raise ValueError(f"no iteration finished in {raw['elapsed_s']} s")
    except (ValueError, KeyError, TypeError) as e:
        raise TrialFailed(f"{HELPER} printed no valid result ({e}): {res.stdout[-400:]!r}") from e
    return raw


def metrics_of(raw: dict[str, Any]) -> dict[str, float]:
    seconds = float(raw["elapsed_s"])
    ops = raw["ops"]
    out = {
        "ops_per_s": raw["all"]["count"] / seconds,
        "fsyncs_per_s": ops["fsync"]["count"] / seconds,
        "mb_per_s": (raw["bytes_appended"] + raw["bytes_read"]) / seconds / MB,
        "iterations": float(raw["iterations"]),
        "seconds": seconds,
        "appended_bytes": float(raw["bytes_appended"]),
        "read_bytes": float(raw["bytes_read"]),
        "delete_skipped": float(raw["delete_skipped"]),
    }
    for stat in ("mean", "p95", "p99"):
        out[f"lat_{stat}_us"] = float(raw["all"][f"{stat}_us"])
    for op in OPS:
        out[f"{op}_ops"] = float(ops[op]["count"])
        for stat in ("mean", "p95", "p99"):
            out[f"{op}_lat_{stat}_us"] = float(ops[op][f"{stat}_us"])
    return out


def flags_of(raw: dict[str, Any]) -> list[str]:
    """What the numbers may not mean: deletes skipped grow the file set beyond its start."""
    skipped = int(raw.get("delete_skipped") or 0)
    if not skipped:
        return []
    return [f"delete_skipped: {skipped} of {raw['iterations']} deletes found their file open in another thread "
            "and were skipped (as Filebench does); the file set grew by as many files"]
