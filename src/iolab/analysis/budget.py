"""Where a repetition budget goes, and what it left open: pure decisions on verdicts and times.

A run with a budget (`--budget DURATION`, or a quick study's `budget`) first runs every
configuration to its minimum, then spends further rounds where a verdict the study reports is
still undecided and could still be decided, then on the ordinary interval-width rule
(runner/schedule.py drives it). Everything that decides *where* is here, as functions of
verdicts (`ReportedVerdict`, recomputed from stored trials between rounds), repetition counts
and measured times, so it is tested without a machine:

* `next_step`: of the open verdicts that more repetitions would likely decide (`decidable`,
  within every configuration's `max_repetitions`), the one with the most expected decisions per
  second: 1 / (more × Σ its configurations' measured trial time + the set-up of their targets),
  run for as many of those `more` rounds as the budget affords (none that it cannot finish);
* `account`: for each verdict at the end, "decided within the budget", "left open by the
  budget" (with what it would take: repetitions, configurations, time at the measured trial
  times), or why more repetitions would not help (none would decide it; the cap).

Times are wall seconds per trial of each configuration, from the stored trials (`trial_times`)
or measured by the runner (which also counts probes and storing).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from iolab.analysis.trials import config_of
from iolab.analysis.verdicts import DIFFERS, HOLDS, UNDECIDED, UNTESTABLE, ReportedVerdict
from iolab.report.model import Note, Section, Table, Tag, Tone

# Whose verdicts a budget spent on (runner/schedule.py Budget.source): a study's own, or a page's claims.
STUDY_SOURCE = "the study's verdicts"
CLAIMS_SOURCE = "the reproduction's claims"
# The accounting's name for what the interval rule spent after the verdicts (runner/schedule.py).
INTERVALS_STEP = "intervals wider than ci_target"
# What the budget did with each verdict (account); the words every report uses.
DECIDED = "decided within the budget"
LEFT_OPEN = "left open by the budget"
NO_MORE = "open: more repetitions are unlikely to decide it"
AT_CAP = "open at the repetition cap"
NOT_TESTABLE = "not testable here"
NO_CONFIGS = "open: it names no configuration to repeat"
OPEN = "open: the run ended before the budget was spent"
STATUS_TONES: dict[str, Tone] = {DECIDED: "good", LEFT_OPEN: "warn", NO_MORE: "neutral", AT_CAP: "neutral",
                                 NOT_TESTABLE: "neutral", NO_CONFIGS: "neutral", OPEN: "warn"}


@dataclass(frozen=True)
class Step:
    """One spending step: `rounds` more rounds of the configurations behind `verdict`, each to
    reach `targets[config id]` successful repetitions; `seconds` what they should cost (set-ups
    included), `per_decision_s` the verdict's whole expected cost (what ranks it)."""

    verdict: ReportedVerdict
    rounds: int
    targets: dict[str, int]
    seconds: float
    per_decision_s: float

    def words(self) -> str:
        more = self.verdict.decision.more if self.verdict.decision else None
        return (f"{self.verdict.id}: {self.rounds} of about {more} more round(s) of {len(self.targets)} "
                f"configuration(s), ~{fmt_seconds(self.seconds)}")


