"""Study cgroup-weights (R4): real cgroups v1, real BFQ, real fio through the CLI, plus the pure
analysis on synthetic data. Nothing may be left behind: no iolab cgroup whose owner is gone,
no loop device of the lab, and a given device's scheduler as it was."""

from __future__ import annotations

import math
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from iolab.cgroups import detect
from iolab.cgroups.counters import IoCounters
from iolab.cgroups.sampler import Series
from iolab.studies import cgroup_weights as cw
from iolab.workloads import db_bench
from iolab.workloads.groups.params import assign_weights
from iolab.workloads.groups.steady import sharing_metrics, steady_window
from tests.statcheck import FIO_GROUPS_CONFOUNDERS, Band, check_estimate, from_json
from tests.studies.conftest import IOLAB, Lab, Reproduced

MiB = 1 << 20


def _real_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root for cgroups and loop devices"
    if detect.mounts().v1_blkio is None:
        return "no cgroup v1 blkio hierarchy mounted"
    return None


real = pytest.mark.skipif(_real_reason() is not None, reason=str(_real_reason()))


def orphan_groups(pids: Iterable[int]) -> list[str]:
    """Groups left by the iolab processes `pids` (this test's: their names carry the owner's
    pid, core.owner): what they should have removed. Other runs on the machine, live or
    killed, are not this test's to judge."""
    m = detect.mounts()
    tags = tuple(f"iolab-o{pid}." for pid in pids)
    return [str(p) for root in (m.v1_blkio, m.v2) if root for p in root.glob("iolab-*") if p.name.startswith(tags)]


def scheduler_of(dev: str) -> str:
    return (Path("/sys/block") / os.path.basename(dev) / "queue" / "scheduler").read_text().strip()


@pytest.fixture(scope="module")
def spare_loop() -> Iterator[str]:
    """A loop device over random data that the study may use as a 'real' device."""
    if _real_reason():
        pytest.skip(str(_real_reason()))
    img = Path("/var/tmp") / f"iolab-test-cgw-{os.getpid()}.img"
    subprocess.run(["dd", "if=/dev/urandom", f"of={img}", "bs=1M", "count=256", "status=none", "conv=fsync"],
                   check=True)
    dev = subprocess.run(["losetup", "--find", "--show", "--direct-io=on", str(img)], check=True,
                         capture_output=True, text=True).stdout.strip()
    try:
        yield dev
    finally:
        subprocess.run(["losetup", "-d", dev], check=False)
        img.unlink(missing_ok=True)


