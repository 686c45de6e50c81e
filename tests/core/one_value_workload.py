"""The shape every test workload shares: one metric, `value`, that nothing else depends on, no
needs of its target, and a short estimate. A test workload (flaky, leaving, dropping) only says
its kind, its parameters and what its run does."""

from __future__ import annotations

from typing import Any, ClassVar

from iolab.core.metrics import NONNEG, Metric
from iolab.targets.base import Needs
from iolab.workloads.base import Workload


class OneValueWorkload(Workload):
    main_metric: ClassVar[str] = "value"
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("value", "units", "higher", "the value the test workload reports", domain=NONNEG),)
    ESTIMATE_S: ClassVar[float] = 0.1

    @classmethod
    def needs(cls, workload: dict[str, Any]) -> Needs:
        """Nothing but a command where it runs (the host or a guest)."""
        return Needs()

    def estimate_seconds(self) -> float:
        return self.ESTIMATE_S
