"""Where a time budget goes (analysis/budget.py), decided on fabricated verdicts and times: the open
verdict with the most expected decisions per second first (more × measured trial time, set-ups
counted), never one the budget cannot afford or the cap forbids, and every verdict accounted for
at the end as decided within the budget or left open by it with what it would take. A spender
that ranked by `more` alone, by verdict order, ignored measured times, the cap or what is left,
or called an interrupted run's open verdicts the budget's, fails these."""

from __future__ import annotations

from iolab.analysis import budget as spend
from iolab.analysis.verdicts import DIFFERS, HOLDS, UNDECIDED, UNTESTABLE, Decision, ReportedVerdict


def v(vid: str, verdict: str = UNDECIDED, more: int | None = 1, ids: tuple[str, ...] = ("a",)) -> ReportedVerdict:
    return ReportedVerdict(vid, f"claim {vid}", verdict, Decision(more, ids, ids) if verdict == UNDECIDED else None)


ROOM = {c: 10 for c in "abcdefg"}
N_OK = {c: 3 for c in "abcdefg"}


def step(verdicts: list[ReportedVerdict], times: dict[str, float], left: float = 1e9,
         room: dict[str, int] | None = None, setup: float = 0.0) -> spend.Step | None:
    return spend.next_step(verdicts, N_OK, room or ROOM, lambda c: times.get(c, 1.0), lambda ids: setup, left)


def test_the_cheapest_decision_per_second_goes_first_by_measured_time() -> None:
    """Three more repetitions of a 1 s configuration (3 s) decide sooner per second than one more of
    a 10 s one (10 s), although the second needs fewer repetitions; a ratio over two configurations
    costs both sides' trials."""
    times = {"a": 10.0, "b": 1.0, "c": 1.0, "d": 1.0}
    s = step([v("slow", more=1, ids=("a",)), v("fast", more=3, ids=("b",)), v("pair", more=2, ids=("c", "d"))], times)
    assert s is not None and s.verdict.id == "fast", s
    assert s.rounds == 3 and s.targets == {"b": 6} and s.per_decision_s == 3.0
    # the ranking follows the measured times, not the order or `more`: make b slow and the pair wins
    s = step([v("slow", more=1, ids=("a",)), v("fast", more=3, ids=("b",)), v("pair", more=2, ids=("c", "d"))],
             {**times, "b": 5.0})
    assert s is not None and s.verdict.id == "pair" and s.targets == {"c": 5, "d": 5}, s


def test_only_undecided_verdicts_that_more_repetitions_would_decide_are_candidates() -> None:
    verdicts = [v("held", HOLDS), v("differs", DIFFERS), v("untestable", UNTESTABLE),
                v("hopeless", more=None), v("nowhere", more=1, ids=())]
    assert step(verdicts, {}) is None
    s = step([*verdicts, v("open", more=2, ids=("e",))], {})
    assert s is not None and s.verdict.id == "open"


def test_the_cap_and_other_runs_configurations_rule_a_verdict_out() -> None:
    """A verdict whose projection needs more repetitions than max_repetitions leaves room for is not
    spent on (it would not be decided); nor one that names a configuration of another run."""
    room = {**ROOM, "a": 1}
    assert step([v("capped", more=2, ids=("a",))], {}, room=room) is None
    assert step([v("elsewhere", more=1, ids=("zz",))], {}) is None
    s = step([v("capped", more=2, ids=("a",)), v("fits", more=1, ids=("a",))], {}, room=room)
    assert s is not None and s.verdict.id == "fits"


def test_a_step_is_never_more_than_the_budget_affords() -> None:
    """Rounds are cut to what is left (set-up included); a verdict none of whose rounds fits is
    passed over for one that does."""
    times = {"a": 4.0, "b": 1.0}
    s = step([v("big", more=5, ids=("a",))], times, left=10.0)
    assert s is not None and s.rounds == 2 and s.seconds == 8.0  # 2 rounds of 4 s fit in 10 s, 3 do not
    s = step([v("big", more=5, ids=("a",))], times, left=10.0, setup=3.0)
    assert s is not None and s.rounds == 1 and s.seconds == 7.0  # the set-up is paid first
    assert step([v("big", more=5, ids=("a",))], times, left=3.9) is None
    s = step([v("big", more=1, ids=("a",)), v("small", more=3, ids=("b",))], times, left=3.5)
    assert s is not None and s.verdict.id == "small" and s.rounds == 3


