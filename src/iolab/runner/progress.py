"""Progress on long work: a live bar on a terminal, one plain line per trial elsewhere (CI logs)."""

from __future__ import annotations

import sys
import time
from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class Reporter(Protocol):
    done: int  # trials finished so far: the runner adds what remains to it for a new total

    def start(self, total: int) -> None: ...
    def set_total(self, total: int) -> None: ...
    def trial_started(self, label: str) -> None: ...
    def trial_done(self, label: str, outcome: str) -> None: ...
    def message(self, text: str) -> None: ...
    def stop(self) -> None: ...


class LineReporter:
    """For logs: 'trial k/n label: outcome (elapsed, ~remaining)'."""

    def __init__(self, console: Console):
        self.console = console
        self.done = 0
        self.total = 0
        self.t0 = time.monotonic()

    def start(self, total: int) -> None:
        self.total = total
        self.t0 = time.monotonic()

    def set_total(self, total: int) -> None:
        self.total = total

    def trial_started(self, label: str) -> None:
        pass

    def trial_done(self, label: str, outcome: str) -> None:
        self.done += 1
        el = time.monotonic() - self.t0
        left = el / self.done * max(self.total - self.done, 0)
        self.console.print(f"trial {self.done}/{self.total} {label}: {outcome} "
                           f"[dim](elapsed {_hms(el)}, ~{_hms(left)} left)[/dim]", highlight=False,
                           soft_wrap=True)

    def message(self, text: str) -> None:
        self.console.print(text, highlight=False, soft_wrap=True)

    def stop(self) -> None:
        pass


class BarReporter(LineReporter):
    """A live bar with trial k of n, elapsed and estimate; finished trials scroll above it."""

    def __init__(self, console: Console):
        super().__init__(console)
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("eta"),
                                 TimeRemainingColumn(), console=console, transient=True)
        self.task: TaskID | None = None  # the bar's task, from start() on

    def start(self, total: int) -> None:
        super().start(total)
        self.progress.start()
        self.task = self.progress.add_task("starting", total=total)

    def set_total(self, total: int) -> None:
        super().set_total(total)
        if self.task is not None:
            self.progress.update(self.task, total=total)

    def trial_started(self, label: str) -> None:
        if self.task is not None:
            self.progress.update(self.task, description=label[:60])

    def trial_done(self, label: str, outcome: str) -> None:
        super().trial_done(label, outcome)
        if self.task is not None:
            self.progress.update(self.task, advance=1)

    def stop(self) -> None:
        self.progress.stop()


def reporter_for(console: Console) -> Reporter:
    return BarReporter(console) if console.is_terminal and sys.stdout.isatty() else LineReporter(console)


def _hms(s: float) -> str:
    s = int(s)
    return f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"
