"""An imported fio job file, run as-is after a safety check.

The file is parsed as fio parses it (INI sections, key=value); options that run commands,
load code, include other files or change system settings are refused with the line number.
Paths are left alone: the job runs in a scratch directory, so relative files land there.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import model_validator

from iolab.core.errors import RefusedError
from iolab.targets.base import Placement
from iolab.workloads import fio_engine
from iolab.workloads.base import Workload, WorkloadParams, WorkloadResult
from iolab.workloads.fio import cpu_flags


def check_job_text(text: str, source: str = "job file") -> None:
    """Raise RefusedError naming the line of the first forbidden construct."""
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("include ") or line.startswith("include\t"):
            raise RefusedError(f"{source}:{no}: 'include' is refused: iolab checks one file, not what it pulls in")
        if line.startswith("["):
            continue
        key, _, value = line.partition("=")
        key = key.strip().lower()
        if key in fio_engine.FORBIDDEN_OPTIONS:
            raise RefusedError(f"{source}:{no}: fio option {key} is refused: it {fio_engine.FORBIDDEN_OPTIONS[key]}")
        if key == "ioengine" and value.strip().split(":")[0].lower() in fio_engine.FORBIDDEN_ENGINES:
            raise RefusedError(f"{source}:{no}: ioengine={value.strip()} is refused: it runs programs or loads code")
        if key in ("output", "output-format"):
            raise RefusedError(f"{source}:{no}: {key} is set by iolab")


class FioJobFileParams(WorkloadParams):
    kind: Literal["fio-jobfile"] = "fio-jobfile"
    job_file: str
    job_text: str

    @model_validator(mode="after")
    def _safe(self) -> "FioJobFileParams":
        try:
            check_job_text(self.job_text, self.job_file)
        except RefusedError as exc:
            raise ValueError(str(exc)) from None
        return self


class FioJobFileWorkload(Workload):
    kind: ClassVar[str] = "fio-jobfile"
    Params: ClassVar[type[WorkloadParams]] = FioJobFileParams
    main_metric: ClassVar[str] = "iops"
    metrics: ClassVar[tuple[str, ...]] = ("iops", "bw_mib_s")
    params: FioJobFileParams

    def estimate_seconds(self) -> float:
        runtime = 0.0
        for line in self.params.job_text.splitlines():
            k, _, v = line.partition("=")
            if k.strip() in ("runtime", "ramp_time"):
                try:
                    from iolab.core.units import parse_duration

                    runtime += parse_duration(v.strip())
                except ValueError:
                    pass
        return runtime + 10 if runtime else 60

    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        text = self.params.job_text
        if placement.directory and "directory" not in text:
            text = f"[global]\ndirectory={placement.directory}\n" + text
        data, res = fio_engine.run_fio(placement.executor, text, timeout_s)
        return WorkloadResult(metrics=fio_engine.summed_metrics(data), raw=data, job_text=text,
                              flags=cpu_flags(res.cpu_busy, len(data["jobs"])), cpu_busy=res.cpu_busy)
