"""A time budget on real runs (runner/schedule.py): the real Runner, store and host target with
real workloads (the primes helper, sysbench), in-process so the verdicts the budget spends on can
be scripted from the stored trials. The spending decision is the product's; only the verdicts
are given: what a study's verdicts would say after each round.

Which wrong program would pass: a runner that spends in configuration order, on every
configuration alike, or on the interval rule first fails the order test; one that starts trials
past its budget fails the stop test; one that forgets what earlier sessions spent fails the
resume test; a report that does not name what the budget decided and left open fails the last."""

from __future__ import annotations

import io
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from iolab.analysis import budget as spend
from iolab.analysis.verdicts import HOLDS, UNDECIDED, Decision, ReportedVerdict
from iolab.publish.document import analyse_document, results_document
from iolab.report.markdown import render_markdown
from iolab.runner.runner import Runner
from iolab.runner.schedule import Budget
from iolab.spec.study import from_dict
from iolab.store.base import Store
from iolab.store.registry import open_store

# wall-clock bounds and spending by measured trial times: a neighbour would change both
pytestmark = pytest.mark.whole_machine


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("IOLAB_SCRATCH", str(tmp_path / "scratch"))
    (tmp_path / "data").mkdir()
    yield tmp_path


def _primes_spec(names: str, max_reps: int) -> Any:
    """One tiny primes workload per name (its own configuration): trials of well under a second."""
    return from_dict({"study": {"name": "budget-order", "repetitions": 3, "max_repetitions": max_reps,
                                "ci_target": 0.0001},  # the interval rule always wants more: it goes last
                      "target": {"kind": "host"},
                      "workloads": [{"name": n, "kind": "primes", "limits": [10**5 + i]} for i, n in enumerate(names)]},
                     "test.toml")


def _ids(store: Store, run_id: str) -> dict[str, str]:
    """workload name -> configuration id."""
    return {t.params["workload"]: t.config_id for t in store.trials(run_id)}


def _ok(store: Store, run_id: str) -> Counter[str]:
    return Counter(t.params["workload"] for t in store.trials(run_id) if t.status == "ok")


Script = Callable[[Counter[str], dict[str, str]], list[ReportedVerdict]]


def _run(tmp: Path, spec: Any, seconds: float, script: Script, started: float | None = None
         ) -> tuple[Store, str, str]:
    store = open_store(tmp / "data" / "results.sqlite")
    holder: dict[str, str] = {}

    def verdicts(run_id: str) -> list[ReportedVerdict]:
        return script(_ok(store, run_id), _ids(store, run_id))

    out = io.StringIO()
    runner = Runner(spec, store, Console(file=out, width=250),
                    budget=Budget(seconds, verdicts, "the test's verdicts", started=started))
    runner.instantiate()
    holder["run"] = runner.start()
    runner.run()
    return store, holder["run"], out.getvalue()


def _open(vid: str, names: str, decided_at: int, ok: Counter[str], ids: dict[str, str],
          decided: str = HOLDS) -> ReportedVerdict:
    """A verdict on `names` that is undecided until each has `decided_at` successful repetitions,
    saying (as a projection would) how many more that takes."""
    more = max(decided_at - min(ok[n] for n in names), 0)
    if more == 0:
        return ReportedVerdict(vid, f"{vid} on {names}", decided)
    return ReportedVerdict(vid, f"{vid} on {names}", UNDECIDED,
                           Decision(more, tuple(names), tuple(ids[n] for n in names if n in ids)))


