"""A stored run is read with the meaning it was measured with (issue 27, item 2).

Every trial stores what its values mean (`manifest.declarations`: unit, direction, aggregate,
domain, estimand of each metric; the main metric). Analysis and reports read those, not today's
workload classes; a trial stored before that (tests/report/data/store-v3-before-declarations,
written by iolab 4ee7756) is read with today's registries. Which wrong program would pass:
- one that ignores the stored declarations and asks the registry: the doctored-meaning test fails
  (its stored unit, direction and main metric differ from today's);
- one that needs stored declarations: the old-store tests fail (no trial there has them);
- one whose analysis still imports workload modules: the subprocess test lists them.
"""

from __future__ import annotations

import copy
import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.core.helpers import LOOP_TARGET, fio_workload, make_lab, needs_fio, needs_root

from iolab.analysis.compare import compare_runs
from iolab.analysis.trials import numeric_keys
from iolab.core import metrics
from iolab.probes import registry as probe_registry
from iolab.publish.document import analyse_document, results_document
from iolab.store.registry import open_store

OLD_STORE = Path(__file__).parent / "data" / "store-v3-before-declarations.sqlite.gz"
IOLAB = Path(sys.executable).parent / "iolab"
REPO = Path(__file__).resolve().parents[2]
DECLARATIONS = "declarations"  # the manifest key (core/metrics.py TrialDeclarations), written out: the contract