def test_account_says_decided_within_and_left_open_by_the_budget_with_what_it_would_take() -> None:
    verdicts = [v("R-held", HOLDS), v("R-open", more=4, ids=("a", "b")), v("R-hopeless", more=None),
                v("R-capped", more=9, ids=("c",)), v("R-na", UNTESTABLE)]
    times = {"a": 2.0, "b": 3.0, "c": 1.0}
    rows = {r["id"]: r for r in spend.account(verdicts, {**ROOM, "c": 2}, times.__getitem__)}
    assert rows["R-held"]["status"] == spend.DECIDED and "decided within the budget" in rows["R-held"]["words"]
    left = rows["R-open"]
    assert left["status"] == spend.LEFT_OPEN
    assert left["words"].startswith("left open by the budget: about 4 more repetition(s) of a, b"), left
    assert left["seconds"] == 20.0 and "20 s" in left["words"]  # 4 × (2 s + 3 s)
    assert rows["R-hopeless"]["status"] == spend.NO_MORE
    assert rows["R-capped"]["status"] == spend.AT_CAP and "max_repetitions" in rows["R-capped"]["words"]
    assert rows["R-na"]["status"] == spend.NOT_TESTABLE
    # an interrupted run did not leave it open because of the budget: it says so
    [row] = spend.account([v("R-open", more=4, ids=("a",))], ROOM, {"a": 1.0}.__getitem__, ran_out=False)
    assert row["status"] == spend.OPEN and "left open by the budget" not in row["words"]


def test_summary_and_section_name_the_verdicts_left_open() -> None:
    rows = spend.account([v("R-held", HOLDS), v("R-open", more=2, ids=("a",))], ROOM, {"a": 1.0}.__getitem__)
    budget = {"seconds": 300, "spent_s": 298.4, "exhausted": True, "steps": [{"on": "R-open", "trials": 4,
                                                                           "seconds": 8.0}]}
    words = spend.summary_words(budget, rows)
    assert words == ("budget: spent 5.0 min of 5.0 min; the budget ran out; 1 verdict(s) decided within the "
                     "budget, 1 left open by it (R-open)"), words
    section = spend.section(budget, rows)
    tables = [b for b in section.blocks if hasattr(b, "rows")]
    statuses = {r[0]: r[2].text for r in tables[0].rows}
    assert statuses == {"claim R-held": spend.DECIDED, "claim R-open": spend.LEFT_OPEN}
    assert tables[1].rows == [["R-open", 4, 8]]


def test_trial_times_and_room_come_from_the_stored_trials() -> None:
    doc = {"trials": [
        {"id": "c1-r0", "status": "ok", "started": 10.0, "ended": 12.0},
        {"id": "c1-r1", "status": "failed", "started": 12.0, "ended": 18.0},
        {"id": "c1-r2", "status": "ok", "started": 18.0, "ended": 21.0},
        {"id": "c2-r0", "status": "ok", "started": 21.0, "ended": 21.5},
    ]}
    assert spend.trial_times(doc) == {"c1": 3.0, "c2": 0.5}  # the median of every attempt: failures cost time
    assert spend.repetitions_left(doc, 5) == ({"c1": 2, "c2": 1}, {"c1": 3, "c2": 4})


def test_a_reproductions_budget_gives_each_study_its_minimum_in_turn_when_it_cannot_afford_all() -> None:
    """Plenty: shared in proportion to need. Too little for every minimum: the study next in turn
    gets its whole minimum while the budget lasts (a proportional cut would leave every study short
    of its minimum, answering nothing), and the last one what remains."""
    need = {"a": 100.0, "b": 300.0}
    assert spend.study_share(800.0, need, "a") == 200.0 and spend.study_share(800.0, need, "b") == 600.0
    assert spend.study_share(250.0, need, "a") == 100.0  # proportional would be 62.5, short of a's minimum
    assert spend.study_share(150.0, {"b": 300.0}, "b") == 150.0  # what is left, the rest of b stays open
    assert spend.study_share(-5.0, need, "a") == 0.0


def test_a_verdict_that_missed_its_projection_does_not_starve_the_others() -> None:
    """x asks for one more repetition forever; y would be decided by one. With x measured a little
    cheaper, the old rule chose x after every trial (a run gave x 18 trials while y waited at 3);
    once a trial was spent on x and x stayed open, y goes first."""
    times = {"a": 0.98, "b": 1.0}
    both = [v("x", more=1, ids=("a",)), v("y", more=1, ids=("b",))]
    first = step(both, times)
    assert first is not None and first.verdict.id == "x", first  # nothing spent yet: the cheaper one
    after = spend.next_step(both, N_OK, ROOM, lambda c: times[c], lambda ids: 0.0, 1e9, {"x": 1})
    assert after is not None and after.verdict.id == "y", after
    alone = spend.next_step(both[:1], N_OK, ROOM, lambda c: times[c], lambda ids: 0.0, 1e9, {"x": 5})
    assert alone is not None and alone.verdict.id == "x", "a verdict left alone is still spent on"
