"""`iolab history` through the CLI on a seeded series in the real PostgreSQL of conftest.py:
two hosts, two configurations, 16 runs each; on host-a configuration c0 loses 10 % when the
kernel goes from 6.1 to 6.6, c1 does not move, and host-b only has noise. The step is found
at the right run and named by the kernel change; the other series show none; the filters
(--host, --config, --metric) select what they say; an unknown study is exit 2.
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
        for host in ("host-a", "host-b"):
            for k in range(RUNS):
                run_id = f"2026010{k // 10}-{k % 10:02d}0000-h-{host}-{k:06x}"
                kernel = "6.6" if host == "host-a" and k >= STEP else "6.1"
                env = {"hostname": host, "kernel": kernel, "fio_version": "fio-3.33", "iolab_version": "0.1.0"}
                s.create_run(run_id, "h", "builtin:h", {}, {}, env)
                for cid, base in (("c0", 1000.0), ("c1", 500.0)):
                    level = base * (0.9 if (host, cid) == ("host-a", "c0") and k >= STEP else 1.0)
                    for rep in range(3):
                        s.save_trial(run_id, TrialResult(
                            trial_id=f"{cid}-r{rep}", config_id=cid, repetition=rep, params={}, status="ok", error=None,
                            metrics={"iops": float(level * (1 + rng.normal(0, 0.01))),
                                     "lat_us": float(rng.normal(50, 1))},
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
        a, b, c1_lat, text, *bad = drive(lab, [["history", *argv, "--db", url] for argv in (
            ["h", "--host", "host-a", "--json"], ["h", "--host", "host-b", "--json"],
            ["h", "--host", "host-a", "--config", "c1", "--metric", "lat_us", "--json"],
            ["h", "--host", "host-a", "--config", "c0", "--html", str(tmp_path / "h.html")],
            ["nope"], ["h", "--host", "nobody"], ["h", "--metric", "no_such_metric"])])
    finally:
        lab.force_cleanup()
    assert a["exit"] == 0, a["stderr"]
    series = {s["config_id"]: s for s in json.loads(a["stdout"])}
    assert set(series) == {"c0", "c1"}
    c0, c1 = series["c0"], series["c1"]
    assert c0["metric"] == "iops" and len(c0["points"]) == RUNS and all(p["n"] == 3 for p in c0["points"])
    assert [p["created"] for p in c0["points"]] == sorted(p["created"] for p in c0["points"]), "oldest first"
    (step,) = c0["changes"]
    assert step["index"] == STEP and step["p"] <= 0.01
    assert step["after"] / step["before"] - 1 == pytest.approx(-0.10, abs=0.01)
    assert step["differences"] == ["kernel 6.1 → 6.6"]
    a_step_run = c0["points"][STEP]["run_id"]
    assert c1["changes"] == []

    assert b["exit"] == 0 and all(s["changes"] == [] for s in json.loads(b["stdout"]))

    (only,) = json.loads(c1_lat["stdout"])
    assert only["config_id"] == "c1" and only["metric"] == "lat_us" and abs(only["points"][0]["value"] - 50) < 5

    assert text["exit"] == 0, text["stderr"]
    flat = " ".join(text["stdout"].split())
    assert "1 step(s)" in flat and "kernel 6.1 → 6.6" in flat and "-10." in flat
    assert text["stdout"].count("▶") == 2, "one row marked, one line naming the step"
    page = (tmp_path / "h.html").read_text()
    assert page.count("<svg") == 1 and "c0: iops" in page and "kernel 6.1 → 6.6" in page
    assert f"{a_step_run}" in page and "-10." in page and "http" not in page.replace("http://www.w3.org", "")

    for r in bad:
        assert r["exit"] == 2 and "no successful trials" in r["stderr"] and not r["traceback"], r
