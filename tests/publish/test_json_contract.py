"""The results contract of design.md, and the other report formats, on a real run."""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

import numpy as np
import pytest
from tests.core.helpers import Lab, needs_fio, needs_root

from iolab.analysis.sequential import LookDesign, interval_batch
from iolab.core.metrics import NONNEG

pytestmark = [needs_root, needs_fio]


def test_run_ends_with_summary_and_report_path(basic_run: tuple[Lab, dict[str, Any]]) -> None:
    lab, doc = basic_run
    out = lab.basic_stdout  # type: ignore[attr-defined]
    last = out.strip().splitlines()[-1]
    assert last.startswith("report: ") and last.endswith("report.html")
    path = last.split("report: ", 1)[1]
    assert path.startswith(str(lab.data)) and doc["run_id"] in path
    html = open(path).read()
    assert html.lstrip().lower().startswith("<!doctype html") and doc["run_id"] in html
    assert "6/6 trials ok" in lab.basic_stderr  # type: ignore[attr-defined]
    lab.assert_nothing_left()


def test_json_follows_the_contract(basic_run: tuple[Lab, dict[str, Any]]) -> None:
    lab, doc = basic_run
    r = lab.iolab("report", "latest", "--format", "json")
    assert r.returncode == 0
    assert json.loads(r.stdout) == doc, "one JSON object, nothing else on stdout"

    assert isinstance(doc["run_id"], str) and doc["run_id"]
    assert doc["study"] == "basic"
    assert doc["status"] in {"complete", "partial", "failed"}
    assert doc["status"] == "complete"
    env = doc["environment"]
    for key in ("kernel", "fio_version", "iolab_version", "cgroup_mode", "cpus"):
        assert env.get(key), f"environment.{key} missing"
    assert env["fio_version"].startswith("fio-")

    assert len(doc["trials"]) == 6
    ids = [t["id"] for t in doc["trials"]]
    assert len(set(ids)) == 6
    for t in doc["trials"]:
        assert isinstance(t["id"], str)
        assert isinstance(t["params"], dict) and t["params"]["bs"] in (4096, 8192)
        assert isinstance(t["repetition"], int) and 0 <= t["repetition"] < 3
        assert t["status"] == "ok" and t["error"] is None
        m = t["metrics"]
        for key in ("iops", "bw_mib_s", "read_iops", "read_lat_mean_us", "read_clat_p99_us", "runtime_s"):
            assert isinstance(m[key], (int, float)) and math.isfinite(m[key]) and m[key] > 0, key
        assert abs(m["bw_mib_s"] - m["iops"] * t["params"]["bs"] / (1 << 20)) < 0.02 * m["bw_mib_s"]
        assert isinstance(t["probes"], dict)
        # the manifest makes the result rerunnable: the exact job text and the queue settings
        assert "rw=randread" in t["manifest"]["job"] and f"bs={t['params']['bs']}" in t["manifest"]["job"]
        assert t["manifest"]["target"]["queue"]["loop_dio"] == "1"
    assert {(t["params"]["bs"], t["repetition"]) for t in doc["trials"]} == \
        {(bs, r) for bs in (4096, 8192) for r in range(3)}

    assert "findings" in doc and isinstance(doc["findings"], dict) and doc["findings"]
    configs = doc["findings"]["configs"]
    assert len(configs) == 2
    by_bs = {t["params"]["bs"]: [] for t in doc["trials"]}
    for t in doc["trials"]:
        by_bs[t["params"]["bs"]].append(t)
    # the reported estimate is recomputed from the stored trials of that configuration, not trusted
    design = LookDesign(3, 3)  # the run's looks: repetitions = max_repetitions = 3
    for c in configs:
        trials = by_bs[c["labels"]["bs"]]
        assert {t["id"].rsplit("-r", 1)[0] for t in trials} == {c["config_id"]}
        iops = np.array([t["metrics"]["iops"] for t in trials])
        est = c["metrics"]["iops"]
        assert est["n"] == 3 and c["n_ok"] == 3 and c["failed_of"] == "0 failed of 3"
        assert est["mean"] == pytest.approx(float(np.median(iops)), rel=1e-12)  # the median of the repetitions
        assert (est["estimand"], est["domain"]) == ("median", "nonneg")
        _, lo, hi = (float(v[0]) for v in interval_batch(iops[None, :], design, NONNEG))
        # plus fio's clock error: each rate over t whole ms is off by up to rate/t (manifest.resolution)
        rels = [t["manifest"]["resolution"]["iops"] / t["metrics"]["iops"] for t in trials]
        for r, t in zip(rels, trials, strict=True):  # 1 / the read pass's ms, close to the job's runtime
            assert r == pytest.approx(1 / (t["metrics"]["runtime_s"] * 1000), rel=0.05), t["id"]
        rel = max(rels)
        clock = rel * est["mean"]
        assert 0 < clock < 0.01 * est["mean"], "a time-based job of a second or more: the clock error is small"
        assert est["ci95"] == [pytest.approx(lo - clock, rel=1e-9), pytest.approx(hi + clock, rel=1e-9)]
        assert lo < est["mean"] < hi and hi - lo > 0
        assert (est["method"], est["unit"], est["direction"]) == ("median[3..3] log ±resolution", "IOPS", "higher")
        lat = c["metrics"]["read_lat_mean_us"]
        assert (lat["unit"], lat["direction"]) == ("µs", "lower")
        assert lat["mean"] == pytest.approx(np.median([t["metrics"]["read_lat_mean_us"] for t in trials]))
    # every metric and probe value is declared; the declarations ride in the findings
    decl = doc["findings"]["metric_declarations"]
    assert decl["undeclared"] == []
    assert decl["workloads"]["fio"]["iops"]["direction"] == "higher"
    assert decl["probes"]["host_disk"]["writes"]["unit"] == "requests"
    reps = doc["findings"]["repetitions"]
    assert sorted((r["ok"], r["failed"], r["attempts"], r["main_metric"]) for r in reps) == [(3, 0, 3, "iops")] * 2


