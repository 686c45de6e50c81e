"""Running a reproduction: the five reference studies, one after another, in one results store.

A reproduction is a run of its own (study "reproduce", no trials) whose `extra.children` maps
each built-in study to the run that measures it. Every child is an ordinary run, stored trial
by trial; so a reproduction resumes like any run: finished children are kept, an interrupted
child is resumed, missing ones are started. Its page is rendered from the stored children
(reproduce/page.py), after every child, so a partial reproduction already shows what it has.

A time budget (`--budget`) is the whole reproduction's (docs/reproduce.md, "A time budget"):

* when it affords every study's minimum (the workloads' estimate), the studies run in the
  published order, each with a share of what is left in proportion to what it needs, so a study
  that decides its claims early leaves the rest to the studies after it;
* when it does not, the claims that can still be decided come first: the studies run cheapest
  claim first (the minimum's estimate per claim it answers), each with its minimum (and a margin
  for set-ups); a study whose minimum no longer fits is not started (its claims are left open by
  the budget, with what they would take), rather than cut inside a minimum that answers nothing.
  (Which matrices: `iolab reproduce --budget` without `--quick` runs the quick matrices when the
  full ones' minimum cannot fit, cli.py.)
* then, while time is left, it goes to the open claims that more repetitions would likely decide,
  across the studies already run, the cheapest decision first: that study's run is resumed with
  a budget for that decision (runner/schedule.py spends it on its open claims).

Within its share a study spends repetitions on its claims that are still undecided first
(runner/schedule.py), recomputed from the stored runs between rounds. The accounting is stored
(`extra.budget`), and a resumed reproduction goes on with what is left.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from iolab.analysis import budget as spend
from iolab.analysis.verdicts import ReportedVerdict
from iolab.core.errors import IolabError
from iolab.publish.document import REPRODUCE, analysis_of, results_document, write_html
from iolab.reproduce import claims
from iolab.reproduce.plan import RUN_ORDER
from iolab.runner.manifest import environment
from iolab.runner.runner import Runner, new_run_id
from iolab.runner.schedule import EXTRA_KEY, Budget, Clock
from iolab.spec.study import StudySpec, from_dict
from iolab.store.base import RunRecord, Store
from iolab.studies import builtin

NAME = REPRODUCE


def child_spec(name: str, quick: bool, budgeted: bool = False) -> tuple[StudySpec, Any]:
    """The built-in study exactly as `iolab study NAME [--quick]` runs it, and its hook. `budgeted`
    (a reproduction with a time budget): a quick matrix keeps the full study's repetition cap, so
    the budget, not the quick cap of 3, decides how far an open claim is followed (--quick without
    a budget stays exactly 3 repetitions)."""
    mod = builtin.get(name)
    raw = mod.build(quick)
    if quick and budgeted:
        cap = (mod.build(False).get("study") or {}).get("max_repetitions")
        if isinstance(cap, int):
            raw = {**raw, "study": {**raw["study"], "max_repetitions": max(cap, raw["study"].get("repetitions", 1))}}
    return from_dict(raw, f"builtin:{name}", {"quick": quick}), getattr(mod, "before_group", None)


def plan_lines(quick: bool, console: Console, budget: float | None = None) -> list[str]:
    """--dry-run: what each study would run (and, under a budget, how it is shared); nothing is created."""
    lines = [f"reproduce{' --quick' if quick else ''}: {len(RUN_ORDER)} studies, one results store, one page"]
    if budget:
        minimum = minimum_seconds(quick, console)
        how = ("shared among the studies in turn in proportion to what each needs; in each, the minimum first, then "
               "repetitions where a claim is still undecided" if minimum <= budget else
               "too little for every study's minimum: the studies run cheapest claim first, each only while its "
               "minimum fits, then the rest goes to open claims across them, cheapest decision first")
        lines.append(f"budget: {spend.fmt_seconds(budget)} of wall time for the whole reproduction, {how}; the page "
                     "says which claims it decided and which it left open (the studies' minimums are estimated at "
                     f"{spend.fmt_seconds(minimum)}, guest boots not counted)")
    for name, runner in _plan_runners(quick, console):
        lines.append(f"== {name}")
        lines += [f"   {line}" for line in runner.dry_run_lines()[:3]]
    return lines


def minimum_seconds(quick: bool, console: Console) -> float:
    """The workloads' own estimate of every study's minimum repetitions (set-ups and guest boots
    not counted): what a --budget must at least afford."""
    total = 0.0
    for name in RUN_ORDER:
        spec, hook = child_spec(name, quick)
        runner = Runner(spec, None, console, before_group=hook)  # type: ignore[arg-type]  # a plan needs no store
        try:
            runner.instantiate()
        except IolabError:  # it cannot run here: its own run says so, and it costs next to nothing
            continue
        total += runner.estimate_seconds()
    return total


def _plan_runners(quick: bool, console: Console) -> list[tuple[str, Runner]]:
    out = []
    for name in RUN_ORDER:
        spec, hook = child_spec(name, quick)
        runner = Runner(spec, None, console, before_group=hook)  # type: ignore[arg-type]  # a plan needs no store
        runner.instantiate()
        out.append((name, runner))
    return out


class Reproduction:
    """One reproduction in a store: start it, or pick it up again."""

    def __init__(self, store: Store, console: Console, on_child_done: Callable[[str, Path], None] | None = None,
                 started: float | None = None):
        self.store = store
        self.console = console
        self.on_child_done = on_child_done
        self.run_id = ""
        self.quick = False
        self.children: dict[str, str] = {}
        self.clock: Clock | None = None  # the whole reproduction's budget, when it has one
        self.started = started if started is not None else time.monotonic()
        self.shares: dict[str, float] = {}
        self.plan = ""  # how a budget that cannot afford every minimum is shared (stored, on the page)
        self._tight = False  # that budget: cheapest claim first, each study its minimum or nothing
        self._minimums: dict[str, float] = {}
        self._docs: dict[str, dict[str, Any]] = {}  # finished children's documents, by run id

    def start(self, quick: bool, budget: float | None = None, quick_by_budget: bool = False) -> str:
        """A new reproduction; `quick_by_budget`: the quick matrices because the budget cannot afford
        the full ones' minimum (said on the page)."""
        self.quick = quick
        self.run_id = new_run_id(NAME)
        spec = {"study": {"name": NAME, "analysis": NAME, "description": "the five reference studies R1–R5"}}
        options = {"quick": quick, **({"quick_by_budget": True} if quick_by_budget else {})}
        self.store.create_run(self.run_id, NAME, f"builtin:{NAME}", spec, options, environment())
        if budget:
            self.clock = Clock(budget, 0.0, self.started)
            self._save_budget()
        return self.run_id

    def resume(self, ref: str, budget: float | None = None) -> str:
        """Pick a reproduction up again; its budget goes on with what earlier sessions spent (a
        given `budget` replaces the total)."""
        rec = self.store.resolve(ref)
        if analysis_of(rec) != REPRODUCE:
            raise IolabError(f"{rec.id} is a run of {rec.study}, not a reproduction: resume it with "
                             f"`iolab run --resume {rec.id}`")
        self.run_id, self.quick = rec.id, bool(rec.options.get("quick"))
        self.children = dict(rec.extra.get("children") or {})
        found = rec.extra.get(EXTRA_KEY)
        stored: dict[str, Any] = found if isinstance(found, dict) else {}
        total = budget or stored.get("seconds")
        if isinstance(total, (int, float)) and total > 0:
            spent = stored.get("spent_s")
            self.clock = Clock(float(total), float(spent) if isinstance(spent, (int, float)) else 0.0, self.started)
            self.shares = dict(stored.get("children") or {})
            self._save_budget()
        return self.run_id

    def run(self) -> str:
        """Every study that is not complete yet; returns the reproduction's status."""
        try:
            for name in self._order():
                self._study(name)
            if self.clock is not None:
                self._spend_on_open_claims()
        finally:
            status = self._status()
            self.store.set_status(self.run_id, status)
            if self.clock is not None:
                self._save_budget()
        return status

    def _save_budget(self) -> None:
        assert self.clock is not None
        self.store.set_extra(self.run_id, EXTRA_KEY, {"seconds": round(self.clock.seconds, 1),
                                                     "spent_s": round(self.clock.spent(), 1),
                                                     "exhausted": self.clock.left() <= 0, "hard": True,
                                                     "source": spend.CLAIMS_SOURCE, "children": self.shares,
                                                     **({"plan": self.plan} if self.plan else {})})

    def _order(self) -> list[str]:
        """The published order when the budget affords every pending study's minimum (or there is no
        budget); else cheapest claim first (module docstring), each study's minimum fixed now."""
        pending = self._pending()
        if self.clock is None:
            return RUN_ORDER
        self._minimums = {n: self._minimum(n) for n in pending}
        self._tight = sum(self._minimums.values()) > self.clock.left()
        if not self._tight:
            return RUN_ORDER
        order = spend.cheapest_claims_first(self._minimums, Counter(c.study for c in claims.CLAIMS), RUN_ORDER)
        self.plan = ("the budget cannot afford every study's minimum: the studies run cheapest claim first ("
                     + ", ".join(f"{n} ~{spend.fmt_seconds(self._minimums[n])}" for n in order)
                     + "), each only when its minimum still fits; the rest goes to open claims, cheapest first")
        self.console.print(f"[yellow]{self.plan}[/yellow]")
        self._save_budget()
        return order

    def _minimum(self, name: str) -> float:
        """The workloads' estimate of a study's minimum repetitions (set-ups and boots not counted)."""
        spec, hook = child_spec(name, self.quick)
        runner = Runner(spec, None, self.console, before_group=hook)  # type: ignore[arg-type]  # no store needed
        try:
            runner.instantiate()
        except IolabError:  # it cannot run here: its own run says so at once
            return 1.0
        return max(runner.estimate_seconds(), 1.0)

    def _spend_on_open_claims(self) -> None:
        """What is left goes to the open claims more repetitions would likely decide, across the
        studies run, the cheapest decision first; each step resumes that study's run with a budget
        for that decision. Ends when none is left that the budget affords."""
        tried: dict[str, int] = {}
        while self.clock is not None and self.clock.left() > 5.0:
            studies = {}
            for name, run_id in self.children.items():
                doc = results_document(self.store, self.store.resolve(run_id))
                if tried.get(name, 0) >= 3 or not doc["trials"]:
                    continue
                cap = child_spec(name, self.quick, budgeted=True)[0].settings.max_repetitions
                studies[name] = (self._claims_source(name)(run_id), spend.repetitions_left(doc, cap)[1],
                                 spend.trial_times(doc))
            best = spend.cheapest_open_claim(studies)
            if best is None or best[0] > self.clock.left():
                self._say_unspent()
                return
            cost, name, claim = best
            tried[name] = tried.get(name, 0) + 1
            self.console.print(f"[bold]{name}[/bold]: {spend.fmt_seconds(self.clock.left())} left; {claim}, the "
                               f"cheapest open claim, would likely be decided in ~{spend.fmt_seconds(cost)}")
            self._study(name, share=min(self.clock.left(), cost * 1.5 + 5.0), resume_complete=True)

    def _say_unspent(self) -> None:
        """Ending early is said, with why: what is left affords no minimum and no decision."""
        assert self.clock is not None
        left = self.clock.left()
        if left <= 5.0 or not self._tight:
            return
        waiting = {n: m for n, m in self._minimums.items() if not self._reached(n)}
        cheapest = min(waiting, key=waiting.__getitem__) if waiting else None
        words = (f"{spend.fmt_seconds(left)} of the budget left unspent: it affords no further decision (no open claim "
                 "that more repetitions would likely decide within its study's cap"
                 + (f"; the cheapest study not run, {cheapest}, needs ~{spend.fmt_seconds(waiting[cheapest])} for its "
                    "minimum" if cheapest else "") + ")")
        self.console.print(f"[yellow]{words}[/yellow]")
        self.plan = f"{self.plan}; {words}" if self.plan else words
        self._save_budget()

    def _reached(self, name: str) -> bool:
        run_id = self.children.get(name)
        return bool(run_id and self.store.trials(run_id))

    def _pending(self) -> list[str]:
        return [n for n in RUN_ORDER if not ((c := self.children.get(n)) and self.store.resolve(c).status
                                             == "complete")]

    def _budget_for(self, name: str, spec: StudySpec, existing: str | None, share: float | None = None
                    ) -> Budget | None:
        """This study's budget: its share of what is left of the reproduction's (in proportion to
        its need among the studies still to run, at least its minimum while what is left affords it,
        never above its own quick budget; when the budget cannot afford every minimum, its minimum
        and a margin, or nothing when that no longer fits), else its own. `share`: given (a step
        spent on one open claim: the study's open claims only, no intervals)."""
        verdicts = self._claims_source(name)
        given = share is not None
        # a budget that affords every minimum also narrows intervals; a tight one keeps its rest for open claims
        intervals = spec.settings.budget_on == "verdicts+intervals" and share is None and not self._tight
        if self.clock is None:
            own = spec.settings.budget
            return Budget(own, verdicts, spend.CLAIMS_SOURCE, hard=False, intervals=intervals) if own else None
        if share is None and self._tight:
            share = spend.tight_share(self._minimums.get(name) or self._minimum(name), self.clock.left())
        elif share is None:
            need = {n: self._need(n) for n in self._pending()}
            share = spend.study_share(self.clock.left(), need, name)
        if spec.settings.budget:
            share = min(share, spec.settings.budget)
        # a step on one open claim adds to what the study had (its page row: the study's whole share)
        self.shares[name] = round(share + (self.shares.get(name, 0.0) if given else 0.0), 1)
        self._save_budget()
        before = self.store.resolve(existing).extra.get(EXTRA_KEY) if existing else None
        spent_before = before.get("spent_s") if isinstance(before, dict) else None
        # a resumed study's own accounting counts its earlier sessions: its total is those plus its share now
        total = share + (float(spent_before) if isinstance(spent_before, (int, float)) else 0.0)
        return Budget(max(total, 0.1), verdicts, spend.CLAIMS_SOURCE, hard=True, intervals=intervals)

    def _need(self, name: str) -> float:
        """What a study needs, to weigh its share: its quick budget, else its workloads' estimate."""
        spec, hook = child_spec(name, self.quick)
        if spec.settings.budget:
            return float(spec.settings.budget)
        runner = Runner(spec, None, self.console, before_group=hook)  # type: ignore[arg-type]  # no store needed
        try:
            runner.instantiate()
        except IolabError:  # it cannot run here: its own run will say so; weigh it like a short study
            return 60.0
        return max(runner.estimate_seconds(), 1.0)

    def _claims_source(self, name: str) -> Callable[[str], list[ReportedVerdict]]:
        """run id -> the claims `name` answers, from that run as stored now and the finished studies."""
        def source(run_id: str) -> list[ReportedVerdict]:
            docs = {n: self._doc(rid) for n, rid in self.children.items() if n != name}
            docs[name] = results_document(self.store, self.store.resolve(run_id))
            return claims.study_verdicts(name, docs, self.quick)
        return source

    def _doc(self, run_id: str) -> dict[str, Any]:
        if run_id not in self._docs:
            self._docs[run_id] = claims.with_findings(results_document(self.store, self.store.resolve(run_id)),
                                                      self.store.resolve(run_id).study) or {}
        return self._docs[run_id]

    def _study(self, name: str, share: float | None = None, resume_complete: bool = False) -> None:
        existing = self.children.get(name)
        if existing and self.store.resolve(existing).status == "complete" and not resume_complete:
            return
        spec, hook = child_spec(name, self.quick, budgeted=self.clock is not None)
        runner = Runner(spec, self.store, self.console, before_group=hook)
        runner.instantiate()
        runner.budget = self._budget_for(name, spec, existing, share)
        if self._tight and share is None and self.shares.get(name) == 0.0 and self.clock is not None:
            self.console.print(f"[yellow]{name}: not started: its minimum (~"
                               f"{spend.fmt_seconds(self._minimums.get(name))}, the workloads' estimate) does not "
                               f"fit the {spend.fmt_seconds(self.clock.left())} left; its claims are left open by "
                               "the budget (`iolab reproduce --resume` with more time runs it)[/yellow]")
        run_id = runner.start(existing)
        self.children[name] = run_id
        self.store.set_extra(self.run_id, "children", self.children)
        self.console.print(f"[bold]{name}[/bold]: run {run_id}" + (" (resumed)" if existing else ""))
        try:
            runner.run()
        finally:
            self._docs.pop(run_id, None)
            if self.clock is not None:
                self._save_budget()
            path, _, _ = write_html(self.store, self.store.resolve(run_id))
            if self.on_child_done:
                self.on_child_done(name, path)

    def _status(self) -> str:
        states = [self.store.resolve(c).status if (c := self.children.get(n)) else "missing" for n in RUN_ORDER]
        if all(s == "complete" for s in states):
            return "complete"
        return "partial" if any(s in ("complete", "partial") for s in states) else "failed"

    def record(self) -> RunRecord:
        return self.store.resolve(self.run_id)
