"""The heart of the study, for real: four fio processes in groups weighted 100/200/400/800 on a
loop device. BFQ (low_latency=0) must split IOPS 1:2:4:8 within ±15%; scheduler `none` must
not. Kernel per-group counters must agree with fio's own totals.

Measured the way the cgroup-weights study measures it, not on one sample: each repetition is
one trial of the study's own `fio-groups` workload (gate, steady window, shuffled weights,
confounder flags) on the study's `cgroups` target; repetitions continue (3..6) until the 95 %
CI of every class ratio is decided against its band (tests/statcheck.py). When a band does
not hold and the workload flagged a confounder (the CPUs saturated, a window that never
settled, a slow start), the test passes with a warning naming it: that is what the study's
report would show next to the number.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from tests.statcheck import FIO_GROUPS_CONFOUNDERS, Band, check, repeat_until_decided

from iolab.cgroups.trial import TrialCgroup
from iolab.core.resources import Ledger
from iolab.studies.cgroup_weights.analysis import RATIO_TOL
from iolab.targets.base import Placement
from iolab.targets.cgroup_set import CgroupSetParams, CgroupSetTarget
from iolab.workloads.base import WorkloadResult
from iolab.workloads.fio_groups import FioGroupsParams, FioGroupsWorkload, run_groups

pytestmark = [pytest.mark.cgroup, pytest.mark.whole_machine]  # BFQ splits 1:2:4:8: a proportion

WEIGHTS = [100, 200, 400, 800]
CLASSES = [200, 400, 800]
RUNTIME_S = 8
MAX_REPS = 6


@pytest.fixture
def controller(request: pytest.FixtureRequest, loopdev: str, ledger: Ledger, no_leftovers: None,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[Placement]:
    """The study's `cgroups` target on the test loop device, with the controller asked for."""
    from iolab.core import diskguard

    monkeypatch.setattr(diskguard, "_DESTROY_ALLOWED", set())
    diskguard.allow_destroy([loopdev])  # a device iolab did not make: the user names it (--destroy-data)
    target = CgroupSetTarget(CgroupSetParams(controller=request.param, device=loopdev), ledger)
    try:
        yield target.setup()
    finally:
        target.teardown()


class Trials:
    """Runs one study trial per repetition and keeps what the checks need."""

    def __init__(self, placement: Placement, ledger: Ledger):
        self.placement = placement
        self.ledger = ledger
        self.wl = FioGroupsWorkload(FioGroupsParams(groups=4, weights=WEIGHTS, runtime=RUNTIME_S, warmup=1))
        self.results: list[WorkloadResult] = []

    def __call__(self, i: int) -> dict[str, float]:
        cgroup = TrialCgroup.create(self.ledger)  # as the runner does: the trial's processes live in it
        try:
            r = run_groups(self.wl.params, self.placement.within(cgroup), timeout_s=RUNTIME_S + 60).result
        finally:
            cgroup.close()
        self.results.append(r)
        fio = fio_ratios(r)
        kernel = {c: r.metrics[f"ratio_{c}"] for c in CLASSES}
        print(f"rep {i + 1}: kernel " + " ".join(f"w{c}={kernel[c]:.2f}" for c in CLASSES)
              + " | fio " + " ".join(f"w{c}={fio[c]:.2f}" for c in CLASSES)
              + f" | machine cpu {r.metrics['machine_cpu_busy']:.0%} | flags {[f.split(':')[0] for f in r.flags]}")
        return {**{f"kernel_{c}": kernel[c] for c in CLASSES}, **{f"fio_{c}": fio[c] for c in CLASSES},
                "spread": max(kernel.values()) / min(1.0, *kernel.values())}

    def confounders(self) -> list[str]:
        return [f for r in self.results for f in r.flags if f.startswith(FIO_GROUPS_CONFOUNDERS)]


def fio_ratios(r: WorkloadResult) -> dict[int, float]:
    """fio's own whole-run IOPS per weight class, relative to the weight-100 group."""
    iops = {w: r.raw["fio"][g]["jobs"][0]["read"]["iops"] for g, w in r.raw["assignment"].items()}
    return {c: iops[c] / iops[100] for c in CLASSES}


def _counters_agree(results: list[WorkloadResult]) -> None:
    """Counting, not timing: the kernel's per-group I/Os against fio's, in every repetition."""
    for r in results:
        assert abs(r.metrics["kernel_vs_fio"] - 1) < 0.03, r.metrics["kernel_vs_fio"]
        assert r.metrics["kernel_vs_fio_worst_group"] < 0.03, r.metrics["kernel_vs_fio_worst_group"]


@pytest.mark.parametrize("controller", ["bfq"], indirect=True)
def test_bfq_splits_by_weight(controller: Placement, ledger: Ledger) -> None:
    assert controller.manifest["device"]["scheduler"] == "bfq"
    bands = {}
    for c in CLASSES:
        band = Band.around(c / 100, RATIO_TOL, f"weights {c}:100 within the study's ±{RATIO_TOL:.0%}")
        bands[f"kernel_{c}"] = bands[f"fio_{c}"] = band
    trials = Trials(controller, ledger)
    values = repeat_until_decided(trials, bands, max_reps=MAX_REPS)
    _counters_agree(trials.results)
    for name, band in bands.items():
        check(f"bfq {name.replace('_', ' ratio w')}", values[name], band, trials.confounders())


@pytest.mark.parametrize("controller", ["none"], indirect=True)
def test_none_is_not_proportional(controller: Placement, ledger: Ledger) -> None:
    assert controller.manifest["device"]["scheduler"] == "none"
    assert controller.manifest["cgroups"]["backend"].endswith("none")
    not_enforced = Band(-math.inf, 2.0, "scheduler none ignores weights: no class gets 2x another")
    bands = {"kernel_800": not_enforced, "fio_800": not_enforced, "spread": not_enforced}
    trials = Trials(controller, ledger)
    values = repeat_until_decided(trials, bands, max_reps=MAX_REPS)
    _counters_agree(trials.results)
    # the weights are written anyway (only the scheduler ignores them)
    assert sorted(trials.results[0].raw["assignment"].values()) == WEIGHTS
    for name, band in bands.items():
        check(f"none {name}", values[name], band, trials.confounders())
