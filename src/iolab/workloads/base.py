"""The workload interface: what generates load and how its output becomes metrics."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from iolab.targets.base import Placement


class WorkloadParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: str


@dataclass
class WorkloadResult:
    """metrics: flat name -> number (the study's main metric among them).
    raw: the generator's own output (fio JSON...), kept in the store for later analysis.
    job_text: the exact job/command that ran, for the manifest (rerunnable).
    flags: confounders detected (e.g. "generator_cpu_bound", "mode_not_effective: ...").
    """

    metrics: dict[str, float]
    raw: Any = None
    job_text: str = ""
    flags: list[str] = field(default_factory=list)
    cpu_busy: float | None = None


class Workload(ABC):
    kind: ClassVar[str]
    Params: ClassVar[type[WorkloadParams]]
    # The metric adaptive stopping watches unless the study names another.
    main_metric: ClassVar[str]

    def __init__(self, params: WorkloadParams):
        self.params = params

    @abstractmethod
    def estimate_seconds(self) -> float:
        """Expected duration of one trial, for the plan's time estimate and default timeout."""

    @abstractmethod
    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        """Run once on the prepared placement. Raise TrialFailed with the reason on failure."""

    def describe(self) -> list[str]:
        return [f"workload {self.kind}: " + ", ".join(
            f"{k}={v}" for k, v in self.params.model_dump().items() if k != "kind")]
