"""What a reproduction's time budget left unmeasured is "left open by the budget", never "not
testable here" nor a failure (issue 28; a real `reproduce --budget 5m` showed three studies the
budget never reached as "failed 0/0" with every claim "not testable here", and "0 left open by
it"). And how a budget too small for every minimum is shared: cheapest claim first, each study
its minimum or nothing.

Which wrong program would pass: one that still calls an unreached study's claims untestable or
its run failed; one that turns every not-testable claim into "undecided" (a study that finished
its minimum, or failed without a budget, keeps "not testable here"); one that counts the left-open
claims anywhere but in "left open by it"; one that runs the studies in the published order or
starts a study whose minimum no longer fits."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from iolab.analysis import budget as spend
from iolab.analysis.verdicts import UNDECIDED, UNTESTABLE, Decision, ReportedVerdict
from iolab.publish.document import analysed
from iolab.reproduce import claims, page
from iolab.reproduce.plan import RUN_ORDER
from iolab.runner.runner import Runner
from iolab.runner.schedule import Budget
from iolab.spec.study import from_dict
from iolab.store.registry import open_store

UNREACHED = {"seconds": 47.3, "spent_s": 0.5, "exhausted": True, "hard": True, "phase": "minimum", "sessions": 1,
             "source": spend.CLAIMS_SOURCE, "steps": [], "minimum_s": 276.0}


def child(study: str, trials: list[dict[str, Any]], budget: dict[str, Any] | None, status: str) -> dict[str, Any]:
    return {"run_id": f"r-{study}", "study": study, "status": status, "trials": trials, "findings": {},
            "extra": {"budget": budget} if budget else {},
            "spec": {"study": {"name": study, "repetitions": 3, "max_repetitions": 10}}}


def reproduction(children: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"options": {"quick": True}, "extra": {"budget": {"seconds": 300.0, "spent_s": 290.0, "exhausted": True}},
            "children": {n: {"run_id": d["run_id"], "status": d["status"], "trials_ok": f"0/{len(d['trials'])}",
                             "doc": d} for n, d in children.items()}}


def test_claims_of_a_study_the_budget_never_reached_are_left_open_by_it() -> None:
    f = page.findings(reproduction({"virtio": child("virtio", [], UNREACHED, "partial")}))
    rows = [r for r in f.claims if r.study == "virtio"]
    assert rows and all(r.verdict == UNDECIDED for r in rows), [(r.id, r.verdict) for r in rows]
    assert all(r.reason.startswith("left open by the budget: it ran out before the virtio study's first trial")
               for r in rows), rows[0].reason
    assert f.budget is not None
    under = {v.id: v for v in f.budget.verdicts if v.study == "virtio"}
    assert {v.status for v in under.values()} == {spend.LEFT_OPEN}
    assert all(v.seconds == 276.0 and "about" not in v.words and "~4.6 min" in v.words for v in under.values())
    words = spend.summary_words(f.budget.to_json(), [v.to_json() for v in f.budget.verdicts])
    assert f"0 verdict(s) decided within the budget, {len(rows)} left open by it" in words, words
    assert f.studies["virtio"].status == "partial (not reached: the budget ran out before its first trial)"
    assert f.budget.studies is not None and f.budget.studies["virtio"].reached is False
    # the page says so, in its table of left-open claims with what it would take
    _, sections = page.present({}, f)
    budget = next(s for s in sections if s.title == "The time budget")
    assert any(getattr(b, "title", "") == "Left open" for b in budget.blocks)


def test_not_testable_stays_for_what_the_budget_did_not_cause() -> None:
    """A study that failed without a budget, and one whose budget ran out after its minimum, keep
    'not testable here' for what they cannot answer."""
    trial = {"id": "t", "status": "failed", "params": {"_workload": {"kind": "iozone"}, "_target": {}},
             "metrics": {}, "probes": {}, "flags": [], "manifest": {}}
    failed = child("virtio", [trial], None, "failed")
    rows = [r for r in claims.evaluate({"virtio": failed}, quick=True) if r.study == "virtio"]
    assert rows and {r.verdict for r in rows} == {UNTESTABLE}
    done = {**UNREACHED, "phase": "done"}
    assert spend.cut_short(child("virtio", [], done, "complete"), "virtio") is None
    assert spend.cut_short(child("virtio", [], {**UNREACHED, "exhausted": False}, "partial"), "virtio") is None


def test_a_run_the_budget_stops_before_its_first_trial_is_partial_and_leaves_its_verdicts_open(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real runner and store: a budget too small for one trial stops the run before it; the run is
    'partial' (it resumes), not 'failed', and its verdicts are left open by the budget."""
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("IOLAB_SCRATCH", str(tmp_path / "scratch"))
    (tmp_path / "data").mkdir()
    store = open_store(tmp_path / "data" / "results.sqlite")
    spec = from_dict({"study": {"name": "budget-unreached", "repetitions": 3},
                      "target": {"kind": "host"},
                      "workloads": [{"name": "p", "kind": "sysbench-cpu", "time": 2}]}, "test.toml")
    runner = Runner(spec, store, Console(file=io.StringIO(), width=200),
                    budget=Budget(0.5, lambda run_id: [ReportedVerdict("V", "p is fast", UNTESTABLE, None)],
                                  "the test's verdicts"))
    runner.instantiate()
    run_id = runner.start()
    assert runner.run() == "partial"
    rec = store.resolve(run_id)
    assert rec.status == "partial" and not store.trials(run_id)
    b = rec.extra["budget"]
    assert b["exhausted"] and b["phase"] == "minimum" and b["minimum_s"] > 0.5, b
    [row] = b["verdicts"]
    assert row["status"] == spend.LEFT_OPEN and row["words"].startswith(
        "left open by the budget: it ran out before the first trial"), row
    _, summary, sections = analysed(store, rec)
    assert summary[0] == "no trials ran: the time budget ran out before the first trial", summary
    assert "0 verdict(s) decided within the budget, 1 left open by it (V)" in summary[-1], summary
    assert [s.title for s in sections] == ["Budget"]


