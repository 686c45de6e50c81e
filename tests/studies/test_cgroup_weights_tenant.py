"""cgroup-weights' tenant as R4 ran it: YCSB workload A on RocksDB in its own weighted group, alone
and beside four weighted fio groups (real YCSB 0.17.0, real RocksDB, real cgroups v1 blkio with
BFQ on an ext4 scratch loop device, through the CLI); the full study's spec names it; and the
analysis and report on constructed trial documents (R4's reference beside the measured values)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from iolab.analysis.stats import mean_ci, ratio_ci
from iolab.studies import cgroup_weights as cw
from iolab.studies.cgroup_weights import analysis
from tests.studies.conftest import Lab
from tests.studies.test_cgroup_weights import orphan_groups, real

SPEC = """
[study]
name = "cgw-ycsb-tenant"
analysis = "cgroup-weights"
repetitions = 2
max_repetitions = 2

[target]
kind = "cgroups"
controller = "bfq"
size = "512M"
filesystem = "ext4"
data_size = "128M"

[[workloads]]
name = "tenant-alone"
kind = "fio-groups"
groups = 0
tenant = "alone"
tenant_app = "ycsb"
runtime = {runtime}

[[workloads]]
name = "tenant-beside"
kind = "fio-groups"
groups = 4
tenant = "beside"
tenant_app = "ycsb"
runtime = {runtime}
warmup = 1
"""
RUNTIME = 6


def _printed(stdout: str) -> dict[tuple[str, str], float]:
    """The test's own reading of YCSB's export lines: (section, key) -> value."""
    return {(s, k): float(v) for s, k, v in re.findall(r"^\[([A-Z_-]+)\], (\S+), (\S+)$", stdout, re.M)}


needs_ycsb = pytest.mark.skipif(shutil.which("java") is None or shutil.which("fio") is None,
                                reason="java (the ycsb jars, ./setup.sh install) and fio are needed")


@real
@needs_ycsb
@pytest.mark.whole_machine  # the tenant alone against beside four groups: a ratio
def test_ycsb_tenant_alone_and_beside_four_groups(lab: Lab, tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.format(runtime=RUNTIME))
    t0 = time.monotonic()
    result = lab.run("run", str(spec), timeout=900)
    print(f"\nycsb tenant run: {time.monotonic() - t0:.0f} s")
    doc = lab.report_json()
    trials = doc["trials"]
    assert [t["status"] for t in trials] == ["ok"] * 4, [t["error"] for t in trials]
    raws = dict(_raw_rows(lab))
    decl = doc["findings"]["metric_declarations"]
    assert decl["undeclared"] == [], decl["undeclared"]
    units = decl["workloads"]["fio-groups"]
    for name, unit, better in (("tenant_ops_s", "ops/s", "higher"), ("tenant_read_mean_us", "µs", "lower"),
                               ("tenant_read_p95_us", "µs", "lower"), ("tenant_read_p99_us", "µs", "lower"),
                               ("tenant_update_p99_us", "µs", "lower"), ("tenant_iops_kernel", "IOPS", "higher")):
        assert (units[name]["unit"], units[name]["direction"]) == (unit, better), (name, units[name])

    for t in trials:
        mode = t["params"]["_workload"]["tenant"]
        m = t["metrics"]
        # YCSB's own counts: every operation is a read or an update (workload A), none failed, and
        # the throughput it printed times its runtime is the operations it counted
        assert m["tenant_read_ops"] + m["tenant_update_ops"] == m["tenant_operations"] > 0, (mode, m)
        assert m["tenant_errors"] == 0 and m["tenant_read_errors"] == m["tenant_update_errors"] == 0, mode
        assert 0.45 < m["tenant_read_ops"] / m["tenant_operations"] < 0.55, (mode, m)  # readproportion 0.5
        assert m["tenant_ops_s"] * m["tenant_runtime_s"] == pytest.approx(m["tenant_operations"], abs=2), mode
        # time-bound: YCSB's run lasted the trial's runtime (maxexecutiontime), plus opening and closing
        assert RUNTIME <= m["tenant_runtime_s"] <= RUNTIME + 3, (mode, m["tenant_runtime_s"])
        for op in ("read", "update"):
            assert 0 < m[f"tenant_{op}_p50_us"] <= m[f"tenant_{op}_p95_us"] <= m[f"tenant_{op}_p99_us"] \
                <= m[f"tenant_{op}_max_us"], (mode, op)
            assert m[f"tenant_{op}_mean_us"] > 0
        # the metrics are the numbers YCSB printed (the stored output, read with the test's own pattern)
        raw = json.loads(raws[t["id"]])
        printed = _printed(raw["stdout"] if mode == "alone" else raw["extra"]["tenant"]["stdout"])
        assert m["tenant_ops_s"] == printed[("OVERALL", "Throughput(ops/sec)")], mode
        assert m["tenant_read_p99_us"] == printed[("READ", "99thPercentileLatency(us)")], mode
        assert m["tenant_read_p95_us"] == printed[("READ", "95thPercentileLatency(us)")], mode
        assert m["tenant_read_mean_us"] == printed[("READ", "AverageLatency(us)")], mode
        assert printed[("READ", "Return=OK")] + printed[("UPDATE", "Return=OK")] == m["tenant_operations"], mode
        # its own weighted group: the kernel charged device I/O to that group (direct reads miss the
        # 8 MiB block cache), and beside, the groups' own counters still equal fio's totals (the
        # tenant's reads were not charged to them)
        assert m["tenant_iops_kernel"] * m["tenant_runtime_s"] > 100, (mode, m["tenant_iops_kernel"])
        facts = t["manifest"]["workload_facts"]
        assert facts["tenant_app"] == "ycsb" and facts["tenant_db"]["records"] == 100_000
        assert facts["tenant_db"]["dir"].startswith(lab.env["IOLAB_SCRATCH"])
        assert "recordcount=100000\n" in facts["tenant_db"]["properties"]
        assert "readproportion=0.5\n" in facts["tenant_db"]["properties"]
        assert "requestdistribution=zipfian\n" in facts["tenant_db"]["properties"]
        assert "maxexecutiontime=6\n" in facts["tenant_db"]["properties"]
        if mode == "beside":
            assert facts["trial"]["extra_weights"] == {"tenant": 400}
            assert sorted(facts["trial"]["weights"].values()) == [100, 200, 400, 800]
            assert abs(m["kernel_vs_fio"] - 1) < 0.03, m["kernel_vs_fio"]
            # the window the groups' ratios come from lies inside YCSB's run
            assert m["window_s"] <= m["tenant_runtime_s"], (m["window_s"], m["tenant_runtime_s"])
            for c in ("200", "400", "800"):
                assert m[f"ratio_{c}"] > 0
        else:
            assert facts["trial"]["tenant_weight"] == 400

    # the findings: YCSB alone and beside, beside/alone with CIs from the trials, the groups beside it,
    # and R4's published numbers as the reference
    f = doc["findings"]
    ten = f["tenant"]["bfq"]
    assert ten["app"] == "ycsb" and set(f["tenant_by_app"]) == {"ycsb"}
    by_mode = {mode: [t for t in trials if t["params"]["_workload"]["tenant"] == mode] for mode in ("alone", "beside")}
    for mode, ts in by_mode.items():
        for k in ("tenant_ops_s", "tenant_read_mean_us", "tenant_read_p95_us", "tenant_read_p99_us"):
            assert ten[mode][k]["mean"] == pytest.approx(mean_ci([t["metrics"][k] for t in ts]).mean), (mode, k)
            assert ten[mode][k]["n"] == 2
    ratio = ten["ops_beside_over_alone"]
    expect = ratio_ci([t["metrics"]["tenant_ops_s"] for t in by_mode["beside"]],
                      [t["metrics"]["tenant_ops_s"] for t in by_mode["alone"]])
    assert ratio["mean"] == pytest.approx(expect.mean, rel=1e-6) and ratio["ci95"][0] is not None
    assert set(ten) >= {"read_mean_beside_over_alone", "read_p95_beside_over_alone", "read_p99_beside_over_alone"}
    assert ten["groups_beside"]["groups"] == 4
    assert ten["groups_beside"]["class_ratio"]["800"]["mean"] == pytest.approx(
        mean_ci([t["metrics"]["ratio_800"] for t in by_mode["beside"]]).mean)
    ref = f["tenant_reference"]
    assert (ref["tenant_ops_s"], ref["tenant_read_mean_us"], ref["tenant_read_p95_us"],
            ref["tenant_read_p99_us"]) == (8412.8, 108, 236, 271)
    assert "Samsung 860 PRO" in ref["hardware"]

    print("ycsb tenant under bfq:", {mode: {k: round(v["mean"], 1) for k, v in ten[mode].items() if v["mean"]}
                                     for mode in ("alone", "beside")},
          "groups beside:", {c: round(v["mean"], 2) for c, v in ten["groups_beside"]["class_ratio"].items()})
    # the report, as HTML and Markdown: the tenant section with R4's row and the hardware note
    md = lab.run("report", "latest", "--format", "md").stdout
    html = lab.report_path(result).read_text()
    for text in (md, html):
        assert "A real application beside the groups (YCSB workload A on RocksDB)" in text
        assert "R4 (published)" in text and "8,412.8" in text
        assert "Samsung 860 PRO" in text
    section = md[md.index("A real application beside the groups"):]
    r4_row = next(ln for ln in section.splitlines() if "R4 (published)" in ln)
    assert [c.strip() for c in r4_row.strip("|").split("|")][2:6] == ["8,412.8", "108", "236", "271"], r4_row
    # nothing left: no group of this run, no loop device, no database
    assert orphan_groups(lab.pids) == []
    assert lab.env["IOLAB_SCRATCH"] not in subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert not list(Path(lab.env["IOLAB_SCRATCH"]).rglob("iolab-ycsb"))


def _raw_rows(lab: Lab) -> list[tuple[str, str]]:
    import sqlite3

    con = sqlite3.connect(f"file:{Path(lab.env['IOLAB_DATA']) / 'results.sqlite'}?mode=ro", uri=True)
    try:
        return con.execute("SELECT trial_id, raw_json FROM trials").fetchall()
    finally:
        con.close()


# -- the full study's spec --------------------------------------------------------------------------
def test_full_spec_runs_the_ycsb_tenant_and_dry_run_says_so(lab: Lab) -> None:
    spec = cw.build(quick=False)
    tenants = [w for w in spec["workloads"] if w.get("tenant", "off") != "off"]
    assert {(w["tenant"], w["tenant_app"]) for w in tenants} == {("alone", "ycsb"), ("beside", "ycsb")}
    assert [w["groups"] for w in tenants if w["tenant"] == "beside"] == [4]
    assert all("tenant" not in w for w in cw.build(quick=True).values() if isinstance(w, dict) and "kind" in w)
    if shutil.which("java") is None:
        pytest.skip("the dry run checks for java and the ycsb jars")
    out = lab.run("study", "cgroup-weights", "--dry-run").stdout
    assert 'runs the tenant YCSB workload A on RocksDB (tenant_app = "ycsb")' in " ".join(out.split())


# -- analysis and presentation on constructed trials ----------------------------------------------
def _trial(i: int, mode: str, app: str, m: dict[str, float]) -> dict[str, Any]:
    w = {"kind": "fio-groups", "groups": 4 if mode == "beside" else 0, "tenant": mode, "tenant_weight": 400,
         "iodepth": 32}
    if app:
        w["tenant_app"] = app
    return {"id": f"{app}-{mode}-r{i}", "status": "ok", "error": None, "repetition": i, "flags": [],
            "params": {"_target": {"kind": "cgroups", "controller": "bfq"}, "_workload": w, "workload": f"t-{mode}"},
            "metrics": m, "probes": {},
            "manifest": {"target": {"cgroups": {"backend": "v1-bfq", "cgroup_version": 1, "enforces_weights": True}}}}


def _ycsb(ops: float, mean: float, p95: float, p99: float) -> dict[str, float]:
    return {"tenant_ops_s": ops, "tenant_read_mean_us": mean, "tenant_read_p95_us": p95, "tenant_read_p99_us": p99,
            "tenant_read_p50_us": mean * 0.8, "tenant_update_p99_us": p99 / 2, "tenant_update_mean_us": mean / 3,
            "tenant_update_p95_us": p95 / 2, "tenant_iops_kernel": ops / 3}


GROUPS = {"ratio_100": 1.0, "ratio_200": 2.0, "ratio_400": 4.1, "ratio_800": 8.2, "max_abs_log2_error": 0.05,
          "min_share": 0.95, "jain": 0.99, "aggregate_iops": 8000.0, "generator_cpu_busy": 0.1,
          "machine_cpu_busy": 0.5, "iodepth_total": 128.0, "window_s": 7.0, "min_group_ios": 4000.0}


def test_tenant_analysis_ratios_groups_and_r4_reference() -> None:
    """alone 4000, 4400 ops/s; beside 1000, 1200: beside/alone = 1100/4200 with a CI from the trials;
    the groups' ratios beside are the beside trials'; a db_bench tenant in the same run stays apart."""
    alone = [_ycsb(4000, 200, 400, 600), _ycsb(4400, 180, 380, 560)]
    beside = [_ycsb(1000, 900, 2000, 4000), _ycsb(1200, 800, 1800, 3600)]
    trials = [_trial(i, "alone", "ycsb", m) for i, m in enumerate(alone)]
    trials += [_trial(i, "beside", "ycsb", {**m, **GROUPS}) for i, m in enumerate(beside)]
    trials += [_trial(i, "alone", "", {"tenant_ops_s": 7000.0 + i, "tenant_read_p99_us": 700.0,
                                       "tenant_iops_kernel": 900.0}) for i in range(2)]  # an older db_bench run
    f = cw.analyze({"trials": trials, "extra": {}})
    assert list(f["tenant_by_app"]) == ["ycsb", "db_bench"]  # R4's application first, and the headline one
    t = f["tenant"]["bfq"]
    assert t["app"] == "ycsb" and t["weight"] == 400
    assert t["alone"]["tenant_ops_s"]["mean"] == pytest.approx(4200)
    assert t["beside"]["tenant_read_p95_us"]["mean"] == pytest.approx(1900)
    assert t["ops_beside_over_alone"]["mean"] == pytest.approx(1100 / 4200)
    lo, hi = t["ops_beside_over_alone"]["ci95"]
    assert lo < 1100 / 4200 < hi  # an interval from the trials, not a bare ratio of means
    assert t["read_p99_beside_over_alone"]["mean"] == pytest.approx(3800 / 580)
    assert t["read_mean_beside_over_alone"]["mean"] == pytest.approx(850 / 190)
    assert t["groups_beside"]["class_ratio"]["800"]["mean"] == pytest.approx(8.2)
    assert t["groups_beside"]["ratios_hold"] is True
    db = f["tenant_by_app"]["db_bench"]["bfq"]
    assert db["app"] == "db_bench" and db["alone"]["tenant_ops_s"]["mean"] == pytest.approx(7000.5)
    assert "tenant_read_p95_us" not in db["alone"]  # db_bench prints no p95: no empty column for it
    assert f["tenant_reference"]["tenant_ops_s"] == 8412.8

    summary, sections = cw.present({"trials": trials}, f)
    titles = [s.title for s in sections]
    assert titles.index("A real application beside the groups (YCSB workload A on RocksDB)") < \
        titles.index("A real application beside the groups (RocksDB db_bench)")
    md = _md_tables(sections)
    ycsb_md = md[:md.index("RocksDB db_bench)")]
    assert "R4 (published)" in ycsb_md and "8,412.8" in ycsb_md
    db_md = md[md.index("RocksDB db_bench)"):]
    assert "R4 (published)" not in db_md, "R4 ran YCSB: its numbers are no reference for db_bench"
    assert any(s.startswith("ycsb under bfq: 4,200 ops/s alone, 1,100 beside") for s in summary), summary


def _md_tables(sections: list[Any]) -> str:
    """Every table's title, header and rows as text (what any renderer shows)."""
    out = []
    for s in sections:
        out.append(s.title)
        for b in s.blocks:
            if hasattr(b, "rows"):
                out.append(b.title)
                out += [" | ".join(str(c) for c in row) for row in b.rows]
                out += [n.text for n in b.notes]
    return "\n".join(out)


def test_tenant_findings_of_a_run_before_the_choice_read_as_db_bench() -> None:
    trials = [_trial(i, "alone", "", {"tenant_ops_s": 5000.0, "tenant_read_p99_us": 900.0,
                                      "tenant_iops_kernel": 800.0}) for i in range(3)]
    f = cw.analyze({"trials": trials, "extra": {}})
    assert f["tenant"]["bfq"]["app"] == "db_bench" and list(f["tenant_by_app"]) == ["db_bench"]
    assert analysis.tenant_app(trials[0]) == "db_bench"
