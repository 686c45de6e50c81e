"""The workload interface: what generates load, what it needs of a target, and how its output
becomes metrics.

`needs()` is the workload's whole contract with targets: it says what it needs (where it
runs, storage, space, memory, programs, capabilities) and targets/offer.py `refusal()`
decides against each target's offer, at spec validation. A workload never names a target
kind and never reads a target's parameters."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from iolab.core.exec import ExecRequest
from iolab.core.metrics import RUNNER_METRICS, Metric, MetricSet
from iolab.targets.base import Needs, Placement


class WorkloadParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: str
    # Costly probes (a syscall tracer on QEMU) slow what they watch: a workload that measures
    # speed beside one that counts can run without them. Left out of the configuration when
    # unset (spec/study.py), so configuration ids stay what they were.
    probes: tuple[str, ...] | None = Field(None, description="the extra probes of this workload's trials, instead "
                                                              "of study.probes ([] = none: speed without a tracer)")


@dataclass
class WorkloadResult:
    """metrics: flat name -> number (the study's main metric among them).
    raw: the generator's own output (fio JSON...), kept in the store for later analysis.
    job_text: the exact job/command that ran, for the manifest (rerunnable).
    flags: confounders detected (e.g. "generator_cpu_bound", "mode_not_effective: ...").
    manifest: the trial's own manifest entries: what the workload saw of this run that is
           evidence, not a metric (how many bytes of its data file existed before the trial,
           the shuffled weight assignment of its groups, their share over time), stored as
           `trials[].manifest.workload_facts` (docs/results.md) so a report can give the
           measured cause of a surprise. This is the only place for per-trial entries: a
           workload never writes into `placement.manifest`, which is the target's and is
           shared by every trial on it, failed ones included.
    resolution: the error bound the tool's clock puts on a metric, in the metric's unit (fio
           counts whole milliseconds: a rate over 9 ms is known to ±11 %), stored as
           `trials[].manifest.resolution`; the analysis widens intervals by it, so repetitions
           that agree to the last digit never make a zero-width interval.
    """

    metrics: dict[str, float]
    raw: Any = None
    job_text: str = ""
    flags: list[str] = field(default_factory=list)
    cpu_busy: float | None = None
    manifest: dict[str, Any] = field(default_factory=dict)
    resolution: dict[str, float] = field(default_factory=dict)


class Workload(ABC):
    kind: ClassVar[str]
    Params: ClassVar[type[WorkloadParams]]
    # The metric adaptive stopping watches unless the study names another: a class default,
    # or set in __init__ when the params decide it (primes, fio-groups).
    main_metric: str
    # Every metric run() can put in WorkloadResult.metrics, declared once (core/metrics.py).
    metrics: ClassVar[tuple[Metric, ...]] = ()

    def __init__(self, params: WorkloadParams):
        self.params = params

    @classmethod
    @abstractmethod
    def needs(cls, workload: dict[str, Any]) -> Needs:
        """What one configuration (its validated params as a dict) needs of its target."""

    @abstractmethod
    def estimate_seconds(self) -> float:
        """Expected duration of one trial, for the plan's time estimate and default timeout."""

    @abstractmethod
    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        """Run once on the prepared placement. Raise TrialFailed with the reason on failure."""

    @classmethod
    def metric_set(cls, workload: dict[str, Any]) -> MetricSet:
        """The declarations for one configuration (its validated params as a dict).

        The runner's own metrics are added unless the workload declares a name itself.
        A workload whose aggregation depends on its parameters (fixed time or fixed work)
        overrides this."""
        return MetricSet(cls.metrics).merged(RUNNER_METRICS)

    def touches(self) -> list[str]:
        """What the workload itself writes besides the target's storage, for --dry-run (a
        device a job file names, the tenant's database); default: nothing."""
        return []

    def describe(self) -> list[str]:
        return [f"workload {self.kind}: " + ", ".join(
            f"{k}={v}" for k, v in self.params.model_dump().items() if k != "kind")]


def remove_own_file(placement: Placement, path: str) -> None:
    """Delete a file the trial made itself (a name it chose, in the target's directory) through
    the executor, so it also works where the file lives (a guest)."""
    placement.executor.run(ExecRequest(argv=["rm", "-f", "--", path], timeout_s=60))