def test_a_tight_budget_runs_the_cheapest_claims_first_each_study_its_minimum_or_nothing() -> None:
    minimums = {"write-modes": 57.0, "cgroup-weights": 63.0, "sync-amplification": 539.0, "virtio": 276.0,
                "vm-profile": 454.0}
    n = {"write-modes": 2, "cgroup-weights": 4, "sync-amplification": 4, "virtio": 4, "vm-profile": 3}
    assert spend.cheapest_claims_first(minimums, n, RUN_ORDER) == [
        "cgroup-weights", "write-modes", "virtio", "sync-amplification", "vm-profile"]
    assert spend.cheapest_claims_first({"a": 10.0, "b": 10.0}, {"a": 1, "b": 1}, ["b", "a"]) == ["b", "a"]
    assert spend.tight_share(63.0, 300.0) == pytest.approx(63 * 1.25 + 10)
    assert spend.tight_share(63.0, 70.0) == 70.0     # the minimum fits: all that is left, not more
    assert spend.tight_share(276.0, 150.0) == 0.0   # it does not: not started, its claims left open


def test_what_is_left_goes_to_the_cheapest_open_claim_across_studies_within_each_cap() -> None:
    """After the minimums, the reproduction's budget picks across studies: the open claim with the
    least expected cost of a decision (more × its configurations' trial times), passing over
    claims no repetition decides, decided ones, and ones beyond their study's cap."""
    def v(vid: str, more: int | None, ids: tuple[str, ...], verdict: str = UNDECIDED) -> ReportedVerdict:
        return ReportedVerdict(vid, vid, verdict, Decision(more, ids, ids))

    studies = {
        # 2 more of a 10 s trial: 20 s
        "write-modes": ([v("R2-a", 2, ("w1",)), v("R2-edge", None, ("w2",))], {"w1": 5, "w2": 5},
                        {"w1": 10.0, "w2": 0.1}),
        # 3 more of two 2 s trials: 12 s, the cheapest; a cheaper one is beyond its cap
        "cgroup-weights": ([v("R4-a", 3, ("c1", "c2")), v("R4-cap", 4, ("c3",))], {"c1": 3, "c2": 3, "c3": 2},
                           {"c1": 2.0, "c2": 2.0, "c3": 0.5}),
        "virtio": ([v("R1-done", 1, ("v1",), verdict="holds")], {"v1": 3}, {"v1": 0.1}),
    }
    assert spend.cheapest_open_claim(studies) == (12.0, "cgroup-weights", "R4-a")
    del studies["cgroup-weights"]
    assert spend.cheapest_open_claim(studies) == (20.0, "write-modes", "R2-a")
    assert spend.cheapest_open_claim({"virtio": studies["virtio"]}) is None
