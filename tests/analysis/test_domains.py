"""Point 4, 5 and 6 of issue 24: intervals stay in the metric's declared range, a quantising
tool's resolution (fio's latency histogram) keeps them from zero width, and a stalled trial (a
rate of 0) is counted and shown in every estimate and ratio that uses it.

The issue's cases, each from a run that stopped at n = 3 on its main metric: p99 latency
[−873, 2 873] µs, CPU % [−4.4, 14.4], Jain's fairness [−0.51, 2.21], an error count [−61, 69];
`ratio_of("harmonic", [100, 100, 0], [50, 50, 50])` returned 2.0 with dropped = 0."""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from iolab.analysis import generic
from iolab.analysis.sequential import LookDesign, RunEstimator, interval_batch, sequential_ci
from iolab.core import metrics, registry
from iolab.core.metrics import COUNT, DOMAINS, NONNEG, REAL, UNIT, Metric
from iolab.fio import engine as fio_engine
from iolab.probes import registry as probe_registry
from iolab.report.format import fmt_cell

FIXTURE = Path(__file__).parent / "data" / "vm-profile-quick.json.gz"
QUICK = {"spec": {"study": {"name": "x", "repetitions": 3, "max_repetitions": 3}}}


def test_every_declared_metric_has_a_range() -> None:
    declared = [m for kind in registry.WORKLOADS for m in registry.workload_class(kind).metrics]
    declared += [m for p in probe_registry.probe_classes() for m in p.metrics] + list(metrics.RUNNER_METRICS)
    assert len(declared) > 150
    for m in declared:
        assert m.range in DOMAINS.values(), m.name
        assert m.as_dict()["domain"] == m.range.name and m.as_dict()["estimand"] in ("median", "mean"), m.name
    by_name = {m.name: m for m in declared}
    assert by_name["iops"].range is NONNEG and by_name["jain"].range is UNIT
    assert by_name["cached_delta_bytes"].range is REAL  # a change: the one that may be negative
    assert by_name["tenant_errors"].range is COUNT and by_name["tenant_errors"].estimand == "mean"
    with pytest.raises(ValueError, match="implies no range"):
        Metric("odd", "furlongs", "neither", "a unit nobody declared a range for")


@pytest.mark.parametrize(("name", "values", "domain"), [
    ("p99 latency, µs", [180.0, 200.0, 2600.0], NONNEG),
    ("CPU %", [0.3, 1.2, 13.9], NONNEG),
    ("Jain's fairness", [0.25, 0.95, 0.99], UNIT),
    ("error count", [0.0, 0.0, 25.0], COUNT),
    ("IOPS with a stall", [0.0, 5000.0, 5100.0], NONNEG),
])
def test_the_issues_intervals_stay_in_their_range(name: str, values: list[float], domain: metrics.Domain) -> None:
    for design in (LookDesign(3, 3), LookDesign(3, 10)):
        e = sequential_ci(values, design, domain)
        assert domain.lo <= e.lo <= e.mean <= e.hi <= domain.hi, (name, e)
        assert e.hi > e.lo, (name, e)
        assert e.domain == domain.name


def test_a_batch_of_skewed_samples_never_leaves_the_range() -> None:
    rng = np.random.default_rng(7)
    for domain in (NONNEG, UNIT, COUNT):
        for n in (2, 3, 5, 10):
            x = rng.lognormal(0, 1.5, (5000, n))
            if domain is UNIT:
                x = x / (1 + x)
            if domain is COUNT:
                x = rng.poisson(rng.lognormal(0, 2, (5000, 1)), (5000, n)).astype(float)
            c, lo, hi = interval_batch(x, LookDesign(2, 10), domain)
            assert (lo >= domain.lo).all() and (hi <= domain.hi).all(), domain
            assert (lo <= c).all() and (c <= hi).all()


def test_a_stalled_trial_is_counted_and_shown_in_ratios() -> None:
    est = RunEstimator(QUICK)
    r = est.ratio_of("harmonic", [100, 100, 0], [50, 50, 50])
    assert r.zeros == 1 and r.dropped == 0, r
    assert r.lo == 0.0 and r.mean == pytest.approx(2.0), r  # the stall reaches the interval
    assert "(1 of 3 at 0)" in fmt_cell(r.as_dict())
    e = est.estimate([100.0, 100.0, 0.0])
    assert e.zeros == 1 and e.lo == 0.0 and "(1 of 3 at 0)" in fmt_cell(e.as_dict())
    assert est.estimate([0.0, 0.0, 3.0], COUNT).zeros == 0  # a count of 0 is no stall


