"""What a statistician who read compare.py broke, each through the real compare_runs or the real
CLI: an off-centre interval called "no difference", counts without run-to-run noise, a metric
two runs declared differently, a run compared with itself against its neighbours, and a
hand-edited store that crashed instead of naming the bad key."""

from __future__ import annotations

import copy
import importlib.util
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from iolab.analysis.compare import MAX_CI, compare_runs
from tests.analysis.docs import document, one_metric

BENCH = Path(__file__).resolve().parents[2] / "bench"
_spec = importlib.util.spec_from_file_location("bench_sim_compare_adv", BENCH / "sim_compare.py")
assert _spec and _spec.loader
sim = importlib.util.module_from_spec(_spec)
sys.modules["bench_sim_compare_adv"] = sim
_spec.loader.exec_module(sim)

BASE = 1000.0 * (1 + np.arange(sim.CONFIGS))


def _inside(lo: float | None, hi: float | None) -> bool:
    return lo is not None and hi is not None and 1 / (1 + MAX_CI) <= lo and hi <= 1 + MAX_CI


def test_no_difference_needs_the_whole_interval_inside_the_band() -> None:
    """B 8 % slower everywhere, two runs: the old rule (half-width under 10 %) called all 32 rows
    "no difference" with intervals such as [0.836, 0.988]; a change that large must be undecided."""
    rng = np.random.default_rng(0)
    res = compare_runs(sim.run_doc("A", 1.0, BASE, rng), sim.run_doc("B", 2.0, BASE * 0.92, rng))
    for r in res["rows"]:
        if r["verdict"] == "no difference":
            assert _inside(*r["ratio_ci95"]), r
    iops = [r for r in res["rows"] if r["metric"] == "iops"]
    assert sum(r["verdict"] == "no difference" for r in iops) <= 1, [(r["ratio_ci95"], r["verdict"]) for r in iops]
    assert all(r["verdict"] in ("undecided", "regression") for r in iops if not _inside(*r["ratio_ci95"]))


def test_every_no_difference_over_many_stored_compares_lies_inside_the_band() -> None:
    """Five stored baselines, a true 5 % slowdown: whatever the verdicts, none says "no difference"
    with an interval that reaches past ±10 % or lies wholly below 1 beyond the band."""
    rng = np.random.default_rng(5)
    for _ in range(6):
        cell = sim.Cell("5% slower", 0.02, 5, 0.95, "all")
        res = sim.one_compare(cell, rng)
        for r in res["rows"]:
            if r["verdict"] == "no difference":
                assert _inside(*r["ratio_ci95"]), r


COUNT_DECL = {"main_metric": "written_bytes", "metrics": {"written_bytes": {
    "unit": "bytes", "direction": "lower", "aggregate": "mean", "domain": "count",
    "description": "bytes the device wrote"}}}


def _count_doc(run_id: str, created: float, rng: np.random.Generator, tau: float, mean: float,
               configs: int = 8, reps: int = 3) -> dict[str, Any]:
    trials = []
    for c in range(configs):
        level = mean * (c + 1) * math.exp(tau * rng.standard_normal())
        for r in range(reps):
            trials.append({"id": f"cfg{c}-r{r}", "params": {"cfg": c, "_workload": {"kind": "mytool"}},
                           "status": "ok", "metrics": {"written_bytes": float(rng.poisson(level))},
                           "manifest": {"declarations": COUNT_DECL}, "flags": []})
    return {"run_id": run_id, "created": created, "study": "s", "environment": {"hostname": "h"}, "trials": trials}


@pytest.mark.parametrize("mean", [1e6, 50.0])
def test_counts_carry_run_to_run_noise_between_two_runs(mean: float) -> None:
    """A count that moves between runs (bytes written, retransmits) by the floor's 3 %: A/A compares
    of two runs claimed a change in 96.5 % (1e6 per trial) when only the trials' Poisson noise was
    read. With the floor as the run level they stay near the family's 5 %. (A spread far beyond
    the floor, 30 %, two runs cannot know: that takes stored runs, the next test.)"""
    tau = 0.03
    rng = np.random.default_rng(9)
    n = 80
    claims = sum(any(r["verdict"] in ("improvement", "regression") for r in compare_runs(
        _count_doc("A", 1.0, rng, tau, mean), _count_doc("B", 2.0, rng, tau, mean))["rows"]) for _ in range(n))
    assert claims / n <= 0.10, claims  # the family's 5 % with sampling slack


def test_counts_read_the_run_level_spread_from_stored_runs() -> None:
    """Runs like A in the store: the count's run-to-run spread is read from them (not the floor),
    and A/A claims stay near 5 % even at a 30 % run-level SD (was 44-50 %)."""
    rng = np.random.default_rng(23)
    n, claims = 60, 0
    for _ in range(n):
        hist = [_count_doc(f"h{k}", 1.0 + k, rng, 0.3, 20.0) for k in range(10)]
        res = compare_runs(hist[-1], _count_doc("B", 100.0, rng, 0.3, 20.0), history=hist[:-1])
        claims += any(r["verdict"] in ("improvement", "regression") for r in res["rows"])
        assert "run-to-run noise estimated from the store" in res["noise"]["message"]
    assert claims / n <= 0.12, claims
    row = res["rows"][0]
    assert row["noise"]["source"] == "store" and row["noise"]["tau"] > 0.05 and row["noise"]["df"] == 9


