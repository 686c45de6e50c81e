"""A budgeted run's stored findings read back by every study's findings model and by the
reproduction's claims (issue 28: on a real `reproduce --budget 5m` the page said "could not
evaluate from the stored results (ValidationError: ... budget — Extra inputs are not permitted)"
for R2's knee and both R3 sync claims, because the report adds `budget` to every budgeted run's
findings and the typed models did not declare it).

The budget section comes from a real budgeted run (the Runner, a store, the host target and the
primes helper, a budget that spends on a scripted verdict), analysed as `iolab report` analyses
it; it is then carried by each built-in study's own findings, as a budgeted run of that study
stores them. Which wrong program would pass: one that declares `budget` on some studies' models
only, one that drops the section when it reads it back (the round trip compares the JSON), or a
claim reader that still rejects it."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from iolab.analysis.verdicts import UNDECIDED, Decision, ReportedVerdict
from iolab.publish.document import analysed
from iolab.reproduce import claims, page
from iolab.reproduce.page import PageFindings
from iolab.runner.runner import Runner
from iolab.runner.schedule import Budget
from iolab.spec.study import from_dict
from iolab.store.registry import open_store
from iolab.studies import builtin


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The analysed document of a real run under a 20 s budget whose one verdict stays open."""
    tmp = tmp_path_factory.mktemp("budget-findings")
    mp = pytest.MonkeyPatch()
    mp.setenv("IOLAB_DATA", str(tmp / "data"))
    mp.setenv("IOLAB_SCRATCH", str(tmp / "scratch"))
    (tmp / "data").mkdir()
    try:
        store = open_store(tmp / "data" / "results.sqlite")
        spec = from_dict({"study": {"name": "budget-findings", "repetitions": 2, "max_repetitions": 3},
                          "target": {"kind": "host"},
                          "workloads": [{"name": "p", "kind": "primes", "limits": [10**5]}]}, "test.toml")

        def verdicts(run_id: str) -> list[ReportedVerdict]:
            ids = sorted({t.config_id for t in store.trials(run_id)})
            return [ReportedVerdict("V1", "p is fast", UNDECIDED, Decision(1, ("p",), tuple(ids)))]

        runner = Runner(spec, store, Console(file=io.StringIO(), width=200),
                        budget=Budget(20.0, verdicts, "the test's verdicts"))
        runner.instantiate()
        run_id = runner.start()
        runner.run()
        doc, _, _ = analysed(store, store.resolve(run_id))
        return doc
    finally:
        mp.undo()


def _empty(name: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"run_id": f"r-{name}", "study": name, "status": "complete", "spec": builtin.get(name).build(True),
            "options": {}, "environment": {}, "extra": extra or {}, "trials": [], "findings": {}}


def test_the_budget_section_is_in_the_findings_of_a_real_budgeted_run(budgeted: dict[str, Any]) -> None:
    b = budgeted["findings"]["budget"]
    assert b["seconds"] == 20.0 and b["spent_s"] > 0 and b["source"] == "the test's verdicts"
    assert [v["id"] for v in b["verdicts"]] == ["V1"]


@pytest.mark.parametrize("name", sorted(builtin.BUILTIN))
def test_every_studys_findings_read_a_budgeted_runs_section_back(budgeted: dict[str, Any], name: str) -> None:
    mod = builtin.get(name)
    doc = _empty(name)
    own = mod.findings(doc)
    stored = {**own.to_json(), "budget": budgeted["findings"]["budget"]}
    back = type(own).from_json(stored)
    assert back.to_json() == stored  # nothing dropped, nothing added
    assert back.budget is not None and back.budget.verdicts[0].id == "V1"
    mod.present({**doc, "findings": stored}, stored)  # the study's report reads it too


@pytest.mark.parametrize("name", sorted(set(builtin.BUILTIN) - {"iozone", "fleet-scan"}))
def test_the_reproductions_claims_read_a_budgeted_studys_stored_findings(budgeted: dict[str, Any], name: str
                                                                          ) -> None:
    """The claims a reproduction reads from a study's stored findings: none says it could not
    evaluate them (an empty run's own findings, one ok trial so the study counts as run)."""
    mod = builtin.get(name)
    doc = _empty(name, {"budget": budgeted["extra"]["budget"]})
    stored = {**mod.findings(doc).to_json(), "budget": budgeted["findings"]["budget"]}
    doc = {**doc, "findings": stored,
           "trials": [{"id": "t0", "status": "ok", "params": {"_workload": {"kind": "none"}, "_target": {}},
                       "metrics": {}, "probes": {}, "flags": [], "manifest": {}, "repetition": 0}]}
    rows = [r for r in claims.evaluate({name: doc}, quick=False) if r.study == name]
    assert rows
    assert not [r.reason for r in rows if "could not evaluate" in r.reason]
    # the page that carries them, with the children's budgets, reads back as well
    f = page.findings({"options": {}, "extra": {"budget": {"seconds": 300.0, "spent_s": 10.0, "exhausted": True}},
                       "children": {name: {"run_id": doc["run_id"], "status": "complete", "doc": doc}}})
    assert f.budget is not None
    assert PageFindings.from_json(f.to_json()).to_json() == f.to_json()
