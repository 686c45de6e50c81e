"""The base of every study's findings: what every report adds to a study's own findings.

A study's analysis returns a `Findings` subclass (its own fields, analysis/record.py); the report
(publish/document.py) adds, for every study alike, `repetitions` (per configuration: n, failures,
why it stopped), `metric_declarations` (what every value the trials hold means) and, for a run with
a time budget, `budget` (what it spent, each verdict decided or left open: analysis/budget_record.py).
All are left out of the JSON until set, as they were absent from the dictionaries before the report
added them.
"""

from __future__ import annotations

from typing import ClassVar

from iolab.analysis.budget_record import BudgetSection
from iolab.analysis.record import Record
from iolab.analysis.repetitions import ConfigRepetitions
from iolab.analysis.trials import MetricDeclarations


class Findings(Record):
    """A study's findings (subclassed per study), plus what every report adds."""

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"repetitions", "metric_declarations", "budget"})

    repetitions: list[ConfigRepetitions] | None = None
    metric_declarations: MetricDeclarations | None = None
    budget: BudgetSection | None = None