def test_csv_md_html_and_runs(basic_run: tuple[Lab, dict[str, Any]]) -> None:
    lab, doc = basic_run
    r = lab.iolab("report", doc["run_id"], "--format", "csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.reader(io.StringIO(r.stdout)))
    assert len(rows) >= 7, r.stdout[:500]  # a header and a row per trial at least
    assert len({len(row) for row in rows if row}) == 1, "every CSV row has the same columns"

    r = lab.iolab("report", doc["run_id"][:20], "--format", "md")  # an id prefix is enough
    assert r.returncode == 0, r.stderr
    assert r.stdout.lstrip().startswith("#") and "basic" in r.stdout

    out = lab.root / "r.html"
    r = lab.iolab("report", "latest", "-o", out)
    assert r.returncode == 0 and out.read_text().lstrip().lower().startswith("<!doctype html")



def test_runs_lists_the_run(basic_run: tuple[Lab, dict[str, Any]]) -> None:
    lab, doc = basic_run
    r = lab.iolab("runs")
    assert r.returncode == 0
    assert "basic" in r.stdout and "complete" in r.stdout and "6/6" in r.stdout
    assert doc["run_id"][:15] in r.stdout


def test_runs_shows_ids_that_can_be_copied(basic_run: tuple[Lab, dict[str, Any]]) -> None:
    """`iolab runs` is where users find the id for `report`, `compare` and `--resume`.

    BUG (src/iolab/cli.py runs): the rich table is squeezed to 80 columns when stdout is not
    a terminal (pipes, CI, `| less`), and the run column is cut with an ellipsis
    ("20261121-124312-basic…"), so the printed id cannot be used.
    """
    lab, doc = basic_run
    r = lab.iolab("runs")
    assert r.returncode == 0
    assert doc["run_id"] in r.stdout, f"`iolab runs` must show the whole run id:\n{r.stdout}"


def test_runs_json_lists_whole_ids_and_counts(basic_run: tuple[Lab, dict[str, Any]]) -> None:
    lab, doc = basic_run
    r = lab.iolab("runs", "--json")
    assert r.returncode == 0, r.stderr
    items = json.loads(r.stdout)
    mine = next(i for i in items if i["id"] == doc["run_id"])
    assert (mine["study"], mine["status"], mine["trials_ok"], mine["trials"], mine["failed"]) == \
        ("basic", "complete", 6, 6, 0)
    assert mine["created_utc"].endswith("Z")
    # the plain listing is not cut to a terminal's width either: the id is a whole word of its line
    line = next(x for x in lab.iolab("runs").stdout.splitlines() if doc["run_id"] in x)
    assert line.split()[0] == doc["run_id"]
    assert lab.iolab("runs", "-n", "0").returncode == 2


def test_unknown_run_is_a_clear_error(basic_run: tuple[Lab, dict[str, Any]]) -> None:
    """A RUN that names no run is an input error: exit status 2, like every input error."""
    lab, _ = basic_run
    r = lab.iolab("report", "no-such-run", "--format", "json")
    assert r.returncode == 2
    assert "no-such-run" in r.stderr and "Traceback" not in r.stderr
