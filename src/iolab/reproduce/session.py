"""Running a reproduction: the five reference studies, one after another, in one results store.

A reproduction is a run of its own (study "reproduce", no trials) whose `extra.children` maps
each built-in study to the run that measures it. Every child is an ordinary run, stored trial
by trial; so a reproduction resumes like any run: finished children are kept, an interrupted
child is resumed, missing ones are started. Its page is rendered from the stored children
(reproduce/page.py), after every child, so a partial reproduction already shows what it has.

A time budget (`--budget`) is the whole reproduction's: each study in turn gets a share of
what is left, in proportion to what it needs (its quick budget, else its workloads' estimate),
so a study that decides its claims early leaves the rest to the studies after it. Within its
share a study spends repetitions on its claims that are still undecided first (runner/schedule.py),
recomputed from the stored runs between rounds. The accounting is stored (`extra.budget`), and
a resumed reproduction goes on with what is left.
"""

from __future__ import annotations

import time
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


def child_spec(name: str, quick: bool) -> tuple[StudySpec, Any]:
    """The built-in study exactly as `iolab study NAME [--quick]` runs it, and its hook."""
    mod = builtin.get(name)
    return from_dict(mod.build(quick), f"builtin:{name}", {"quick": quick}), getattr(mod, "before_group", None)


def plan_lines(quick: bool, console: Console, budget: float | None = None) -> list[str]:
    """--dry-run: what each study would run (and, under a budget, how it is shared); nothing is created."""
    lines = [f"reproduce{' --quick' if quick else ''}: {len(RUN_ORDER)} studies, one results store, one page"]
    if budget:
        lines.append(f"budget: {spend.fmt_seconds(budget)} of wall time for the whole reproduction, shared among the "
                     "studies in turn in proportion to what each needs; in each, the minimum first, then repetitions "
                     "where a claim is still undecided; the page says which claims it decided and which it left open "
                     f"(the studies' minimums are estimated at {spend.fmt_seconds(minimum_seconds(quick, console))}, "
                     "guest boots not counted)")
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
        self._docs: dict[str, dict[str, Any]] = {}  # finished children's documents, by run id

    def start(self, quick: bool, budget: float | None = None) -> str:
        self.quick = quick
        self.run_id = new_run_id(NAME)
        spec = {"study": {"name": NAME, "analysis": NAME, "description": "the five reference studies R1–R5"}}
        self.store.create_run(self.run_id, NAME, f"builtin:{NAME}", spec, {"quick": quick}, environment())
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
            for name in RUN_ORDER:
                self._study(name)
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
                                                     "source": spend.CLAIMS_SOURCE, "children": self.shares})

    def _pending(self) -> list[str]:
        return [n for n in RUN_ORDER if not ((c := self.children.get(n)) and self.store.resolve(c).status
                                             == "complete")]

    def _budget_for(self, name: str, spec: StudySpec, existing: str | None) -> Budget | None:
        """This study's budget: its share of what is left of the reproduction's (in proportion to
        its need among the studies still to run, at least its minimum while what is left affords it,
        never above its own quick budget), else its own."""
        verdicts = self._claims_source(name)
        intervals = spec.settings.budget_on == "verdicts+intervals"
        if self.clock is None:
            own = spec.settings.budget
            return Budget(own, verdicts, spend.CLAIMS_SOURCE, hard=False, intervals=intervals) if own else None
        need = {n: self._need(n) for n in self._pending()}
        share = spend.study_share(self.clock.left(), need, name)
        if spec.settings.budget:
            share = min(share, spec.settings.budget)
        self.shares[name] = round(share, 1)
        self._save_budget()
        before = self.store.resolve(existing).extra.get(EXTRA_KEY) if existing else None
        spent_before = before.get("spent_s") if isinstance(before, dict) else None
        # a resumed study's own accounting counts its earlier sessions: its total is those plus its share now
        total = share + (float(spent_before) if isinstance(spent_before, (int, float)) else 0.0)
        return Budget(max(total, 1.0), verdicts, spend.CLAIMS_SOURCE, hard=True, intervals=intervals)

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

    def _study(self, name: str) -> None:
        existing = self.children.get(name)
        if existing and self.store.resolve(existing).status == "complete":
            return
        spec, hook = child_spec(name, self.quick)
        runner = Runner(spec, self.store, self.console, before_group=hook)
        runner.instantiate()
        runner.budget = self._budget_for(name, spec, existing)
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
