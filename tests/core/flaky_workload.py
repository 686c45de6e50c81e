"""A workload for the runner's repetition accounting: it runs a real command through the
placement's executor and fails on the attempts it is told to (an exit status, turned into
TrialFailed exactly as the real workloads do), so failures land where a test wants them."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field
from tests.core.one_value_workload import OneValueWorkload

from iolab.core.errors import TrialFailed
from iolab.core.exec import ExecRequest
from iolab.targets.base import Placement
from iolab.workloads.base import WorkloadParams, WorkloadResult

KIND = "flaky"
REF = "tests.core.flaky_workload:FlakyWorkload"


class FlakyParams(WorkloadParams):
    kind: Literal["flaky"] = "flaky"
    fail_on: list[int] = Field(default_factory=list, description="attempt numbers (from 0) that fail")
    values: list[float] = Field(default_factory=lambda: [100.0], description="the value of the k-th success, cycled")


class FlakyWorkload(OneValueWorkload):
    kind: ClassVar[str] = KIND
    Params: ClassVar[type[WorkloadParams]] = FlakyParams
    params: FlakyParams

    def __init__(self, params: WorkloadParams):
        super().__init__(params)
        self.attempts = 0
        self.successes = 0

    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        attempt, self.attempts = self.attempts, self.attempts + 1
        if attempt in self.params.fail_on:
            res = placement.executor.run(ExecRequest(["sh", "-c", "echo broken >&2; exit 3"], timeout_s=timeout_s))
            raise TrialFailed(f"flaky: attempt {attempt} failed with status {res.returncode}: {res.tail()}")
        value = self.params.values[self.successes % len(self.params.values)]
        self.successes += 1
        res = placement.executor.run(ExecRequest(["echo", repr(value)], timeout_s=timeout_s))
        return WorkloadResult(metrics={"value": float(res.stdout.strip())}, job_text="echo")
