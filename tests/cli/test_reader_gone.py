"""`iolab run X 2>&1 | head -3`: the reader goes away after three lines. The run stops as on a stop
signal: nothing left behind, the trials it measured kept, status 'partial' (resumable), exit 130.
On the code before, the next progress line's BrokenPipeError failed that trial and every later
one: the run ended 'failed' with every trial it had measured ok."""

from __future__ import annotations

import json
import subprocess

from tests.core import owned
from tests.core.helpers import IOLAB, Lab, fio_workload, needs_fio, needs_root, study_table

pytestmark = [needs_root, needs_fio]


def test_a_reader_that_goes_away_stops_the_run_like_a_stop_signal(lab: Lab) -> None:
    spec = lab.spec(study_table("reader", repetitions=3, max_repetitions=3)
                    + '[target]\nkind = "loop"\nsize = "64M"\n' + fio_workload(runtime=1, bs=["4k", "64k"]))
    proc = subprocess.Popen([str(IOLAB), "run", str(spec)], env=lab.env, cwd=lab.root, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    token = owned.token_of(proc.pid)
    assert proc.stdout is not None
    lines = [proc.stdout.readline() for _ in range(3)]  # the run's line, the set-up, the first trial
    assert lines[2].startswith("trial 1/"), lines
    proc.stdout.close()  # what head does after its lines
    assert proc.wait(timeout=120) == 130
    assert owned.nothing(token, lab.scratch) == {}
    (row,) = json.loads(lab.iolab("runs", "--json").stdout)
    assert row["status"] == "partial" and row["trials_ok"] == row["trials"] >= 1, row
    lab.assert_nothing_left()