def _fio_json(p99_ns: int, runtime_ms: int = 5000) -> dict[str, Any]:
    side = {"total_ios": 50_000, "iops": 10_000.0, "bw_bytes": 40_960_000, "io_bytes": 204_800_000,
            "runtime": runtime_ms, "lat_ns": {"N": 50_000, "mean": 95_000.0},
            "clat_ns": {"percentile": {"50.000000": 90_112, "95.000000": 123_392, "99.000000": p99_ns,
                                       "99.900000": 300_000}}}
    return {"jobs": [{"read": side, "write": {"total_ios": 0}, "job_runtime": runtime_ms, "usr_cpu": 1.0,
                      "sys_cpu": 2.0}]}


def test_fio_percentiles_carry_their_bucket_width() -> None:
    """fio prints a percentile as the middle of its histogram bucket (stat.c plat_idx_to_val,
    FIO_IO_U_PLAT_BITS = 6): three equal p99s are one bucket, ±half of it, never zero width."""
    data = _fio_json(148_480)
    m, res = fio_engine.job_metrics(data["jobs"][0]), fio_engine.resolution(data)
    assert m["read_clat_p99_us"] == pytest.approx(148.48)
    # 148 480 ns: msb 17, buckets of 2^(17-6) = 2048 ns, so the error is within 1024 ns
    assert res["read_clat_p99_us"] == pytest.approx(1.024)
    assert 0.0039 < res["read_clat_p99_us"] / m["read_clat_p99_us"] < 0.0079
    assert fio_engine.bucket_half_width_ns(100) == 0.0  # below 128 ns fio keeps the exact value
    trials = [{"id": f"c-r{i}", "status": "ok", "error": None, "flags": [], "probes": {}, "repetition": i,
               "params": {"_workload": {"kind": "fio", "rw": "randread"}, "_target": {"kind": "host"}},
               "metrics": m, "manifest": {"resolution": res}} for i in range(3)]
    f = generic.analyze({**QUICK, "trials": trials})
    p99 = f["configs"][0]["metrics"]["read_clat_p99_us"]
    lo, hi = p99["ci95"]
    assert lo < 148.48 < hi and hi - lo == pytest.approx(2 * 1.024, rel=1e-6), p99
    assert p99["method"].endswith("±resolution")
    assert f["configs"][0]["metrics"]["runtime_s"]["ci95"][1] > 5.0  # fio's job_runtime: whole milliseconds


def test_a_deterministic_count_is_exact_and_a_count_that_never_happened_has_an_upper_bound() -> None:
    d = LookDesign(3, 10)
    same = sequential_ci([256.0, 256.0, 256.0], d, COUNT)
    assert (same.lo, same.mean, same.hi) == (256.0, 256.0, 256.0)
    never = sequential_ci([0.0, 0.0, 0.0, 0.0], d, COUNT)
    assert never.lo == 0.0 and 0.5 < never.hi < 2.0, never  # Poisson: ~ -ln(tail/2) / n
    burst = sequential_ci([0.0, 0.0, 0.0, 383.0], d, COUNT)
    assert burst.mean == pytest.approx(95.75) and burst.lo == 0.0 and burst.hi > 383 / 4, burst


def _estimates(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        if "ci95" in node and "mean" in node:
            yield path, node
        for k, v in node.items():
            yield from _estimates(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _estimates(v, f"{path}[{i}]")


def assert_estimates_in_range(findings: dict[str, Any], what: str) -> int:
    """Every estimate in `findings` carries a range and lies in it; none but an exact count has zero width."""
    seen = 0
    for path, e in _estimates(findings):
        lo, hi, mean = e["ci95"][0], e["ci95"][1], e["mean"]
        if mean is None:
            continue
        seen += 1
        domain = DOMAINS.get(str(e.get("domain")))
        assert domain is not None, f"{what}{path}: no declared range ({e})"
        lo = -math.inf if lo is None else lo
        hi = math.inf if hi is None else hi
        assert domain.lo <= lo <= mean <= hi <= domain.hi, f"{what}{path}: {e} leaves {domain.name}"
        if e.get("n", 0) >= 2 and domain is not COUNT:
            assert hi > lo, f"{what}{path}: a zero-width interval {e}"
    return seen


def test_no_interval_of_a_stored_quick_run_leaves_its_range() -> None:
    """A stored `iolab study vm-profile --quick` (TCG guests on a busy machine, CV up to 90 %): every
    metric of every configuration, and the study's own ratios."""
    from iolab.studies.vm_profile import analysis as vm_profile

    doc = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    n = assert_estimates_in_range(generic.analyze(doc), "generic")
    n += assert_estimates_in_range(vm_profile.analyze(doc), "vm-profile")
    assert n > 300, n