# -- the study for real --------------------------------------------------------------------------
@real
def test_quick_bfq_proportional_none_not(reproduced: Reproduced) -> None:
    lab = reproduced.lab
    _, doc = reproduced.study("cgroup-weights")
    f = doc["findings"]
    assert f["controller"] == "bfq" and f["cgroup_version"] == 1
    assert set(f) >= {"controller", "cgroup_version", "by_groups", "breakdown_n", "tenant"}
    n4 = f["by_groups"]["4"]
    assert set(n4) >= {"class_ratio", "max_abs_log2_error", "min_share", "jain", "aggregate_iops",
                       "generator_cpu_busy", "flags"}
    bfq = [t for t in doc["trials"] if t["status"] == "ok" and t["params"]["_target"]["controller"] == "bfq"]
    none_ = [t for t in doc["trials"] if t["status"] == "ok" and t["params"]["_target"]["controller"] == "none"]
    confounders = [fl for t in bfq + none_ for fl in t["flags"] if fl.startswith(FIO_GROUPS_CONFOUNDERS)]
    assert n4["class_ratio"]["100"]["mean"] == 1.0
    for c, ideal in (("200", 2), ("400", 4), ("800", 8)):
        est = n4["class_ratio"][c]
        # the study's estimate is the median of its trials' ratios, with its interval...
        assert est["n"] == len(bfq) >= 3
        assert est["mean"] == pytest.approx(statistics.median(t["metrics"][f"ratio_{c}"] for t in bfq), rel=1e-9)
        # ...and its 95 % CI lies within the study's own ±15 % of the weight, or a confounder says why not
        check_estimate(f"bfq class ratio {c}:100", from_json(est),
                       Band.around(ideal, cw.analysis.RATIO_TOL, "the study's tolerance"), confounders)
        # the sharing verdict is where the intervals lie against ±15 %, never where the means do
        assert n4["verdict"] == cw.analysis.class_verdict(n4["class_ratio"])
        assert n4["holds"] == (n4["verdict"] == "holds")
    assert 0 <= n4["generator_cpu_busy"]["mean"] <= 1
    assert n4["jain"]["mean"] > 0.95 and n4["jain_floor"] == pytest.approx(0.662, abs=0.001)
    assert f["breakdown_n"] is None
    none = f["by_controller"]["none"]["by_groups"]["4"]
    assert none["class_ratio"]["800"]["mean"] < 2.0, "scheduler none must not look proportional"
    assert not none["holds"] and f["none_proportional"] is False
    assert f["sanity_gate"]["v1-bfq"]["active"] is True and f["sanity_gate"]["v1-none"]["active"] is False
    # Work conservation: BFQ with strict_guarantees=1 keeps one request in flight, so it gives up
    # most of the device's capacity against `none` (docs/studies/cgroup-weights.md: ~0.13 here).
    # The study's ratio is bfq's median aggregate IOPS over none's, from the same trials...
    wc = f["work_conservation"]["4"]
    agg = {name: [t["metrics"]["aggregate_iops"] for t in ts] for name, ts in (("bfq", bfq), ("none", none_))}
    assert wc["ratio"]["mean"] == pytest.approx(
        statistics.median(agg["bfq"]) / statistics.median(agg["none"]), rel=1e-9), (wc, agg)
    # ...and its CI lies below 1 (a ratio inverted, or taken from the wrong trials, would not)
    check_estimate("work conservation bfq/none", from_json(wc["ratio"]),
                   Band(-math.inf, 1.0, "strict guarantees idle the device between requests"), confounders)
    for t in doc["trials"]:
        m = t["metrics"]
        assert abs(m["kernel_vs_fio"] - 1) < 0.03, "kernel counters must agree with fio's totals"
        # the trial's own entries are the trial's: never in the target's manifest, shared by later trials
        weights = t["manifest"]["workload_facts"]["trial"]["weights"]
        assert sorted(weights.values()) == [100, 200, 400, 800]
        assert t["manifest"]["workload_facts"]["share_series"]["t"]
        assert "trial" not in t["manifest"]["target"] and "share_series" not in t["manifest"]["target"]
    assert orphan_groups(lab.pids) == []
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert lab.env["IOLAB_SCRATCH"] not in loops


SPEC = """
[study]
name = "cgw-interrupt"
analysis = "cgroup-weights"
repetitions = 3
max_repetitions = 3

[target]
kind = "cgroups"
controller = "bfq"
device = "{dev}"

[workload]
kind = "fio-groups"
groups = 8
runtime = 20
"""


