"""Running a reproduction: the five reference studies, one after another, in one results store.

A reproduction is a run of its own (study "reproduce", no trials) whose `extra.children` maps
each built-in study to the run that measures it. Every child is an ordinary run, stored trial
by trial; so a reproduction resumes like any run: finished children are kept, an interrupted
child is resumed, missing ones are started. Its page is rendered from the stored children
(reproduce/page.py), after every child, so a partial reproduction already shows what it has.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from iolab.core.errors import IolabError
from iolab.report.document import REPRODUCE, analysis_of, write_html
from iolab.reproduce.plan import RUN_ORDER
from iolab.runner.manifest import environment
from iolab.runner.runner import Runner, new_run_id
from iolab.store.base import RunRecord, Store
from iolab.studies import builtin
from iolab.studies.spec import StudySpec, from_dict

NAME = REPRODUCE


def child_spec(name: str, quick: bool) -> tuple[StudySpec, Any]:
    """The built-in study exactly as `iolab study NAME [--quick]` runs it, and its hook."""
    mod = builtin.get(name)
    return from_dict(mod.build(quick), f"builtin:{name}", {"quick": quick}), getattr(mod, "before_group", None)


def plan_lines(quick: bool, console: Console) -> list[str]:
    """--dry-run: what each study would run; nothing is created."""
    lines = [f"reproduce{' --quick' if quick else ''}: {len(RUN_ORDER)} studies, one results store, one page"]
    for name in RUN_ORDER:
        spec, hook = child_spec(name, quick)
        runner = Runner(spec, None, console, before_group=hook)  # type: ignore[arg-type]  # a plan needs no store
        runner.instantiate()
        lines.append(f"== {name}")
        lines += [f"   {line}" for line in runner.dry_run_lines()[:3]]
    return lines


class Reproduction:
    """One reproduction in a store: start it, or pick it up again."""

    def __init__(self, store: Store, console: Console, on_child_done: Callable[[str, Path], None] | None = None):
        self.store = store
        self.console = console
        self.on_child_done = on_child_done
        self.run_id = ""
        self.quick = False
        self.children: dict[str, str] = {}

    def start(self, quick: bool) -> str:
        self.quick = quick
        self.run_id = new_run_id(NAME)
        spec = {"study": {"name": NAME, "analysis": NAME, "description": "the five reference studies R1–R5"}}
        self.store.create_run(self.run_id, NAME, f"builtin:{NAME}", spec, {"quick": quick}, environment())
        return self.run_id

    def resume(self, ref: str) -> str:
        rec = self.store.resolve(ref)
        if analysis_of(rec) != REPRODUCE:
            raise IolabError(f"{rec.id} is a run of {rec.study}, not a reproduction: resume it with "
                             f"`iolab run --resume {rec.id}`")
        self.run_id, self.quick = rec.id, bool(rec.options.get("quick"))
        self.children = dict(rec.extra.get("children") or {})
        return self.run_id

    def run(self) -> str:
        """Every study that is not complete yet; returns the reproduction's status."""
        try:
            for name in RUN_ORDER:
                self._study(name)
        finally:
            status = self._status()
            self.store.set_status(self.run_id, status)
        return status

    def _study(self, name: str) -> None:
        existing = self.children.get(name)
        if existing and self.store.resolve(existing).status == "complete":
            return
        spec, hook = child_spec(name, self.quick)
        runner = Runner(spec, self.store, self.console, before_group=hook)
        runner.instantiate()
        run_id = runner.start(existing)
        self.children[name] = run_id
        self.store.set_extra(self.run_id, "children", self.children)
        self.console.print(f"[bold]{name}[/bold]: run {run_id}" + (" (resumed)" if existing else ""))
        try:
            runner.run()
        finally:
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
