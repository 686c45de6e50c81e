"""`iolab push`: one run copied from one results store into another, as it is.

The run record (times, status, run-level data) and every trial with its raw output, in
saving order, through the same `Store` operations a run uses: `put_run` replaces a run of
the same id and `save_trial` replaces a trial of the same id (keeping its place), so a push
repeated, or resumed after a failure, leaves exactly one copy. Run ids carry the host they
were made on, so runs of different machines never overwrite each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from iolab.store.base import RunRecord, Store


@dataclass
class Pushed:
    run_id: str
    trials: int
    status: str


def push_run(source: Store, target: Store, rec: RunRecord) -> Pushed:
    """Copy run `rec` of `source` into `target`. The run record goes first (trials refer to it) and
    again last (saving a trial touches `updated`), so the copy is the run as it was."""
    target.put_run(rec)
    trials = source.trials(rec.id)
    for t in trials:
        target.save_trial(rec.id, t, source.raw(rec.id, t.trial_id))
    target.put_run(rec)
    return Pushed(rec.id, len(trials), rec.status)