@pytest.fixture(scope="module")
def old_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the checked-in old store (the file itself is never opened for writing)."""
    db = tmp_path_factory.mktemp("old-store") / "results.sqlite"
    db.write_bytes(gzip.decompress(OLD_STORE.read_bytes()))
    return db


def _iolab(db: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(IOLAB), *argv, "--db", str(db)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300, cwd=db.parent)


def _run_ids(db: Path) -> dict[str, list[str]]:
    """{study: [run ids, oldest first]} of the store."""
    store = open_store(db)
    try:
        out: dict[str, list[str]] = {}
        for r in sorted(store.runs(), key=lambda r: r.id):
            out.setdefault(r.study, []).append(r.id)
        return out
    finally:
        store.close()


def _document(db: Path, run_id: str) -> dict[str, Any]:
    store = open_store(db)
    try:
        return results_document(store, store.resolve(run_id))
    finally:
        store.close()


def test_the_old_store_holds_what_its_readme_says(old_db: Path) -> None:
    runs = _run_ids(old_db)
    assert len(runs.get("old-store", [])) == 2 and len(runs.get("write-modes", [])) == 1, runs
    for ids in runs.values():
        for rid in ids:
            trials = _document(old_db, rid)["trials"]
            assert trials and all(DECLARATIONS not in (t.get("manifest") or {}) for t in trials), rid


def test_an_old_run_reports_with_todays_declarations(old_db: Path, tmp_path: Path) -> None:
    for study, ids in _run_ids(old_db).items():
        for rid in ids:
            out = tmp_path / f"{rid}.json"
            r = _iolab(old_db, "report", rid, "--format", "json", "-o", str(out))
            assert r.returncode == 0, (rid, r.stderr)
            doc = json.loads(out.read_text())
            decl = doc["findings"]["metric_declarations"]
            assert decl["undeclared"] == [], (rid, decl["undeclared"])
            for t in doc["trials"]:
                kind = t["params"]["_workload"]["kind"]
                today = metrics.for_workload(t["params"]["_workload"])
                for name in t["metrics"]:
                    d = decl["workloads"][kind][name]
                    want = today.get(name)
                    assert want is not None and (d["unit"], d["direction"]) == (want.unit, want.direction), \
                        (rid, name, d)
            reps = doc["findings"]["repetitions"]
            assert reps and all(r["main_metric"] for r in reps), (rid, reps)
            if study == "write-modes":  # the study's own findings, not only the generic ones
                assert doc["findings"]["throughput"] and doc["findings"]["knee"], rid
    a, b = _run_ids(old_db)["old-store"]
    r = _iolab(old_db, "compare", a, b, "--json")
    assert r.returncode == 0, r.stderr
    cmp = json.loads(r.stdout)
    iops = [row for row in cmp["rows"] if row["metric"] == "iops"]
    assert len(iops) == 2 and all(row["direction"] == "higher" and row["verdict"] for row in iops), iops


def _doctored(doc: dict[str, Any]) -> dict[str, Any]:
    """The run as if its trials had stored declarations (in the runner's format, probes too) that
    differ from today's: iops in 'kIOPS-then', lower is better, and bw_mib_s the main metric
    (today: iops, higher)."""
    out = copy.deepcopy(doc)
    for t in out["trials"]:
        today = metrics.for_workload(t["params"]["_workload"])
        names = [*t["metrics"], "bw_mib_s"]
        decl = {n: m.as_dict() for n in names if (m := today.get(n)) is not None}
        decl["iops"].update(unit="kIOPS-then", direction="lower")
        probes = {p: {k: m.as_dict() for k in numeric_keys(res)
                      if (m := probe_registry.metric_set(p).get(k)) is not None}
                  for p, res in (t.get("probes") or {}).items()}
        t.setdefault("manifest", {})[DECLARATIONS] = {
            "main_metric": "bw_mib_s", "metrics": decl, "probes": probes,
            "probe_attributes": {p: list(probe_registry.attributes(p)) for p in probes}}
    return out


def test_a_run_is_read_with_the_declarations_its_trials_stored(old_db: Path) -> None:
    a_id, b_id = _run_ids(old_db)["old-store"]
    a, b = _document(old_db, a_id), _document(old_db, b_id)
    today = metrics.for_workload(a["trials"][0]["params"]["_workload"]).get("iops")
    assert today is not None and (today.unit, today.direction) == ("IOPS", "higher")
    doc, _, _ = analyse_document(_doctored(a))
    f = doc["findings"]
    assert f["metric_declarations"]["workloads"]["fio"]["iops"]["unit"] == "kIOPS-then"
    assert f["metric_declarations"]["workloads"]["fio"]["iops"]["direction"] == "lower"
    assert {r["main_metric"] for r in f["repetitions"]} == {"bw_mib_s"}, f["repetitions"]
    # compare reads A's stored meaning first (B, stored before declarations, falls back)
    rows = [r for r in compare_runs(_doctored(a), b)["rows"] if r["metric"] == "iops"]
    assert rows and all((r["unit"], r["direction"]) == ("kIOPS-then", "lower") for r in rows), rows
    rows = [r for r in compare_runs(b, _doctored(a))["rows"] if r["metric"] == "iops"]
    assert rows and all(r["direction"] == "higher" for r in rows), rows


PROBE_FRAMEWORK = {"iolab.probes.registry", "iolab.probes.base"}  # the interface, no probe implementation
ANALYSE_ALONE = """
import json, sys
from iolab.publish.document import analyse_document
doc, _, _ = analyse_document(json.load(open(sys.argv[1])))
assert doc["findings"]["metric_declarations"]["undeclared"] == [], doc["findings"]["metric_declarations"]
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("iolab.workloads.", "iolab.probes.")))))
"""


def test_a_run_with_stored_declarations_is_analysed_without_workload_modules(old_db: Path, tmp_path: Path) -> None:
    a_id, _ = _run_ids(old_db)["old-store"]
    doc = _doctored(_document(old_db, a_id))
    assert any(t.get("probes") for t in doc["trials"])
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc))
    r = subprocess.run([sys.executable, "-c", ANALYSE_ALONE, str(path)], capture_output=True, text=True,
                       timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr
    loaded = json.loads(r.stdout)
    assert [m for m in loaded if m.startswith("iolab.workloads.") or m not in PROBE_FRAMEWORK] == [], loaded


@needs_root
@needs_fio
def test_a_new_run_stores_what_its_values_mean(tmp_path: Path) -> None:
    """A real run (fio on a loop device): every trial stores the declaration of every metric and
    probe value it holds, as today's classes declare them, and its main metric."""
    lab = make_lab(tmp_path / "lab")
    try:
        spec = lab.spec('[study]\nname = "declared"\nrepetitions = 2\nmax_repetitions = 2\n'
                        + LOOP_TARGET + fio_workload(bs=["4k", "64k"]))
        r = lab.iolab("run", spec, timeout=600)
        assert r.returncode == 0, r.stderr
        doc = lab.report_json()
        assert len(doc["trials"]) == 4 and all(t["status"] == "ok" for t in doc["trials"]), doc["trials"]
        for t in doc["trials"]:
            stored = t["manifest"][DECLARATIONS]
            today = metrics.for_workload(t["params"]["_workload"])
            assert stored["main_metric"] == "iops"
            assert set(stored["metrics"]) == set(t["metrics"]), (set(stored["metrics"]) ^ set(t["metrics"]))
            for name, d in stored["metrics"].items():
                want = today.get(name)
                assert want is not None and d == want.as_dict(), (name, d)
                assert {"unit", "direction", "aggregate", "domain", "estimand"} <= set(d), d
            assert t["probes"], "a loop target runs host probes"
            for probe, res in t["probes"].items():
                skip = set(stored["probe_attributes"][probe])
                keys = {k for k in numeric_keys(res) if k.split(".", 1)[0] not in skip}
                assert keys and keys == set(stored["probes"][probe]), (probe, keys ^ set(stored["probes"][probe]))
            assert t["manifest"].get("resolution") is not None  # the clock error stays per trial
        lab.assert_nothing_left()
    finally:
        lab.force_cleanup()
