"""A run under a time budget: the minimum first, then open verdicts, then intervals.

Without a budget the runner runs each target group to the end of its stopping rule
(analysis/plan.py). With one (`--budget DURATION`, or the `budget` of a quick study's [study]
table) it runs in three phases and never starts a target set-up, a round or a trial that the
measured times say cannot finish within what is left:

1. **minimum**: every configuration to `repetitions` successful trials, group by group. When the
   workloads' own estimate says the budget cannot even afford that, it is said before the first
   trial, with the estimate, and the rounds run while they fit.
2. **verdicts**: the verdicts the study reports (a `VerdictSource`, recomputed from the stored
   trials between rounds) that are undecided and could still be decided within max_repetitions,
   the most expected decisions per second first (analysis/budget.py `next_step`): up to `more`
   rounds of that verdict's configurations; a step is chosen anew after every round, and a
   target stays up while the best step lies on it.
3. **interval** (unless the study's `budget_on` is "verdicts", as the quick studies'): the
   ordinary rule (a configuration whose interval is still wider than ci_target, or whose
   run-order check trips), what is left shared equally among the target groups that still
   want trials.

It stops when nothing wants more or the budget is spent, and says which verdicts it decided
and which it left open (progress output, `extra.budget`, the reports).

Accounting: the budget is wall time, set-ups, boots and analysis between rounds included. It is
stored with the run (`extra.budget`: seconds, spent_s after every round), so `--resume` goes on
with what is left of the same budget (a new `--budget` replaces the total, what was spent still
counts).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from iolab.analysis import budget as spend
from iolab.analysis.plan import TargetGroup
from iolab.analysis.verdicts import ReportedVerdict
from iolab.core.model import Config

# run id -> the verdicts the study reports, recomputed from that run's stored trials
VerdictSource = Callable[[str], list[ReportedVerdict]]
EXTRA_KEY = "budget"


@dataclass(frozen=True)
class Budget:
    """A run's time budget and whose verdicts it spends on (None: only the interval rule).
    `hard`: the minimum stops at the budget too (`--budget`); otherwise the minimum always runs
    whole and the budget bounds what comes after it (a spec's `budget`, e.g. a quick study's).
    `seconds` None: the budget the run was stored with (resume)."""

    seconds: float | None
    verdicts: VerdictSource | None = None
    source: str = spend.STUDY_SOURCE
    hard: bool = True
    started: float | None = None  # time.monotonic() when the command began (else: when the run starts)
    intervals: bool = True  # after the open verdicts, also spend on intervals wider than ci_target
    # the caller has already said why this budget cannot afford the minimum (reproduce's "not
    # started" line): the run records it all the same but does not say it a second time
    shortfall_said: bool = False


class Runs(Protocol):
    """What the schedule asks of the runner (runner/runner.py implements it)."""

    def groups(self) -> list[TargetGroup]: ...
    def run_group(self, g: TargetGroup, wants: Callable[[Config], bool],
                  after_round: Callable[[TargetGroup], None] | None = None) -> int: ...
    def n_ok(self, c: Config) -> int: ...
    def room(self, c: Config) -> int: ...
    def runnable(self, c: Config) -> bool: ...
    def wants_more(self, c: Config) -> bool: ...
    def min_reps(self) -> int: ...
    def prior_s(self, c: Config) -> float: ...
    def message(self, text: str) -> None: ...
    def save(self, key: str, value: Any) -> None: ...
    @property
    def run_id(self) -> str: ...


@dataclass
class Clock:
    """Wall seconds spent against the budget, this session and earlier ones (resume)."""

    seconds: float
    spent_before: float = 0.0
    started: float = field(default_factory=time.monotonic)

    def spent(self) -> float:
        return self.spent_before + time.monotonic() - self.started

    def left(self) -> float:
        return self.seconds - self.spent()


class Schedule:
    """The budgeted run of one study (module docstring). The runner calls `affords` before every
    set-up, round and trial, and reports what each took (`trial_ran`, `setup_ran`)."""

    def __init__(self, budget: Budget):
        self.budget = budget
        self.clock = Clock(budget.seconds or 0.0)
        self.trial_times: dict[str, list[float]] = {}
        self.setup_times: dict[str, float] = {}
        self.ran_out = False
        self.phase = "minimum"
        self.sessions = 1
        self.steps: list[dict[str, Any]] = []
        self.minimum_short = ""
        self.minimum_s: float | None = None  # the workloads' estimate of what the minimum still needed at the start
        self.step: spend.Step | None = None
        self.until: float | None = None  # phase 3: where this group's share of the budget ends (spent seconds)
        self._runs: Runs | None = None

    # -- accounting the runner feeds ---------------------------------------------------------------
    def resume_from(self, stored: dict[str, Any] | None, given: bool) -> None:
        """Carry what earlier sessions spent; keep their total unless this session gave one."""
        if not stored:
            return
        spent = stored.get("spent_s")
        self.clock.spent_before = float(spent) if isinstance(spent, (int, float)) and spent > 0 else 0.0
        total = stored.get("seconds")
        if not given and isinstance(total, (int, float)) and total > 0:
            self.clock.seconds = float(total)
        self.sessions = int(stored.get("sessions") or 0) + 1
        self.steps = list(stored.get("steps") or [])

    def trial_ran(self, config_id: str, seconds: float) -> None:
        self.trial_times.setdefault(config_id, []).append(seconds)
        on_step = self.step is not None and config_id in self.step.targets
        on_intervals = self.phase == "interval" and self.step is None and self.steps and \
            self.steps[-1]["on"] == spend.INTERVALS_STEP
        if self.steps and (on_step or on_intervals):
            self.steps[-1]["trials"] += 1
            self.steps[-1]["seconds"] = round(self.steps[-1]["seconds"] + seconds, 1)

    def setup_ran(self, g: TargetGroup, seconds: float) -> None:
        """Set-up, the study's hook and teardown of one target: what entering it again costs."""
        self.setup_times[_gkey(g)] = seconds

    # -- what things cost ----------------------------------------------------------------------------
    def trial_s(self, config_id: str) -> float:
        xs = self.trial_times.get(config_id)
        if xs:
            return sorted(xs)[len(xs) // 2]
        runs = self._runs
        if runs is None:
            return 0.0
        c = next((c for g in runs.groups() for c in g.configs if c.id == config_id), None)
        return runs.prior_s(c) if c is not None else 0.0

    def round_s(self, configs: Sequence[Config]) -> float:
        return sum(self.trial_s(c.id) for c in configs)

    def setup_s(self, g: TargetGroup) -> float:
        return self.setup_times.get(_gkey(g), 0.0)

    def affords(self, seconds: float) -> bool:
        """Whether `seconds` more fit in the budget (and in this group's share, phase 3). A refusal
        by the budget itself marks it spent. A soft budget never stops the minimum."""
        if self.phase == "minimum" and not self.budget.hard:
            return True
        if seconds > self.clock.left():
            self.ran_out = True
            return False
        return self.until is None or self.clock.spent() + seconds <= self.until

    def affords_round(self, seconds: float) -> bool:
        """Whether a whole round fits. The minimum goes trial by trial instead (each trial must
        fit): its rounds are all needed, and the first repetitions of every configuration are
        worth more than a budget left unspent."""
        if self.phase == "minimum":
            return self.clock.left() > 0 or not self.budget.hard
        return self.affords(seconds)

    # -- the phases ------------------------------------------------------------------------------------
    def run(self, runs: Runs) -> None:
        self._runs = runs
        self.clock.started = self.budget.started or time.monotonic()
        try:
            self._up_front(runs)
            self._save(runs)
            for g in runs.groups():
                runs.run_group(g, lambda c: runs.runnable(c) and runs.n_ok(c) < runs.min_reps())
                self._save(runs)
            if any(runs.runnable(c) and runs.n_ok(c) < runs.min_reps() for g in runs.groups() for c in g.configs):
                return  # the minimum did not fit: nothing beyond it
            self.phase = "verdicts"
            self._spend_on_verdicts(runs)
            self.phase = "interval"
            if self.budget.intervals:
                self._spend_on_intervals(runs)
            self.phase = "done"
        finally:
            self.finish(runs)

    def _up_front(self, runs: Runs) -> None:
        need = [(c, runs.min_reps() - runs.n_ok(c)) for g in runs.groups() for c in g.configs
                if runs.runnable(c) and runs.n_ok(c) < runs.min_reps()]
        est = sum(k * self.trial_s(c.id) for c, k in need)
        left = self.clock.left()
        self.minimum_s = est
        head = (f"budget {spend.fmt_seconds(self.clock.seconds)}"
                + (f" ({spend.fmt_seconds(left)} left after earlier sessions)" if self.clock.spent_before else ""))
        if need and est > left:
            then = ("rounds run while they fit, the rest stays open" if self.budget.hard else
                    "the minimum runs whole all the same (the study's own budget bounds only what comes after it)")
            self.minimum_short = (f"the budget cannot afford the minimum: {len(need)} configuration(s) still need "
                                  f"{sum(k for _, k in need)} trial(s), estimated {spend.fmt_seconds(est)} (the "
                                  f"workloads' own estimates, set-ups and guest boots not counted) against "
                                  f"{spend.fmt_seconds(left)} left; {then}")
            if not self.budget.shortfall_said:
                runs.message(f"[yellow]{head}: {self.minimum_short}[/yellow]")
        else:
            after = [f"{self.budget.source} still undecided"] if self.budget.verdicts is not None else []
            after += ["intervals wider than the target"] if self.budget.intervals else []
            runs.message(f"{head}: the minimum ({sum(k for _, k in need)} trial(s)) is estimated at "
                         f"{spend.fmt_seconds(est)}"
                         + (f"; then repetitions go to {', then to '.join(after)}" if after else "; nothing after it"))

    def _verdicts(self, runs: Runs) -> list[ReportedVerdict]:
        if self.budget.verdicts is None:
            return []
        try:
            return list(self.budget.verdicts(runs.run_id))
        except Exception as exc:  # a verdict that cannot be computed must not end the run: the interval rule goes on
            runs.message(f"[yellow]budget: the verdicts could not be computed ({type(exc).__name__}: {exc}); "
                         "spending on intervals only[/yellow]")
            traceback.print_exc(limit=3)
            self.budget = Budget(self.budget.seconds, None, self.budget.source)
            return []

    def _plan(self, runs: Runs, up: TargetGroup | None) -> spend.Step | None:
        """The best step now; a target that is up (`up`) costs no set-up."""
        configs = {c.id: (g, c) for g in runs.groups() for c in g.configs}
        n_ok = {cid: runs.n_ok(c) for cid, (_, c) in configs.items()}
        room = {cid: runs.room(c) if runs.runnable(c) else 0 for cid, (_, c) in configs.items()}

        def setup(ids: Sequence[str]) -> float:
            gs = {_gkey(configs[i][0]): configs[i][0] for i in ids if i in configs}
            return sum(self.setup_s(g) for k, g in gs.items() if up is None or k != _gkey(up))

        left, verdicts = self.clock.left(), self._verdicts(runs)
        spent: dict[str, int] = {}
        for s in self.steps:
            spent[s["on"]] = spent.get(s["on"], 0) + int(s["trials"])
        step = spend.next_step(verdicts, n_ok, room, self.trial_s, setup, left, spent)
        if step is None and spend.next_step(verdicts, n_ok, room, self.trial_s, setup, float("inf")) is not None:
            self.ran_out = True  # something is decidable, and the budget cannot afford it
        return step

    def _spend_on_verdicts(self, runs: Runs) -> None:
        step = self._plan(runs, None)
        while step is not None and not self.ran_out:
            self._begin(runs, step)
            groups = [g for g in runs.groups() if any(c.id in step.targets for c in g.configs)]
            ran = 0
            for g in groups:
                ran += runs.run_group(g, self._step_wants(runs), self._after_round(runs, len(groups) == 1))
                self._save(runs)
                if self.step is not step:  # chosen again after a round (another verdict, or none)
                    break
            if not ran:
                break  # nothing could run (a set-up failed, nothing fits): do not loop
            step = self._plan(runs, None)
        self.step = None

    def _begin(self, runs: Runs, step: spend.Step) -> None:
        self.step = step
        self.steps.append({"on": step.verdict.id, "text": step.verdict.text, "trials": 0, "seconds": 0.0,
                           "planned_rounds": step.rounds})
        runs.message(f"budget: {spend.fmt_seconds(self.clock.left())} left; spending on {step.words()}")

    def _step_wants(self, runs: Runs) -> Callable[[Config], bool]:
        def wants(c: Config) -> bool:
            step = self.step
            return (step is not None and c.id in step.targets and runs.runnable(c)
                    and runs.n_ok(c) < step.targets[c.id] and runs.room(c) > 0)
        return wants

    def _after_round(self, runs: Runs, single_group: bool) -> Callable[[TargetGroup], None]:
        """After each round of a step on one target: choose again, with this target's set-up free.
        The same verdict goes on, or another whose configurations are all on this target starts;
        otherwise the step ends (the target is torn down and the next step goes elsewhere)."""
        def after(g: TargetGroup) -> None:
            self._save(runs)
            if not single_group:
                return  # a step across targets keeps its rounds balanced: chosen again once all of them ran
            nxt = self._plan(runs, g)
            here = {c.id for c in g.configs}
            if nxt is None or not set(nxt.targets) <= here:
                self.step = None
            elif self.step is not None and nxt.verdict.id == self.step.verdict.id:
                self.step = nxt
            else:
                self._begin(runs, nxt)
        return after

    def _spend_on_intervals(self, runs: Runs) -> None:
        counted = False
        while not self.ran_out:
            wanting = [g for g in runs.groups() if any(runs.wants_more(c) for c in g.configs)]
            if not wanting:
                return
            if not counted:  # what the interval rule spent is a step of its own in the accounting
                self.steps.append({"on": spend.INTERVALS_STEP, "text": "intervals still wider than the target",
                                   "trials": 0, "seconds": 0.0})
                counted = True
            ran = 0
            for i, g in enumerate(wanting):
                share = max(self.clock.left(), 0.0) / (len(wanting) - i)
                self.until = self.clock.spent() + share
                ran += runs.run_group(g, runs.wants_more)
                self.until = None
                self._save(runs)
                if self.ran_out:
                    return
            if not ran:
                self.ran_out = True  # every group wants more and none could afford a round
                return

    # -- what is said and stored -------------------------------------------------------------------------
    def _save(self, runs: Runs, verdicts: list[dict[str, Any]] | None = None) -> None:
        record: dict[str, Any] = {"seconds": round(self.clock.seconds, 1), "spent_s": round(self.clock.spent(), 1),
                                  "sessions": self.sessions, "phase": self.phase, "exhausted": self.ran_out,
                                  "hard": self.budget.hard, "source": self.budget.source, "steps": self.steps}
        if self.minimum_short:
            record["minimum_short"] = self.minimum_short
        if self.minimum_s is not None:
            record["minimum_s"] = round(self.minimum_s, 1)
        if verdicts is not None:
            record["verdicts"] = verdicts
        try:
            runs.save(EXTRA_KEY, record)
        except Exception as exc:  # the accounting is advice: a store hiccup must not end the run
            runs.message(f"[yellow]budget: could not store the accounting ({exc})[/yellow]")

    def finish(self, runs: Runs) -> list[dict[str, Any]]:
        """Store and say which verdicts the budget decided and which it left open."""
        room = {c.id: runs.room(c) if runs.runnable(c) else 0 for g in runs.groups() for c in g.configs}
        cut = None
        if self.ran_out and self.phase == "minimum":
            ok = sum(runs.n_ok(c) for g in runs.groups() for c in g.configs)
            cut = ((f"it ran out inside the minimum ({ok} trial(s) measured)" if ok else
                    "it ran out before the first trial"), self.minimum_s)
        rows = spend.account(self._verdicts(runs), room, self.trial_s, ran_out=self.ran_out or self.phase == "done",
                             cut=cut)
        self._save(runs, rows)
        budget = {"seconds": self.clock.seconds, "spent_s": self.clock.spent(), "exhausted": self.ran_out}
        runs.message(spend.summary_words(budget, rows))
        for r in rows:
            if r["status"] == spend.LEFT_OPEN:
                runs.message(f"  [yellow]{r['id']}[/yellow]: {r['words']}")
        return rows


def _gkey(g: TargetGroup) -> str:
    return repr(sorted(g.target.items()))