def next_step(verdicts: Sequence[ReportedVerdict], n_ok: Mapping[str, int], room: Mapping[str, int],
              trial_s: Callable[[str], float], setup_s: Callable[[Sequence[str]], float], left: float,
              spent: Mapping[str, int] | None = None) -> Step | None:
    """The spending step with the most expected decisions per second that the budget affords
    (`left` seconds), or None. `n_ok`: successful repetitions per configuration id; `room`: how
    many more each may still have (max_repetitions − n_ok; 0 for one abandoned or skipped; a
    configuration not in `room` is not in this run); `trial_s`: the measured seconds of one trial;
    `setup_s`: what setting up the targets of those configurations costs now. `spent`: trials
    already spent on each verdict (by id) in this run: a verdict still open after them missed its
    projection, and ranks as if it cost that much more (one projected round spent and missed: twice
    its cost), so a verdict that wants "one more" forever cannot starve the others (a run saw 18
    trials go to such a verdict while one that one trial would decide waited)."""
    best: Step | None = None
    best_rank: tuple[float, str] = (math.inf, "")
    for v in verdicts:
        if not v.decidable or v.decision is None or v.decision.more is None:
            continue
        ids = list(dict.fromkeys(v.decision.config_ids))
        more = v.decision.more
        if any(c not in room for c in ids) or min(room[c] for c in ids) < more:
            continue  # a configuration of another run, or the projection needs more than the cap allows
        per_round = sum(max(trial_s(c), 0.0) for c in ids)
        setup = max(setup_s(ids), 0.0)
        if per_round <= 0 or math.isinf(left):
            affordable = more
        else:
            affordable = int(max(left - setup, 0.0) // per_round)
        rounds = min(more, affordable)
        if rounds < 1:
            continue
        step = Step(v, rounds, {c: n_ok.get(c, 0) + rounds for c in ids}, setup + rounds * per_round,
                    setup + more * per_round)
        missed = 1.0 + (spent or {}).get(v.id, 0) / (more * len(ids))
        rank = (step.per_decision_s * missed, step.verdict.id)
        if best is None or rank < best_rank:
            best, best_rank = step, rank
    return best


def account(verdicts: Sequence[ReportedVerdict], room: Mapping[str, int], trial_s: Callable[[str], float],
            ran_out: bool = True, cut: tuple[str, float | None] | None = None) -> list[dict[str, Any]]:
    """What became of each verdict under the budget: {id, text, verdict, status, words,
    more_repetitions, config_ids, seconds}. `seconds`: what deciding a left-open one would likely
    take at the measured trial times (its configurations' trials × more, set-ups not counted).
    `ran_out`: the budget (not an interruption) ended the run while such verdicts were open.
    `cut`: the budget ended the run inside its minimum (`cut_short`: why, and the rest of the
    minimum's estimate): every verdict not decided was left open by it, whatever it reads now."""
    out = []
    for v in verdicts:
        d = v.decision
        more = d.more if d else None
        ids = list(d.config_ids) if d else []
        seconds = more * sum(trial_s(c) for c in ids) if more is not None and ids else None
        if v.verdict in (HOLDS, DIFFERS):
            status, words = DECIDED, f"{v.verdict}, decided within the budget"
        elif cut is not None:
            status, seconds = LEFT_OPEN, cut[1]
            words = f"left open by the budget: {cut[0]}" + (
                f"; the rest of its minimum is estimated at ~{fmt_seconds(seconds)} (guest boots not counted)"
                if seconds else "")
        elif v.verdict == UNTESTABLE:
            status, words = NOT_TESTABLE, "not testable here: no repetition decides it on this machine"
        elif d is None or more is None:
            status, words = NO_MORE, ("undecided: more repetitions are unlikely to decide it (the estimate sits too "
                                      "close to the band's edge for its spread)")
        elif not ids:
            status, words = NO_CONFIGS, f"undecided: about {more} more repetition(s) would likely decide it"
        elif any(room.get(c, 0) < more for c in ids):
            status, words = AT_CAP, (f"undecided: about {more} more repetition(s) would likely decide it, beyond the "
                                     "study's max_repetitions (raise it to go on)")
        else:
            where = ", ".join(d.configurations) if d.configurations else f"{len(ids)} configuration(s)"
            status = LEFT_OPEN if ran_out else OPEN
            words = (("left open by the budget" if ran_out else "open (the run ended before its budget did)")
                     + f": about {more} more repetition(s) of {where} would likely decide it"
                     + (f" (~{fmt_seconds(seconds)} of trials at the measured times)" if seconds else ""))
        out.append({"id": v.id, "text": v.text, "verdict": v.verdict if v.verdict in (HOLDS, DIFFERS, UNDECIDED,
                                                                                       UNTESTABLE) else UNDECIDED,
                    "status": status, "words": words, "more_repetitions": more, "config_ids": ids,
                    "seconds": None if seconds is None else round(seconds, 1)})
    return out


def cut_short(doc: Mapping[str, Any], study: str) -> tuple[str, float | None] | None:
    """(why, the rest of its minimum's estimate in seconds) when a time budget ended the stored run
    `doc` before every configuration had its minimum (its first trial included), so what it could
    not measure was left open by the budget, not found untestable; None otherwise (no budget, the
    minimum done, or the run stopped for another reason)."""
    b = (doc.get("extra") or {}).get("budget")
    if not isinstance(b, dict) or not b.get("exhausted") or b.get("phase") not in ("minimum", None):
        return None
    trials = doc.get("trials") or []
    rest = b.get("minimum_s")
    rest_s = float(rest) if isinstance(rest, (int, float)) else None
    if not trials:
        return f"it ran out before the {study} study's first trial", rest_s
    ok = sum(t.get("status") == "ok" for t in trials)
    return f"it ran out inside the {study} study's minimum ({ok} trial(s) measured)", rest_s


def cheapest_claims_first(minimums: Mapping[str, float], claims: Mapping[str, int], order: Sequence[str]
                          ) -> list[str]:
    """The studies a reproduction's budget runs when it cannot afford every minimum: the fewest
    seconds of minimum per claim answered first (`minimums`: each study's estimate; `claims`: how
    many claims it answers), ties in the published `order`: the most claims decided per second."""
    return sorted(minimums, key=lambda n: (minimums[n] / max(claims.get(n, 0), 1), list(order).index(n)))


def cheapest_open_claim(studies: Mapping[str, tuple[Sequence[ReportedVerdict], Mapping[str, int],
                                                    Mapping[str, float]]]) -> tuple[float, str, str] | None:
    """Across a reproduction's studies (name -> its claims now, room under its cap per configuration,
    measured seconds per trial), the open claim more repetitions would likely decide at the least
    cost (`more × Σ` its configurations' trial times), within its study's cap: (seconds, study,
    claim id), or None when no claim is left that repetitions would decide."""
    best: tuple[float, str, str] | None = None
    for name, (verdicts, room, times) in studies.items():
        for v in verdicts:
            d = v.decision
            if not v.decidable or d is None or d.more is None or not d.config_ids \
                    or any(room.get(c, 0) < d.more for c in d.config_ids):
                continue  # more repetitions would not decide it, or not within the cap
            cost = d.more * sum(times.get(c, 0.0) for c in d.config_ids)
            if cost > 0 and (best is None or cost < best[0]):
                best = (cost, name, v.id)
    return best


def tight_share(minimum: float, left: float) -> float:
    """A study's share of a budget that cannot afford every minimum: its minimum's estimate with a
    margin for set-ups and storing (a quarter, and 10 s), when what is left affords the minimum;
    else nothing (its claims are left open by the budget: a minimum cut short answers none)."""
    left = max(left, 0.0)
    return min(minimum * 1.25 + 10.0, left) if minimum <= left else 0.0


def study_share(left: float, need: Mapping[str, float], name: str) -> float:
    """A reproduction's budget for study `name`, the next of the studies still to run (`need`: what
    each needs, its minimum's estimate). Enough for every minimum: what is left shared in proportion
    to need. Too little: each study in turn gets its whole minimum while what is left affords it,
    so the studies reached are answered instead of every one being cut inside its minimum (which
    answers nothing); the later studies' claims are left open."""
    left = max(left, 0.0)
    return max(left * need[name] / max(sum(need.values()), 1e-9), min(need[name], left))


def trial_times(doc: Mapping[str, Any]) -> dict[str, float]:
    """Median wall seconds of one trial per configuration id, from the stored trials (started,
    ended), every attempt counted: a failing attempt costs time too."""
    per: dict[str, list[float]] = defaultdict(list)
    for t in doc.get("trials") or []:
        a, b = t.get("started"), t.get("ended")
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b >= a:
            per[config_of(t)].append(float(b) - float(a))
    return {c: float(median(v)) for c, v in per.items()}


def repetitions_left(doc: Mapping[str, Any], max_repetitions: int) -> tuple[dict[str, int], dict[str, int]]:
    """(successful repetitions, room left under max_repetitions) per configuration id of a stored run."""
    ok: dict[str, int] = defaultdict(int)
    for t in doc.get("trials") or []:
        ok[config_of(t)] += t.get("status") == "ok"
    return dict(ok), {c: max(max_repetitions - n, 0) for c, n in ok.items()}


def fmt_seconds(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "–"
    if s >= 5400:
        return f"{s / 3600:.1f} h"
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"


def summary_words(budget: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    """One sentence: the budget, what was spent, how many verdicts it decided and left open."""
    decided = sum(r["status"] == DECIDED for r in rows)
    left = [r for r in rows if r["status"] == LEFT_OPEN]
    spent = f"spent {fmt_seconds(budget.get('spent_s'))} of {fmt_seconds(budget.get('seconds'))}"
    how = "; the budget ran out" if budget.get("exhausted") else ""
    text = f"budget: {spent}{how}"
    if rows:
        text += f"; {decided} verdict(s) decided within the budget, {len(left)} left open by it"
        if left:
            text += " (" + ", ".join(str(r["id"]) for r in left) + ")"
    return text


def section(budget: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> Section:
    """The report's 'Budget' section: what the budget spent, and each verdict decided or left open."""
    blocks: list[Note | Table] = [Note(summary_words(budget, rows), "warn" if budget.get("exhausted") else "info")]
    if budget.get("minimum_short"):
        blocks.append(Note(str(budget["minimum_short"]), "warn"))
    if rows:
        tag = lambda r: Tag(r["status"], STATUS_TONES.get(r["status"], "neutral"))  # noqa: E731
        blocks.append(Table("Verdicts under the budget",
                            ["verdict of", "verdict", "under the budget", "what it would take"],
                            [[r["text"] or r["id"], r["verdict"], tag(r), r["words"]] for r in rows]))
    steps = budget.get("steps") or []
    if steps:
        blocks.append(Table("Where the budget went after the minimum", ["spent on", "trials", "seconds"],
                            [[s.get("on"), s.get("trials"), round(float(s.get("seconds") or 0.0))] for s in steps]))
    after = ("then further rounds went first to the configurations behind verdicts still undecided that more "
             "repetitions would likely decide (the cheapest decision per second first), then to intervals still wider "
             "than the study's target" if rows else
             "then further rounds went to the configurations whose interval was still wider than the study's target "
             "(this run reports no verdicts to spend on)")
    return Section("Budget", blocks, intro=(
        f"This run had a time budget: every configuration first got its minimum repetitions, {after}; no round was "
        "started that the measured trial times said could not finish within the budget (docs/statistics.md, "
        "'Spending a time budget')."))
