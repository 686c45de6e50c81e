"""A workload that leaves a process behind: it starts a sleeper through the placement's
executor and returns without waiting for it, as a careless workload (or one that crashed
halfway) would. The trial's cgroup must end it when the trial ends."""

from __future__ import annotations

from typing import ClassVar, Literal

from tests.core.one_value_workload import OneValueWorkload

from iolab.core import owner
from iolab.core.exec import ExecRequest
from iolab.targets.base import Placement
from iolab.workloads.base import WorkloadParams, WorkloadResult

KIND = "leaving"
REF = "tests.core.leaving_workload:LeavingWorkload"


class LeavingParams(WorkloadParams):
    kind: Literal["leaving"] = "leaving"


class LeavingWorkload(OneValueWorkload):
    kind: ClassVar[str] = KIND
    Params: ClassVar[type[WorkloadParams]] = LeavingParams
    ESTIMATE_S: ClassVar[float] = 0.5

    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        left = placement.executor.spawn(ExecRequest(["sleep", "600"], timeout_s=600))
        pid = left.proc.pid  # type: ignore[attr-defined]  # a host process (the test uses the host target)
        start = owner.start_time(pid)
        cgroup = placement.trial_cgroup
        assert cgroup is not None and pid in cgroup.pids(), "the sleeper is not in the trial cgroup"
        return WorkloadResult(metrics={"value": 1.0}, raw={"pid": pid, "start": start}, job_text="sleep 600 &")
