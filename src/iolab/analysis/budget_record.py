"""The time budget's section of a study's findings (`findings.budget`), typed once for every study.

A run with a time budget stores its accounting with the run (`extra.budget`, runner/schedule.py;
a reproduction's its shares, reproduce/session.py), and every report adds it to the study's
findings with each verdict decided or left open (publish/document.py; a reproduction's page its
claims, reproduce/page.py). The findings are typed and parsed back with `extra="forbid"`
(analysis/record.py), so the section is declared here, on the `Findings` base, once: a study's own
findings model never has to know about budgets, and a budgeted run's stored findings read back
like any other (a study model without it answered a ValidationError on the reproduction page).

Every key is optional except where every writer sets it: the runner's record, a reproduction's
and a page's are the same section with different parts filled in (docs/results.md).
"""

from __future__ import annotations

from typing import ClassVar

from iolab.analysis.record import Record


class BudgetStep(Record):
    """Where the budget went after the minimum: one verdict's rounds, or the interval rule's."""

    on: str
    text: str | None = None
    trials: int = 0
    seconds: float = 0.0
    planned_rounds: int | None = None


class BudgetVerdict(Record):
    """What the budget did with one verdict (analysis/budget.py `account`): decided, left open (with
    what it would take), or why more repetitions would not help."""

    id: str
    text: str | None = None
    verdict: str
    status: str
    words: str
    more_repetitions: int | None = None
    config_ids: list[str] = []
    seconds: float | None = None
    study: str | None = None       # a reproduction page's row: the study that answers the claim
    reference: str | None = None   # ... and the published study it comes from


class StudyBudget(Record):
    """One study's budget as a reproduction page sums it up."""

    seconds: float | None = None
    spent_s: float | None = None
    exhausted: bool | None = None
    hard: bool | None = None
    reached: bool | None = None    # False: the reproduction's budget ended before this study's first trial
    quick: bool | None = None      # the study ran its quick matrix because the full one could not fit


class BudgetSection(Record):
    """`findings.budget` (docs/results.md): the budget, what it spent, and each verdict's fate."""

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset()

    seconds: float | None = None
    spent_s: float | None = None
    exhausted: bool | None = None
    hard: bool | None = None
    sessions: int | None = None
    phase: str | None = None
    source: str | None = None
    steps: list[BudgetStep] = []
    minimum_short: str | None = None
    minimum_s: float | None = None                 # the minimum's estimate at the session's start (seconds)
    verdicts: list[BudgetVerdict] = []
    children: dict[str, float] | None = None      # a reproduction's record: each study's share (seconds)
    studies: dict[str, StudyBudget] | None = None  # a reproduction page: each study's budget
    per_study: bool | None = None                  # a page whose quick studies each had their own budget
    plan: str | None = None                        # a reproduction: how the budget was shared (matrices, order)
    reached: bool | None = None                    # a study's run: False when its budget ended before any trial
