"""`iolab push`: one run copied from one results store into another, as it is.

The run record (times, status, run-level data) and every trial with its raw output, in
saving order, through the same `Store` operations a run uses: `put_run` replaces a run of
the same id and origin and `save_trial` replaces a trial of the same id (keeping its place),
so a push repeated, or resumed after a failure, leaves exactly one copy. A run of that id from
another origin (role or host: a colleague's, or a crafted one) is refused unless forced, and a
forced replacement keeps the old run in the target's history tables; in a PostgreSQL store the
database itself (row-level security) refuses a role that changes another role's run.
"""

from __future__ import annotations

from dataclasses import dataclass

from iolab.store.base import RunRecord, Store


@dataclass
class Pushed:
    run_id: str
    trials: int
    status: str
    origin: tuple[str | None, str | None]  # (role, host) the target records
    replaced: RunRecord | None  # the run of another origin a forced push replaced


def push_run(source: Store, target: Store, rec: RunRecord, force: bool = False) -> Pushed:
    """Copy run `rec` of `source` into `target`. The run record goes first (trials refer to it) and
    again last (saving a trial touches `updated`), so the copy is the run as it was."""
    replaced = target.put_run(rec, force)
    trials = source.trials(rec.id)
    for t in trials:
        target.save_trial(rec.id, t, source.raw(rec.id, t.trial_id))
    target.put_run(rec)
    return Pushed(rec.id, len(trials), rec.status, target.origin_of(rec), replaced)