def test_a_real_count_change_is_still_found() -> None:
    """The run-level test must not blind the count test: 0 -> 383 errors per trial, and bytes
    written doubling, are still regressions."""
    rng = np.random.default_rng(4)
    a = _count_doc("A", 1.0, rng, 0.03, 1e6)
    b = _count_doc("B", 2.0, rng, 0.03, 2e6)
    assert {r["verdict"] for r in compare_runs(a, b)["rows"]} == {"regression"}
    zero = _count_doc("A", 1.0, rng, 0.0, 0.0)
    errs = _count_doc("B", 2.0, rng, 0.0, 383.0)
    assert {r["verdict"] for r in compare_runs(zero, errs)["rows"]} == {"regression"}


def _declared(unit: str, direction: str) -> dict[str, Any]:
    return {"main_metric": "lat", "probes": {}, "probe_attributes": {},
            "metrics": {"lat": {"unit": unit, "direction": direction, "aggregate": "mean", "domain": "nonneg",
                                "description": "a latency"}}}


def _with_declaration(doc: dict[str, Any], unit: str, direction: str, scale: float) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for t in doc["trials"]:
        t["metrics"] = {"lat": t["metrics"]["iops"] * scale}
        t["params"]["_workload"] = {"kind": "mytool"}
        t["manifest"] = {"declarations": _declared(unit, direction)}
    return doc


@pytest.mark.parametrize("b_unit,b_direction,scale", [("µs", "lower", 1000.0), ("ms", "higher", 1.0)])
def test_a_metric_the_runs_declare_differently_is_not_compared(b_unit: str, b_direction: str, scale: float) -> None:
    """ms against µs gave a "regression" of +100 858 %; higher against lower gave a regression both
    ways round (A's declaration won silently). Now the row is invalid and says why."""
    rng = np.random.default_rng(3)
    cfg = {"x": ({"kind": "mytool"}, one_metric("iops", 5.0, 0.01))}
    a = _with_declaration(document("A", cfg, rng), "ms", "lower", 1.0)
    b = _with_declaration(document("B", cfg, rng), b_unit, b_direction, scale)
    for x, y in ((a, b), (b, a)):
        rows = compare_runs(x, y)["rows"]
        assert rows and all(r["verdict"] == "invalid" and "declare this metric differently" in r["reason"]
                            for r in rows), rows


def test_a_run_compared_with_itself_is_one_whatever_its_neighbours() -> None:
    """A run 30 % below its stored neighbours, compared with itself: B/A 0.72 [0.56, 0.93] before
    (B was judged against A's window); the same data is B/A = 1."""
    rng = np.random.default_rng(2)
    hist = [sim.run_doc(f"base{k}", 1000.0 + k, BASE * np.exp(0.003 * rng.standard_normal(sim.CONFIGS)), rng)
            for k in range(25)]
    a = sim.run_doc("A", 1010.0, BASE * 0.7, rng)
    res = compare_runs(a, a, history=hist)
    assert res["rows"] and all(r["ratio"] == pytest.approx(1.0) for r in res["rows"] if r["ratio"] is not None)
    assert not any(r["verdict"] in ("improvement", "regression") for r in res["rows"])


def test_a_stall_of_every_trial_has_no_upper_bound_printed_as_zero() -> None:
    rng = np.random.default_rng(7)
    cfg = {"x": ({"kind": "fio", "rw": "randread", "bs": 4096, "iodepth": 1, "runtime": 1.0},
                 one_metric("iops", 1000.0, 0.01))}
    a, b = document("A", cfg, rng), document("B", cfg, rng)
    for t in b["trials"]:
        t["metrics"]["iops"] = 0.0
    row = next(r for r in compare_runs(a, b)["rows"] if r["metric"] == "iops")
    assert row["ratio"] == 0.0 and row["ratio_ci95"] == [0.0, None] and row["stalled"]["b"] == len(b["trials"])


RATE_DECL = {"main_metric": "ops", "metrics": {"ops": {"unit": "ops/s", "direction": "higher", "aggregate": "mean",
                                                       "domain": "nonneg", "description": "operations per second"}}}


def _rate_doc(run_id: str, created: float, value: float, configs: int = 4, reps: int = 3) -> dict[str, Any]:
    """Every repetition of every configuration the same value: a deterministic (or coarsely
    quantised) metric with no resolution declared."""
    trials = [{"id": f"cfg{c}-r{r}", "params": {"cfg": c, "_workload": {"kind": "mytool"}}, "status": "ok",
               "metrics": {"ops": value * (c + 1)}, "manifest": {"declarations": RATE_DECL}, "flags": []}
              for c in range(configs) for r in range(reps)]
    return {"run_id": run_id, "created": created, "study": "s", "environment": {"hostname": "h"}, "trials": trials}


@pytest.mark.parametrize("factor", [1.001, 1.03, 0.95])
def test_identical_stored_runs_are_no_estimate_of_run_to_run_noise(factor: float) -> None:
    """Six stored runs whose every value is the same: the store's run-level spread was 0, so B 0.1 %
    off was [1.001, 1.001] with p = 0 (and 3 % a certain regression). Identical values estimate no
    spread: the floor is assumed, said so, and every interval has width and holds B/A."""
    hist = [_rate_doc(f"h{k}", 1.0 + k, 1000.0) for k in range(6)]
    res = compare_runs(hist[-1], _rate_doc("B", 100.0, 1000.0 * factor), history=hist[:-1])
    assert "values are all identical" in res["noise"]["message"], res["noise"]
    for r in res["rows"]:
        lo, hi = r["ratio_ci95"]
        assert r["noise"]["source"] == "floor" and r["noise"]["store_identical"] == 6, r["noise"]
        assert math.log(hi / lo) > 0.05 and lo <= factor <= hi, r
        assert r["p_no_change"] > 1e-3, r
