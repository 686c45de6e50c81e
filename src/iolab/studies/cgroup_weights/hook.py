"""cgroup-weights' hook: the sanity gate before each controller's trials.

Two groups weighted 1:4 for a short run. A weight-enforcing controller far from 4 means it
is not active here: its sweep is skipped (the runner records each skipped configuration
with the gate's verdict) and the report says so. For `none` failing is expected."""

from __future__ import annotations

import math
from dataclasses import dataclass

from iolab.core.errors import IolabError
from iolab.studies.hooks import GroupContext, GroupDecision
from iolab.workloads.fio_groups import FioGroupsParams, FioGroupsWorkload

GATE_WEIGHTS = (100, 400)
GATE_TIMEOUT_S = 120


@dataclass(frozen=True)
class GateRun:
    """What the 1:4 gate measured for one controller. Stored as extra `sanity_gate/<controller>`
    (`as_json`: the keys docs/results.md names, in the order they always had) and read back by
    the analysis as `analysis.Gate`. `error`: why the gate could not run (ratio and active None)."""

    controller: str
    enforces_weights: bool
    ratio: float | None = None
    aggregate_iops: float | None = None
    active: bool | None = None
    error: str | None = None

    @property
    def verdict(self) -> str:
        if self.ratio is None:
            return f"gate could not run: {self.error}"
        r = f"observed {self.ratio:.2f} for weights 1:4"
        if self.enforces_weights:
            return (f"controller active ({r})" if self.active else
                    f"controller not active ({r}); the sweep was skipped")
        return (f"negative control confirmed: weights not enforced ({r})" if not self.active else
                f"UNEXPECTED: weights look enforced without a controller ({r})")

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"controller": self.controller, "enforces_weights": self.enforces_weights,
                                  "weights": list(GATE_WEIGHTS), "expected_ratio": GATE_WEIGHTS[1] / GATE_WEIGHTS[0],
                                  "ratio": self.ratio}
        if self.error is None:
            out.update(aggregate_iops=self.aggregate_iops, active=self.active)
        else:
            out.update(active=self.active, error=self.error)
        out["verdict"] = self.verdict
        return out


def before_group(ctx: GroupContext) -> GroupDecision | None:
    """Run the 1:4 gate, store its result as extra `sanity_gate/<controller>`, skip a sweep
    whose weight-enforcing controller did not enforce."""
    groups = ctx.placement.require_weighted_groups()
    configs = ctx.configs
    w = next((c.workload for c in configs if c.workload.get("tenant") == "off"), configs[0].workload)
    params = FioGroupsParams(groups=2, weights=list(GATE_WEIGHTS), rw=w.get("rw", "randread"), bs=w.get("bs", 4096),
                             iodepth=w.get("iodepth", 32), runtime=5, warmup=0.5, start_allowance=0)
    expected = GATE_WEIGHTS[1] / GATE_WEIGHTS[0]
    try:
        result = ctx.run_workload(FioGroupsWorkload(params), GATE_TIMEOUT_S)
        ratio = result.metrics["ratio_400"]
        gate = GateRun(groups.controller, groups.enforces_weights, ratio=ratio,
                       aggregate_iops=result.metrics["aggregate_iops"],
                       active=abs(math.log2(ratio / expected)) <= 1.0 if ratio > 0 else False)
    except (IolabError, OSError) as exc:
        gate = GateRun(groups.controller, groups.enforces_weights, error=str(exc))
    ctx.set_extra(f"sanity_gate/{groups.controller}", gate.as_json())
    ctx.message(f"sanity gate {groups.controller}: {gate.verdict}")
    return gate_decision(gate, [c.id for c in configs])


def gate_decision(gate: GateRun, config_ids: list[str]) -> GroupDecision | None:
    """Skip the sweep of a weight-enforcing controller the gate found inactive: numbers without an
    active controller mean nothing. A gate that could not run (active None) skips nothing, and the
    negative control (none) is expected to fail it."""
    if gate.enforces_weights and gate.active is False:
        return GroupDecision(skip=tuple(config_ids), reason=f"sanity gate {gate.controller}: {gate.verdict}")
    return None