def test_spending_goes_to_the_undecided_verdicts_cheapest_first_then_to_intervals(env: Path) -> None:
    """After the minimum (every configuration 3 times), the budget spends on b (one configuration,
    2 more: the cheapest decision), then on c and d together (4 more of two: twice the trials per
    round), and only then on the interval rule (every configuration to the cap). a is behind a
    verdict no repetition decides and one that holds: nothing is spent on it before the intervals."""
    def script(ok: Counter[str], ids: dict[str, str]) -> list[ReportedVerdict]:
        return [_open("V-cheap", "b", 5, ok, ids), _open("V-pair", "cd", 7, ok, ids, decided="differs"),
                ReportedVerdict("V-never", "V-never on a", UNDECIDED, Decision(None, ("a",), (ids.get("a", ""),))),
                ReportedVerdict("V-done", "V-done on a", HOLDS)]

    store, run_id, out = _run(env, _primes_spec("abcd", max_reps=8), 900, script)
    try:
        order = [t.params["workload"] for t in store.trials(run_id) if t.status == "ok"]
        assert Counter(order[:12]) == {n: 3 for n in "abcd"}, order  # the minimum first, for everyone
        assert order[12:14] == ["b", "b"], order  # the cheapest open verdict
        assert Counter(order[14:22]) == {"c": 4, "d": 4}, order  # then the pair, balanced round by round
        assert [sorted(order[i:i + 2]) for i in range(14, 22, 2)] == [["c", "d"]] * 4, order
        assert Counter(order[22:]) == {"a": 5, "b": 3, "c": 1, "d": 1}, order  # then intervals, to the cap of 8
        extra = store.resolve(run_id).extra["budget"]
        assert [(s["on"], s["trials"]) for s in extra["steps"]] == [("V-cheap", 2), ("V-pair", 8),
                                                                     (spend.INTERVALS_STEP, 10)], extra["steps"]
        status = {r["id"]: r["status"] for r in extra["verdicts"]}
        assert status == {"V-cheap": spend.DECIDED, "V-pair": spend.DECIDED, "V-never": spend.NO_MORE,
                          "V-done": spend.DECIDED}, status
        assert extra["phase"] == "done" and not extra["exhausted"], extra
        assert "spending on V-cheap" in out and "spending on V-pair" in out, out
    finally:
        store.close()


def _sysbench_spec(max_reps: int = 60) -> Any:
    return from_dict({"study": {"name": "budget-stop", "repetitions": 3, "max_repetitions": max_reps,
                                "ci_target": 0.0001},
                      "target": {"kind": "host"},
                      "workloads": [{"name": n, "kind": "sysbench-cpu", "time": 1, "max_prime": 10000 + i}
                                    for i, n in enumerate(("x", "y"))]},
                     "test.toml")


def test_a_budget_stops_within_the_budget_plus_one_trial_and_says_what_it_left_open(env: Path) -> None:
    """A 25 s budget on trials of about a second that would go on to 60 repetitions: the run ends
    within 25 s plus one trial (counted from before the runner was made), the stored accounting
    agrees, the budget is marked spent, and the report says which verdict it decided (y's) and
    which it left open (x's, which would take one more repetition, forever)."""
    def script(ok: Counter[str], ids: dict[str, str]) -> list[ReportedVerdict]:
        return [ReportedVerdict("V-x", "x keeps wanting one more", UNDECIDED, Decision(1, ("x",), (ids.get("x", ""),))),
                _open("V-y", "y", 4, ok, ids)]

    budget = 25.0
    t0, wall0 = time.monotonic(), time.time()
    store, run_id, out = _run(env, _sysbench_spec(), budget, script, started=t0)
    wall = time.monotonic() - t0
    try:
        trials = store.trials(run_id)
        longest = max(t.ended - t.started for t in trials)
        assert wall <= budget + longest + 3.0, (wall, longest)  # + teardown and the last accounting
        extra = store.resolve(run_id).extra["budget"]
        assert extra["exhausted"] and extra["spent_s"] <= budget + longest + 1.0, extra
        assert trials[-1].started - wall0 <= budget, "a trial started after the budget was spent"
        ok = Counter(t.params["workload"] for t in trials if t.status == "ok")
        assert ok["y"] >= 4 and ok["x"] > ok["y"], ok  # y decided, then x spent on until the budget ran out
        doc, summary, sections = analyse_document(results_document(store, store.resolve(run_id)))
        rows = {r["id"]: r for r in doc["findings"]["budget"]["verdicts"]}
        assert rows["V-y"]["status"] == spend.DECIDED, rows
        assert rows["V-x"]["status"] == spend.LEFT_OPEN and "1 more repetition(s) of x" in rows["V-x"]["words"], rows
        assert any("left open by it (V-x)" in line for line in summary), summary
        text = " ".join(render_markdown(doc, sections, summary).split())
        assert "## Budget" in text and "decided within the budget" in text and "left open by the budget" in text
        reasons = {r["label"]: r["stop_reason"] for r in doc["findings"]["repetitions"]}
        assert all("(the time budget was spent)" in r for r in reasons.values()), reasons
        assert "the budget ran out" in out
    finally:
        store.close()
