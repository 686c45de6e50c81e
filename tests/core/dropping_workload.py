"""A workload during which a stop signal lands where Python must drop its exception: inside a
`__del__` (as the fresh-clone CI saw inside a WeakSet's weakref callback). The handler's
KeyboardInterrupt is printed as "Exception ignored in ..." and lost, and the trial returns as if
nothing had happened: the runner must still stop."""

from __future__ import annotations

import os
import signal
from typing import ClassVar, Literal

from tests.core.one_value_workload import OneValueWorkload

from iolab.targets.base import Placement
from iolab.workloads.base import WorkloadParams, WorkloadResult

KIND = "dropping"
REF = "tests.core.dropping_workload:DroppingWorkload"


class _SignalsInItsFinalizer:
    """Sends SIGINT to this process from its finalizer and keeps running bytecode there, so the
    Python-level handler runs (and raises) inside the finalizer."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(200_000):  # the eval loop runs pending handlers on backward jumps
            pass


class DroppingParams(WorkloadParams):
    kind: Literal["dropping"] = "dropping"


class DroppingWorkload(OneValueWorkload):
    kind: ClassVar[str] = KIND
    Params: ClassVar[type[WorkloadParams]] = DroppingParams

    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        doomed = _SignalsInItsFinalizer()
        del doomed  # its __del__ runs here; the KeyboardInterrupt raised in it cannot leave it
        return WorkloadResult(metrics={"value": 1.0}, raw={}, job_text="(a finalizer that receives SIGINT)")
