"""What a fio-groups trial asks for, and how weights are assigned to its groups."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from iolab.core.units import parse_duration, parse_size
from iolab.workloads.base import WorkloadParams

CLASSES = (100, 200, 400, 800)


class FioGroupsParams(WorkloadParams):
    kind: Literal["fio-groups"] = "fio-groups"
    groups: int = Field(4, ge=0, le=1024, description="N weighted groups, one fio process each (0: tenant alone)")
    weights: list[int] = Field(default_factory=lambda: list(CLASSES), description="pattern, cycled to N")
    shuffle: bool = Field(True, description="shuffle the weight assignment per trial (recorded)")
    rw: Literal["randread", "read", "rw", "randrw"] = "randread"
    bs: int = 4096
    iodepth: int = Field(32, ge=1, le=4096)
    ioengine: Literal["libaio", "io_uring"] = "libaio"
    direct: bool = True
    rwmixread: int = Field(50, ge=0, le=100)
    runtime: float = Field(10.0, gt=0, le=86400, description="seconds each fio runs")
    warmup: float = Field(1.0, ge=0, description="at least this much is cut after all groups run")
    sample_interval: float = Field(0.5, gt=0.05, le=10)
    start_allowance: float = Field(0.08, ge=0, le=5, description="seconds per group added to fio's runtime: "
                                   "N processes start slowly on few CPUs, the window stays ~runtime")
    tenant: Literal["off", "alone", "beside"] = Field("off", description="a real application in its own group")
    # db_bench by default: a spec written before the choice existed keeps meaning what it meant
    tenant_app: Literal["db_bench", "ycsb"] = Field("db_bench", description="the tenant: RocksDB db_bench, or "
                                                    "YCSB workload A on RocksDB (R4's)")
    tenant_weight: int = Field(400, ge=1, le=10000)

    @field_validator("bs", mode="before")
    @classmethod
    def _size(cls, v: Any) -> int:
        return parse_size(v)

    @field_validator("runtime", "warmup", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> Any:
        return parse_duration(v)

    @model_validator(mode="after")
    def _consistent(self) -> FioGroupsParams:
        if not self.weights or any(w < 1 or w > 10000 for w in self.weights):
            raise ValueError(f"weights must be 1..10000, got {self.weights}")
        if self.groups == 0 and self.tenant != "alone":
            raise ValueError("groups = 0 only makes sense with tenant = \"alone\"")
        if self.tenant == "alone" and self.groups:
            raise ValueError("tenant = \"alone\" runs without groups: set groups = 0")
        if self.bs < 512 or self.bs % 512:
            raise ValueError(f"bs must be a multiple of 512, got {self.bs}")
        if self.warmup >= self.runtime:
            raise ValueError(f"warmup ({self.warmup} s) must be shorter than runtime ({self.runtime} s)")
        return self


def assign_weights(pattern: Sequence[int], n: int, seed: int | None, shuffle: bool = True) -> list[int]:
    """The pattern cycled to n groups, shuffled with `seed` (so the assignment can be rerun)."""
    weights = [pattern[i % len(pattern)] for i in range(n)]
    if shuffle:
        random.Random(seed).shuffle(weights)
    return weights