@real
def test_sigint_mid_run_leaves_nothing(lab: Lab, spare_loop: str, tmp_path: Path) -> None:
    before = scheduler_of(spare_loop)
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.format(dev=spare_loop))
    # A shell that started us in the background may have left SIGINT ignored; Ctrl-C must reach iolab.
    proc = subprocess.Popen(IOLAB + ["run", str(spec), "--destroy-data", spare_loop], env=lab.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    mine = f"iolab-o{proc.pid}."  # the parent group carries the owner's tag: pid and start time
    deadline = time.monotonic() + 60
    root = detect.mounts().v1_blkio
    while time.monotonic() < deadline:  # wait until the trial's groups exist and fio runs
        if root and any(len(list(p.glob("t*-g*"))) >= 8 for p in root.glob(mine + "*")):
            break
        time.sleep(0.2)
    else:
        proc.kill()
        raise AssertionError("the trial's groups never appeared: " + proc.communicate()[1][-2000:])
    assert "[bfq]" in scheduler_of(spare_loop)
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0, err
    assert list(root.glob(mine + "*")) == [], "cgroups left after Ctrl-C"
    assert scheduler_of(spare_loop) == before, "scheduler not restored after Ctrl-C"
    assert orphan_groups([proc.pid, *lab.pids]) == []
    ledgers = list((Path(lab.env["IOLAB_DATA"]) / "ledger").glob("*.json"))
    assert ledgers == [], [p.read_text() for p in ledgers]


@real
def test_128_groups_created_and_removed(spare_loop: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from iolab.core.resources import Ledger
    from iolab.targets.cgroup_set import CgroupSetParams, CgroupSetTarget

    monkeypatch.setenv("IOLAB_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("IOLAB_SCRATCH", str(tmp_path / "scratch"))
    from iolab.core import diskguard

    monkeypatch.setattr(diskguard, "_DESTROY_ALLOWED", set())
    diskguard.allow_destroy([spare_loop])  # a device iolab did not make: the user names it
    before = scheduler_of(spare_loop)
    target = CgroupSetTarget(CgroupSetParams(controller="bfq", device=spare_loop), Ledger())
    placement = target.setup()
    try:
        wg = placement.require_weighted_groups()  # what a workload gets: targets/base.py WeightedGroups
        weights = assign_weights([100, 200, 400, 800], 128, seed=7)
        t0 = time.monotonic()
        groups = wg.create_groups(weights, "t00001")
        created = time.monotonic() - t0
        assert target.session is not None
        assert [target.session.backend.read_weight(g) for g in groups] == weights
        t1 = time.monotonic()
        assert wg.remove_groups(groups) == []
        removed = time.monotonic() - t1
        print(f"\n128 groups: created in {created:.3f} s, removed in {removed:.3f} s (how fast: bench/run "
              "cgroup-groups)")
        assert not any(g.path.exists() for g in groups)
    finally:
        target.teardown()
    assert scheduler_of(spare_loop) == before
    assert orphan_groups([os.getpid()]) == []


# -- pure parts -------------------------------------------------------------------------------------
def test_assignment_is_shuffled_but_reproducible() -> None:
    a = assign_weights([100, 200, 400, 800], 16, seed=1)
    assert sorted(a) == sorted([100, 200, 400, 800] * 4)
    assert a == assign_weights([100, 200, 400, 800], 16, seed=1)
    assert a != [100, 200, 400, 800] * 4
    assert assign_weights([100, 200], 3, seed=None, shuffle=False) == [100, 200, 100]


def test_sharing_metrics_perfect_and_ignored() -> None:
    w = {"a": 100, "b": 200, "c": 400, "d": 800}
    perfect = sharing_metrics({"a": 100.0, "b": 200.0, "c": 400.0, "d": 800.0}, w, 1.0)
    assert perfect["ratio_800"] == pytest.approx(8) and perfect["max_abs_log2_error"] == pytest.approx(0)
    assert perfect["jain"] == pytest.approx(1) and perfect["min_share"] == pytest.approx(1)
    ignored = sharing_metrics({g: 100.0 for g in w}, w, 1.0)
    assert ignored["jain"] == pytest.approx(0.662, abs=0.001)  # the floor: never report Jain alone
    assert ignored["ratio_800"] == pytest.approx(1)
    # weight 100: 1/4 of the I/Os for 1/15 of the weight
    assert ignored["max_abs_log2_error"] == pytest.approx(math.log2(3.75))
    assert ignored["aggregate_iops"] == 400


def _series(rates: list[dict[str, float]], dt: float = 0.5) -> Series:
    s = Series()
    cum = {g: 0 for g in rates[0]}
    s.t.append(0.0)
    s.counters.append({g: IoCounters(rios=0) for g in cum})
    for k, r in enumerate(rates, 1):
        cum = {g: cum[g] + int(r[g] * dt) for g in cum}
        s.t.append(k * dt)
        s.counters.append({g: IoCounters(rios=v) for g, v in cum.items()})
    return s


def test_steady_window_cuts_startup_and_drift() -> None:
    w = {"a": 100, "b": 800}
    start = [{"a": 0, "b": 800}, {"a": 500, "b": 500}, {"a": 300, "b": 700}]  # b alone, then a warm-up
    steady = [{"a": 100, "b": 800}] * 16
    s = _series(start + steady + [{"a": 100, "b": 0}])
    i, j, drift, ok = steady_window(s, w, warmup_s=0.5)
    assert ok and drift <= 0.1
    assert s.t[i] >= 1.5, "the warm-up with the wrong split must be cut"
    d = s.delta(i, j)
    assert d["b"].ios / d["a"].ios == pytest.approx(8, rel=0.01)


def _doc(ratios_by_n: dict[int, float], ctrl: str = "bfq") -> dict:
    trials = []
    for n, r800 in ratios_by_n.items():
        for rep in range(3):
            err = abs(math.log2(r800 / 8)) + 0.01 * rep
            trials.append({"id": f"c{n}-r{rep}", "status": "ok", "error": None, "repetition": rep, "flags": [],
                           "params": {"_target": {"kind": "cgroups", "controller": ctrl},
                                      "_workload": {"kind": "fio-groups", "groups": n, "tenant": "off", "iodepth": 32}},
                           "metrics": {"ratio_100": 1.0, "ratio_200": 2.0, "ratio_400": 4.0, "ratio_800": r800,
                                       "max_abs_log2_error": err, "min_share": 0.9, "jain": 0.99,
                                       "aggregate_iops": 1000.0, "generator_cpu_busy": 0.1, "machine_cpu_busy": 0.5,
                                       "iodepth_total": 32.0 * n, "window_s": 8.0, "min_group_ios": 500.0},
                           "manifest": {"target": {"cgroups": {"backend": "v1-bfq", "cgroup_version": 1,
                                                               "enforces_weights": True},
                                                   "device": {"nr_requests": "256", "iosched": {"slice_idle": "8"}}}},
                           "probes": {}})
    return {"trials": trials, "extra": {}}


def test_analysis_finds_the_break_point() -> None:
    f = cw.analyze(_doc({4: 8.0, 8: 7.9, 16: 8.1, 32: 24.0, 64: 30.0}))
    assert f["breakdown_n"] == 32
    assert f["breakdown_bracket"] == [16, 32]
    assert f["breakdown_signals"]["iodepth_total"] == 1024 and f["breakdown_signals"]["nr_requests"] == "256"
    assert f["by_groups"]["4"]["holds"] and not f["by_groups"]["32"]["holds"]
    assert f["tenant"] is None
    summary, sections = cw.present({"trials": []}, f)
    assert any("breakdown at N=32" in s for s in summary)
    assert any(s.title.startswith("Break point") for s in sections)


def test_analysis_gate_failure_says_controller_not_active() -> None:
    doc = {"trials": [], "extra": {"sanity_gate/v1-bfq": {"controller": "v1-bfq", "enforces_weights": True,
                                                          "active": False, "ratio": 1.0, "verdict": "x"}}}
    doc["trials"] = [{"id": "a-r0", "status": "failed", "error": "skipped", "repetition": 0, "flags": [],
                      "params": {"_target": {"controller": "bfq"}, "_workload": {"groups": 4}},
                      "metrics": {}, "probes": {}, "manifest": {}}]
    f = cw.analyze(doc)
    assert f["controller_active"] is False
    summary, sections = cw.present(doc, f)
    assert any("not active" in s for s in summary)
    assert sections[0].title == "Controller not active"


def test_db_bench_output_parsed() -> None:
    text = ("readrandomwriterandom :     145.921 micros/op 6852 ops/sec 2.043 seconds 13999 operations;\n"
            "Microseconds per read:\nCount: 12600 Average: 157.8035  StdDev: 413.25\n"
            "Percentiles: P50: 119.10 P75: 181.19 P99: 832.50 P99.9: 3414.29\n"
            "Microseconds per write:\nCount: 1399 Average: 38.6719  StdDev: 163.00\n"
            "Percentiles: P50: 5.94 P75: 16.28 P99: 359.54 P99.9: 3801.50\n")
    m = db_bench.parse(text)
    assert m["tenant_ops_s"] == 6852 and m["tenant_read_p99_us"] == 832.5 and m["tenant_write_p99_us"] == 359.54
    assert m["tenant_reads"] == 12600
