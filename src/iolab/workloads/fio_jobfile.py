"""An imported fio job file, run inside the job-file sandbox (fio/sandbox.py).

The file is read as fio reads it and every option checked against the allowlist when the
spec is validated (so `--dry-run` refuses what a run would). At run time it is checked
again with the real directories (symlinks resolved) and fio runs the canonical text the
sandbox renders, never the raw file: there is no gap between what was checked and what runs.
"""

from __future__ import annotations

import functools
import os
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from iolab.cgroups.trial import mem_available
from iolab.core.errors import TrialFailed
from iolab.core.metrics import Metric, MetricSet
from iolab.core.units import parse_size, positive_duration
from iolab.fio import engine as fio_engine
from iolab.fio import sandbox as fio_sandbox
from iolab.targets.base import Needs, Placement, TargetOffer
from iolab.workloads import fio_bounds
from iolab.workloads.base import Workload, WorkloadParams, WorkloadResult
from iolab.workloads.fio import cpu_flags


def check_job_text(text: str, source: str = "job file") -> fio_sandbox.JobFile:
    """The parsed job file; JobFileRefused (exit 2) naming the line of the first forbidden construct.

    Each distinct text is parsed and checked once (a 90 000-configuration axis over max_runtime
    validates one text once, not per configuration); the device guard is not cached: a file
    naming a device is checked each time, since --destroy-data and the device may change."""
    job = parsed(text, source)
    if _names_device(text, source):
        fio_sandbox.check_paths(job)
    return job


def parsed(text: str, source: str = "job file") -> fio_sandbox.JobFile:
    """The job file as fio reads it, checked against the allowlist and the bounds (fio_bounds),
    cached per text, source and environment (fio substitutes ${VAR} from it)."""
    return _parsed(text, source, tuple(sorted(os.environ.items())))


def _parsed(text: str, source: str, env: tuple[tuple[str, str], ...]) -> fio_sandbox.JobFile:
    outcome = _outcome(text, source, env)
    if isinstance(outcome, fio_sandbox.JobFileRefused):
        raise outcome
    return outcome


@functools.lru_cache(maxsize=32)
def _outcome(text: str, source: str, env: tuple[tuple[str, str], ...]) -> fio_sandbox.JobFile | \
        fio_sandbox.JobFileRefused:
    """The parsed file or its refusal, both cached: a refused text is not read again per configuration."""
    try:
        job = fio_sandbox.parse(text, source, dict(env))
        fio_bounds.check(job, mem_available())
    except fio_sandbox.JobFileRefused as exc:
        return exc
    return job


@functools.lru_cache(maxsize=32)
def _names_device(text: str, source: str) -> bool:
    """Does the file name an absolute path (checked against the guard now, never cached)?"""
    job = parsed(text, source)
    return bool(fio_sandbox.check_paths(job)) or any(
        n.startswith("/") for s in job.sections for o in s.options if o.name == "filename"
        for n in fio_sandbox.path_names(o))


def _time_based(text: str, source: str = "job file") -> bool:
    """Whether any job runs time_based, read as fio reads the file (fio's boolean: a bare key or a
    true value). An unreadable file counts as not time-based; validation refuses it anyway."""
    try:
        job = parsed(text, source)
    except fio_sandbox.JobFileRefused:
        return False
    for _section, opts in job.jobs():
        o = opts.get("time_based")
        if o is not None and (o.value is None or o.value.strip().lower() not in ("0", "false")):
            return True
    return False


