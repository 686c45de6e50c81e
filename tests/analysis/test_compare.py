"""Point 4 of issue 11: a compare that cannot lie. Simulated results documents (the shape of
`iolab report --format json`) through the real analysis.compare.compare_runs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from iolab.analysis import questions
from iolab.analysis.compare import compare_runs
from tests.analysis.docs import document, fio_values, one_metric

SIMULATIONS = 200


def _fio(bs: int, rw: str = "randread") -> dict[str, Any]:
    return {"kind": "fio", "rw": rw, "bs": bs, "iodepth": 1, "runtime": 1.0}


def _independent(n_configs: int, cv: float) -> dict[str, tuple[dict[str, Any], Any]]:
    """n_configs fio configurations, one directional metric each: independent rows (Holm's worst case)."""
    return {f"bs={4096 * (i + 1)}": (_fio(4096 * (i + 1)), one_metric("iops", 1000.0 * (i + 1), cv))
            for i in range(n_configs)}


def _correlated(n_configs: int, cv: float) -> dict[str, tuple[dict[str, Any], Any]]:
    """fio-like rows: IOPS, MiB/s, latency of one configuration move together."""
    return {f"bs={4096 * (i + 1)}": (_fio(4096 * (i + 1)), fio_values(1000.0 * (i + 1), cv, 4096 * (i + 1)))
            for i in range(n_configs)}


def _rate_of_other_verdicts(configs: dict, n: int, seed: int, threshold: float = 0.02) -> tuple[float, int, dict]:
    """How often an A-vs-A comparison claims a change (improvement or regression; 'undecided' is
    an honest answer for two runs compared without stored repeats: the floor widens them)."""
    rng = np.random.default_rng(seed)
    other, rows, seen = 0, 0, {}
    for _ in range(SIMULATIONS):
        res = compare_runs(document("A", configs, rng, n=n), document("A-rerun", configs, rng, n=n),
                           threshold=threshold)
        rows = len(res["rows"])
        verdicts = {r["verdict"] for r in res["rows"]}
        assert "invalid" not in verdicts
        other += bool(verdicts & {"improvement", "regression"})
        for v in verdicts - {"no difference"}:
            seen[v] = seen.get(v, 0) + 1
    return other / SIMULATIONS, rows, seen


@pytest.mark.parametrize("label,configs,n", [
    ("independent rows, CV 1 %, n = 3", _independent(45, 0.01), 3),
    ("independent rows, CV 3 %, n = 5 (noise as large as the threshold)", _independent(45, 0.03), 5),
    ("fio-like rows, CV 2 %, n = 5", _correlated(8, 0.02), 5),
])
def test_a_against_a_rerun_claims_no_change(label: str, configs: dict, n: int) -> None:
    rate, rows, seen = _rate_of_other_verdicts(configs, n, seed=len(label))
    assert rows >= 40, f"{label}: only {rows} rows"
    assert rate <= 0.05, f"{label}: {rate:.1%} of {SIMULATIONS} A-vs-A comparisons had another verdict: {seen}"


def test_noisier_reruns_may_be_too_noisy_but_never_claim_changes_beyond_5_percent() -> None:
    """With 3 to 4 repetitions and CV 5 % the intervals are wide: 'undecided' is the honest
    verdict, and Holm still keeps false improvements/regressions at 5 % of comparisons."""
    for configs, n in ((_independent(45, 0.05), 3), (_correlated(8, 0.05), 4)):
        rng = np.random.default_rng(n)
        claims = 0
        for _ in range(SIMULATIONS):
            res = compare_runs(document("A", configs, rng, n=n), document("A-rerun", configs, rng, n=n))
            claims += any(r["verdict"] in ("improvement", "regression") for r in res["rows"])
        assert claims / SIMULATIONS <= 0.05, claims


def test_without_holm_the_same_reruns_would_claim_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The A-vs-A test has teeth: with every row tested at 5 % alone (no Holm) and no run-level
    noise (floor 0: the repetitions as the only noise), the noisy case above claims changes that
    are not there in far more than 5 % of comparisons."""
    monkeypatch.setattr(questions, "holm", lambda ps: list(ps))  # Holm lives in analysis/questions.py
    monkeypatch.setattr(compare_runs, "__kwdefaults__", {**compare_runs.__kwdefaults__, "floor": 0.0})
    rate, _, seen = _rate_of_other_verdicts(_independent(45, 0.03), 5, seed=7)
    assert rate > 0.2, (rate, seen)


FAMILIES = [
    # (family, workload, metric, level, direction the declaration must give)
    ("IOPS", _fio(4096, "randwrite"), "iops", 20000.0, "higher"),
    ("MiB/s", _fio(8192, "randwrite"), "bw_mib_s", 150.0, "higher"),
    ("latency", _fio(16384, "randwrite"), "read_clat_p99_us", 800.0, "lower"),
    ("ops/s", {"kind": "fio-groups", "groups": 0, "tenant": "alone"}, "tenant_ops_s", 9000.0, "higher"),
    ("events/s", {"kind": "sysbench-cpu", "threads": 1, "time": 10}, "events_per_s", 1200.0, "higher"),
    ("Mbit/s", {"kind": "iperf3", "direction": "guest_to_host", "time": 10}, "mbit_s", 2400.0, "higher"),
    ("MB/s", {"kind": "stream", "ntimes": 4}, "triad_mb_s", 11000.0, "higher"),
    ("seconds", {"kind": "primes", "limits": [100000000]}, "primes_1e8_s", 1.3, "lower"),
]


def _family_docs(factor_of: dict[str, float], seed: int) -> tuple[dict, dict]:
    """A and B with every family's metric, plus 40 unchanged configurations; in B the metrics
    named in factor_of are multiplied by their factor."""
    rng = np.random.default_rng(seed)
    base = _independent(40, 0.01)
    a_cfg, b_cfg = dict(base), dict(base)
    for fam, workload, metric, level, _ in FAMILIES:
        a_cfg[fam] = (workload, one_metric(metric, level, 0.01))
        b_cfg[fam] = (workload, one_metric(metric, level * factor_of.get(metric, 1.0), 0.01))
    return document("A", a_cfg, rng, n=5), document("B", b_cfg, rng, n=5)


@pytest.mark.parametrize("family,workload,metric,level,direction", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_a_real_change_is_found_with_the_right_direction(family: str, workload: dict, metric: str, level: float,
                                                          direction: str) -> None:
    worse = 0.5 if direction == "higher" else 2.0  # e.g. rate_iops halved, latency doubled
    for factor, expected in ((worse, "regression"), (1 / worse, "improvement")):
        a, b = _family_docs({metric: factor}, seed=int(level))
        res = compare_runs(a, b)
        assert len(res["rows"]) >= 40
        row = next(r for r in res["rows"] if r["metric"] == metric and r["config"] == f"cell={family}")
        assert row["direction"] == direction
        assert row["verdict"] == expected, row
        assert row["ratio"] == pytest.approx(factor, rel=0.03)
        assert row["ratio_ci95"][0] < row["ratio"] < row["ratio_ci95"][1]
        others = [r for r in res["rows"] if r is not row]
        # unchanged rows claim nothing; between two runs (the 3 % floor) an interval of about ±8 % around
        # a small chance difference may reach past ±10 %, which is undecided, never a claim
        assert {r["verdict"] for r in others} <= {"no difference", "undecided"}, others
        assert sum(r["verdict"] == "no difference" for r in others) >= len(others) // 2


def test_faster_guest_is_an_improvement_for_every_rate_unit() -> None:
    """The inverted verdicts of the old name rule (`*_s` = lower is better): higher events/s,
    MB/s, Mbit/s, ops/s and calls/s are improvements, a shorter time is one too."""
    factors = {"events_per_s": 1.3, "triad_mb_s": 1.3, "mbit_s": 1.3, "tenant_ops_s": 1.3, "primes_1e8_s": 0.7}
    res = compare_runs(*_family_docs(factors, seed=11))
    families = {f"cell={f[0]}" for f in FAMILIES}
    verdicts = {r["metric"]: r["verdict"] for r in res["rows"] if r["metric"] in factors and r["config"] in families}
    assert verdicts == {m: "improvement" for m in factors}


def test_a_change_within_the_threshold_is_no_difference_and_the_threshold_is_settable() -> None:
    rng = np.random.default_rng(2)
    cfg_a = {"x": (_fio(4096), one_metric("iops", 10000.0, 0.002))}
    cfg_b = {"x": (_fio(4096), one_metric("iops", 10100.0, 0.002))}  # +1 %, clearly significant vs no change
    a, b = document("A", cfg_a, rng, n=6), document("B", cfg_b, rng, n=6)
    # floor 0: no run-level noise assumed, so the repetitions alone decide (the threshold's mechanics)
    row = compare_runs(a, b, floor=0.0)["rows"][0]
    assert row["p_no_change"] < 1e-3 and row["verdict"] == "no difference", row
    assert "threshold" in row["reason"]
    row = compare_runs(a, b, threshold=0.005, floor=0.0)["rows"][0]
    assert row["verdict"] == "improvement", row
    with pytest.raises(ValueError):
        compare_runs(a, b, threshold=0)


def test_too_few_values_zero_values_and_failures_are_visible() -> None:
    rng = np.random.default_rng(4)
    cfg = {"two": (_fio(4096), one_metric("iops", 1000.0, 0.01)),
           "stall": (_fio(8192), lambda g, r: {"iops": 0.0 if r == 1 else 1000.0}),
           "noisy": (_fio(16384), one_metric("iops", 1000.0, 0.4)),
           "flaky": (_fio(32768), one_metric("iops", 1000.0, 0.01))}
    a = document("A", cfg, rng, n=5)
    b = document("B", cfg, rng, n=5, failed={"flaky": 2})
    a["trials"] = [t for t in a["trials"] if not (t["params"]["cell"] == "two" and t["repetition"] >= 2)]
    rows = {r["config"]: r for r in compare_runs(a, b)["rows"]}
    assert rows["cell=two"]["verdict"] == "invalid" and "A has 2 successful value(s)" in rows["cell=two"]["reason"]
    stall = rows["cell=stall"]  # a stalled trial (rate 0) is evidence, not a reason to drop the row
    assert stall["verdict"] == "undecided" and (stall["stalled"]["a"], stall["stalled"]["b"]) == (1, 1), stall
    assert rows["cell=noisy"]["verdict"] == "undecided", rows["cell=noisy"]
    flaky = rows["cell=flaky"]
    assert flaky["failed_b"] == "2 failed of 7" and flaky["failed_a"] == "0 failed of 5"
    assert flaky["b"]["n"] == 5 and flaky["verdict"] == "no difference"
    assert rows["cell=two"]["p_holm"] is None and stall["p_holm"] is not None


def test_configurations_in_one_run_only_are_listed_and_differences_named() -> None:
    rng = np.random.default_rng(5)
    shared = {"shared": (_fio(4096), one_metric("iops", 1000.0, 0.01))}
    a = document("A", {**shared, "old": (_fio(8192), one_metric("iops", 1.0, 0.01))}, rng)
    b = document("B", {**shared, "new": (_fio(65536), one_metric("iops", 1.0, 0.01))}, rng, study="other",
                 environment={"kernel": "6.18.44", "fio_version": "fio-3.39", "qemu_version": "QEMU 9.2",
                              "cpu_model": "another cpu", "hostname": "elsewhere"}, scheduler="bfq")
    res = compare_runs(a, b)
    assert res["only_a"] == ["cell=old"] and res["only_b"] == ["cell=new"]
    assert [r["config"] for r in res["rows"]] == ["cell=shared"]
    text = "\n".join(res["warnings"])
    for what in ("study", "machine", "CPU", "kernel", "fio", "QEMU", "scheduler"):
        assert f"{what} differs" in text, (what, text)
    assert "6.1.0" in text and "6.18.44" in text and "none" in text and "bfq" in text
    same = compare_runs(a, a)
    assert same["warnings"] == [] and same["only_a"] == same["only_b"] == []


def test_metrics_without_a_direction_are_not_compared() -> None:
    rng = np.random.default_rng(6)
    cfg = {"x": (_fio(4096), fio_values(1000.0, 0.01))}
    res = compare_runs(document("A", cfg, rng), document("B", cfg, rng))
    compared = {r["metric"] for r in res["rows"]}
    assert {"iops", "bw_mib_s", "read_lat_mean_us", "read_clat_p99_us"} <= compared
    assert {"runtime_s", "read_ios"} <= set(res["skipped_metrics"]) and not compared & {"runtime_s", "read_ios"}
    only = compare_runs(document("A", cfg, rng), document("B", cfg, rng), metric_names=("iops",))
    assert {r["metric"] for r in only["rows"]} == {"iops"}


def test_holm_by_hand() -> None:
    from iolab.analysis.stats import holm

    # p sorted 0.01, 0.02, 0.04 over m = 3: 0.03, max(0.03, 0.04) = 0.04, max(0.04, 0.04) = 0.04
    assert holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert holm([0.5, math.nan, 0.01])[1] != holm([0.5, math.nan, 0.01])[1]  # NaN stays NaN
    assert holm([0.5, math.nan, 0.01])[2] == pytest.approx(0.02)  # m = 2: NaN rows do not count
    assert holm([0.9, 0.8]) == [1.0, 1.0]


def test_welch_log_by_hand() -> None:
    from scipy import stats

    from iolab.analysis.stats import welch_log

    a, b = [100.0, 110.0, 90.0], [200.0, 220.0, 180.0]
    t = welch_log(a, b)
    assert t.ratio == pytest.approx(2.0)  # the same spread on the log scale, doubled
    ref = stats.ttest_ind(np.log(b), np.log(a), equal_var=False)
    assert t.p == pytest.approx(ref.pvalue)
    assert t.lo < 2.0 < t.hi
    same = welch_log([5.0, 5.0, 5.0], [5.0, 5.0, 5.0])
    assert (same.ratio, same.p, same.p_beyond(0.02)) == (1.0, 1.0, 1.0)
    # the threshold test: a clear 1 % change is significant against 1 but not beyond ±2 %
    one = welch_log([100.0, 100.1, 99.9, 100.0], [101.0, 101.1, 100.9, 101.0])
    assert one.p < 1e-4 and one.p_beyond(0.02) > 0.5 and one.p_beyond(0.001) < 1e-3
