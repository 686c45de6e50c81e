"""The probe interface: what is observed besides the workload, during the same trial."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from iolab.core.metrics import Metric
from iolab.targets.base import Placement


class Probe(ABC):
    """start() before the workload, stop() after; stop() returns a JSON-able dict."""

    name: ClassVar[str]
    # Cheap probes run in every trial they apply to; costly ones (tracing) only when a study asks.
    default: ClassVar[bool] = True
    # Every number stop() returns, declared once (core/metrics.py); a dict-valued key is declared
    # as the pattern "key.{...}" for its entries.
    metrics: ClassVar[tuple[Metric, ...]] = ()
    # Keys of stop()'s result that are not measurements (device names, notes, pids, booleans).
    attributes: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def applies_to(cls, placement: Placement) -> bool:
        return True

    @abstractmethod
    def start(self, placement: Placement) -> None: ...

    @abstractmethod
    def stop(self) -> dict[str, Any]: ...