class FioJobFileParams(WorkloadParams):
    kind: Literal["fio-jobfile"] = "fio-jobfile"
    job_file: str = Field(description="where the job came from (for messages and the manifest)")
    job_text: str = Field(description="the job file's text, checked by the job-file sandbox")
    max_runtime: float | None = Field(None, description="cap every job's runtime (and ramp/start delay) at this, "
                                                        "to try a long job file briefly")
    max_size: int | None = Field(None, description="cap every job's size/filesize/io_size at this")

    @field_validator("max_runtime", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> Any:
        return positive_duration(v, "max_runtime")

    @field_validator("max_size", mode="before")
    @classmethod
    def _size(cls, v: Any) -> Any:
        return None if v is None else parse_size(v)

    @model_validator(mode="after")
    def _safe(self) -> FioJobFileParams:
        try:
            check_job_text(self.job_text, self.job_file)
        except fio_sandbox.JobFileRefused as exc:
            raise ValueError(str(exc)) from None  # a spec error under this workload's key
        return self

    @property
    def caps(self) -> fio_sandbox.Caps:
        return fio_sandbox.Caps(self.max_runtime, self.max_size)


class FioJobFileWorkload(Workload):
    kind: ClassVar[str] = "fio-jobfile"
    Params: ClassVar[type[WorkloadParams]] = FioJobFileParams
    main_metric = "iops"
    metrics: ClassVar[tuple[Metric, ...]] = fio_engine.FIO_METRICS
    params: FioJobFileParams

    @classmethod
    def metric_set(cls, workload: dict[str, Any]) -> MetricSet:
        """A job file without time_based runs a fixed amount of work: its rates average harmonically."""
        base = super().metric_set(workload)
        if not _time_based(str(workload.get("job_text", "")), str(workload.get("job_file", "job file"))):
            return base.with_aggregate(fio_engine.RATE_METRICS, "harmonic")
        return base

    def estimate_seconds(self) -> float:
        return parsed(self.params.job_text, self.params.job_file).estimate_seconds(self.params.caps)

    @classmethod
    def needs(cls, workload: dict[str, Any]) -> Needs:
        """fio where it runs; the job's files land in the target's directory (on the host always
        one iolab makes for the study: nothing of the user's is in it), else in iolab's work dir.
        On the host the files must fit in the free space of the directory the target offers."""
        p = FioJobFileParams(**workload)

        def fits(offer: TargetOffer) -> str | None:
            if offer.where != "host" or "directory" not in offer.storage or offer.capacity is None:
                return None
            try:
                fio_bounds.check_space(parsed(p.job_text, p.job_file), offer.capacity, p.max_size)
            except fio_sandbox.JobFileRefused as exc:
                return str(exc)
            return None

        return Needs(apps=frozenset({"fio"}), check=fits)

    def touches(self) -> list[str]:
        """What the job writes besides its own files (for --dry-run): guarded block devices."""
        devices = fio_sandbox.check_paths(check_job_text(self.params.job_text, self.params.job_file))
        return [f"OVERWRITES the block device {d} (fio job file {self.params.job_file})" for d in devices]

    def runnable_text(self, placement: Placement) -> str:
        """The canonical job text for this placement, checked against the real directories.

        On the host every name is resolved (symlinks followed) and must stay inside the work dir
        or the target's directory; in a guest (iolab's own VM) the lexical check of validation holds.
        """
        p = self.params
        job = parsed(p.job_text, p.job_file)
        workdir = str(getattr(placement.executor, "workdir", "") or "")
        if not workdir:
            raise TrialFailed("the executor has no work directory: iolab cannot place the job's files")
        roots = [workdir] + ([placement.directory] if placement.directory else [])
        on_host = placement.executor.name == "host"
        fio_sandbox.check_paths(job, roots if on_host else None, workdir, placement.directory)
        return job.render(placement.directory, p.caps)

    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        text = self.runnable_text(placement)
        devices = fio_sandbox.check_paths(check_job_text(self.params.job_text, self.params.job_file))
        data, res = fio_engine.run_fio(placement.executor, text, timeout_s, devices=devices)
        return WorkloadResult(metrics=fio_engine.summed_metrics(data), raw=data, job_text=text,
                              flags=cpu_flags(res.cpu_busy, len(data["jobs"])) + fio_engine.short_run_flags(data),
                              cpu_busy=res.cpu_busy, resolution=fio_engine.resolution(data))

