"""`iolab history` through the CLI on a seeded series in the real PostgreSQL of conftest.py:
three hosts, two configurations, 16 runs each, two directional metrics per configuration (IOPS
and mean latency: a family of four series per host). On host-a configuration c0 loses 10 % of
its IOPS when the kernel goes from 6.1 to 6.6, c1 does not move, and host-b only has noise; on
host-c c0's newest two runs lost 10 % (issue 25: a suspected change). The step is confirmed at
the right run with its size and interval and named by the kernel change; the suspicion is
shown as suspected; the other series show none; --power says how soon a step would be seen;
the filters (--host, --config, --metric) select what they say; an unknown study is exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from iolab.core.model import TrialResult
from iolab.store import registry
from tests.core.helpers import drive, make_lab

from .pgserver import PgServer

RUNS, STEP = 16, 8


def _seed(url: str) -> None:
    rng = np.random.default_rng(14)
    s = registry.open_store(url)
    try:
        for host in ("host-a", "host-b", "host-c"):
            for k in range(RUNS):
                run_id = f"2026010{k // 10}-{k % 10:02d}0000-h-{host}-{k:06x}"
                kernel = "6.6" if host == "host-a" and k >= STEP else "6.1"
                env = {"hostname": host, "kernel": kernel, "fio_version": "fio-3.33", "iolab_version": "0.1.0"}
                s.create_run(run_id, "h", "builtin:h", {}, {}, env)
                for cid, base in (("c0", 1000.0), ("c1", 500.0)):
                    stepped = ((host, cid) == ("host-a", "c0") and k >= STEP) or \
                        ((host, cid) == ("host-c", "c0") and k >= RUNS - 2)
                    level = base * (0.9 if stepped else 1.0)
                    workload = {"kind": "fio", "rw": "randread", "bs": 4096 if cid == "c0" else 8192}
                    for rep in range(3):
                        s.save_trial(run_id, TrialResult(
                            trial_id=f"{cid}-r{rep}", config_id=cid, repetition=rep,
                            params={"bs": workload["bs"], "_workload": workload}, status="ok", error=None,
                            metrics={"iops": float(level * (1 + rng.normal(0, 0.01))),
                                     "read_lat_mean_us": float(rng.normal(50, 1))},
                            probes={}, manifest={}), None)
                failed = TrialResult("c0-failed", "c0", 9, {}, "failed", "boom", {"iops": 1.0}, {}, {})
                s.save_trial(run_id, failed, None)
        # a run of another study is not part of the history
        s.create_run("other", "not-h", "builtin:x", {}, {}, {"hostname": "host-a"})
    finally:
        s.close()


def test_history_finds_the_kernel_step_and_nothing_else(pg_server: PgServer, tmp_path: Path) -> None:
    url = pg_server.fresh_url()
    _seed(url)
    lab = make_lab(tmp_path / "lab")
    try:  # every command line in one process (the CLI driver): imports are paid once
        a, b, c, c1_lat, text, power, *bad = drive(lab, [["history", *argv, "--db", url] for argv in (
            ["h", "--host", "host-a", "--json"], ["h", "--host", "host-b", "--json"],
            ["h", "--host", "host-c", "--json"],
            ["h", "--host", "host-a", "--config", "c1", "--metric", "read_lat_mean_us", "--json"],
            ["h", "--host", "host-a", "--config", "c0", "--html", str(tmp_path / "h.html")],
            ["h", "--host", "host-b", "--config", "c0", "--metric", "iops", "--power"],
            ["nope"], ["h", "--host", "nobody"], ["h", "--metric", "no_such_metric"])])
    finally:
        lab.force_cleanup()
    assert a["exit"] == 0, a["stderr"]
    doc = json.loads(a["stdout"])
    assert doc["family"] == 4 and doc["alpha"] == 0.05 and 0 <= doc["rho"] <= 0.9
    series = {(s["config_id"], s["metric"]): s for s in doc["series"]}
    assert set(series) == {("c0", "iops"), ("c0", "read_lat_mean_us"), ("c1", "iops"), ("c1", "read_lat_mean_us")}
    c0 = series[("c0", "iops")]
    assert c0["direction"] == "higher" and len(c0["points"]) == RUNS and all(p["n"] == 3 for p in c0["points"])
    assert [p["created"] for p in c0["points"]] == sorted(p["created"] for p in c0["points"]), "oldest first"
    (step,) = c0["changes"]
    assert step["index"] == STEP and step["status"] == "confirmed" and step["p"] <= step["level"]
    assert step["verdict"] == "regression" and step["ratio"] == pytest.approx(0.90, abs=0.01)
    assert step["lo"] < 0.90 < step["hi"] and step["hi"] < 0.95
    assert step["differences"] == ["kernel 6.1 → 6.6"]
    a_step_run = c0["points"][STEP]["run_id"]
    assert all(not s["changes"] for k, s in series.items() if k != ("c0", "iops"))

    assert b["exit"] == 0 and all(s["changes"] == [] for s in json.loads(b["stdout"])["series"])

    newest = {(s["config_id"], s["metric"]): s for s in json.loads(c["stdout"])["series"]}
    (sus,) = newest[("c0", "iops")]["changes"]
    assert (sus["status"], sus["index"], sus["runs_after"], sus["verdict"]) == ("suspected", RUNS - 2, 2, "regression")
    assert any(e["what"] == "suspected" for e in newest[("c0", "iops")]["events"])

    (only,) = json.loads(c1_lat["stdout"])["series"]
    assert only["config_id"] == "c1" and only["metric"] == "read_lat_mean_us"
    assert abs(only["points"][0]["value"] - 50) < 5

    assert text["exit"] == 0, text["stderr"]
    flat = " ".join(text["stdout"].split())
    assert "confirmed regression" in flat and "kernel 6.1 → 6.6" in flat and "-10." in flat
    assert text["stdout"].count("▶") == 2, "one row marked, one line naming the step"
    page = (tmp_path / "h.html").read_text()
    assert page.count("<svg") == 1 and "bs=4096: iops" in page and "kernel 6.1 → 6.6" in page
    assert f"{a_step_run}" in page and "-10." in page and "http" not in page.replace("http://www.w3.org", "")

    assert power["exit"] == 0, power["stderr"]
    line = next(x for x in power["stdout"].splitlines() if x.startswith("power of c0 iops"))
    assert "a 2% step" in line and "a 5% step" in line and "a 10% step" in line and "confirmed after" in line

    for r in bad:
        assert r["exit"] == 2 and "no successful trials" in r["stderr"] and not r["traceback"], r
