"""`iolab run --resume` right after a kill -9, without `iolab clean`: what the dead run left (its
fio still writing, its loop device, mount and cgroups) must not share the machine with the trials
being measured. The run undoes the dead owner's ledger first, says so, and then measures. On the
code before, the killed run's fio kept writing and its loop device stood while the resumed
trials ran. And `iolab runs` says the killed run is "interrupted" (it said "running" forever),
and "running" again once it is resumed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

from tests.core import owned
from tests.core.helpers import IOLAB, Lab, fio_workload, needs_fio, needs_root, study_table

pytestmark = [needs_root, needs_fio]


def test_a_resumed_run_first_undoes_what_the_killed_one_left(lab: Lab) -> None:
    spec = lab.spec(study_table("resume-clean", repetitions=2, max_repetitions=2)
                    + '[target]\nkind = "loop"\nsize = "64M"\nfilesystem = "ext4"\n'
                    + fio_workload(rw="randwrite", runtime=6, size="16M"))
    proc = subprocess.Popen([str(IOLAB), "run", str(spec)], env=lab.env, cwd=lab.root, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    token = owned.token_of(proc.pid)
    ledger = lab.ledger_dir / f"{token}.json"
    deadline = time.monotonic() + 120
    fio_since: float | None = None
    while time.monotonic() < deadline and proc.poll() is None:  # until a trial's fio has run for 2 s (the
        fio = [p for p in owned.processes(token) if p.endswith(" fio")]  # 6 s job, not a short set-up fio)
        fio_since = (fio_since or time.monotonic()) if fio else None
        if fio_since is not None and time.monotonic() - fio_since > 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None and fio_since is not None, "the run's fio never ran for 2 s"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert owned.processes(token) and owned.loops(token) and json.loads(ledger.read_text())

    run_id = lab.query("SELECT id FROM runs ORDER BY created DESC LIMIT 1")[0][0]
    listed = lab.iolab("runs", "--json")
    assert [r["status"] for r in json.loads(listed.stdout) if r["id"] == run_id] == ["interrupted"], listed.stdout
    assert lab.run_rows() == [(run_id, "running")], "the store keeps what it knew; the listing says what is true now"
    resumed = subprocess.Popen([str(IOLAB), "run", "--resume", run_id], env=lab.env, cwd=lab.root,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    assert resumed.stderr is not None
    for line in resumed.stderr:  # once the resumed run starts, nothing of the dead one may stand
        lines.append(line)
        if line.startswith(f"run {run_id}"):
            assert owned.nothing(token, lab.scratch) == {}, "the killed run's leftovers beside the resumed trials"
            listed = lab.iolab("runs", "--json")
            assert [r["status"] for r in json.loads(listed.stdout) if r["id"] == run_id] == ["running"], listed.stdout
            break
    _, rest = resumed.communicate(timeout=300)
    errs = "".join(lines) + rest
    assert resumed.returncode == 0, errs
    said = " ".join(errs.split())
    assert said.index("first undid what dead iolab runs left") < said.index(f"run {run_id}"), said
    assert owned.nothing(token, lab.scratch) == {}
    assert not ledger.exists()
    assert lab.report_json()["status"] == "complete"
    lab.assert_nothing_left()


PLANT = """
import os, sys
from iolab.core.resources import Ledger
os.makedirs(sys.argv[1])
with Ledger().creating("dir", sys.argv[1]):
    pass
os._exit(0)  # dies with its entry recorded: a dead owner's leftover
"""


def test_a_reproduction_also_undoes_dead_runs_first(lab: Lab) -> None:
    """`iolab reproduce` starts the same way (its budget here affords no study: only the start is
    looked at). Its dead owner is made for real: a process that records a directory and dies."""
    left = lab.root / "left-by-a-dead-run"
    subprocess.run([str(IOLAB.parent / "python"), "-c", PLANT, str(left)], env=lab.env, check=True, timeout=60)
    assert left.is_dir() and list(lab.ledger_dir.iterdir())
    r = lab.iolab("reproduce", "--quick", "--budget", "2", timeout=300)
    said = " ".join(r.stderr.split())
    assert f"first undid what dead iolab runs left in this data dir, as `iolab clean` does: dir {left}" in said, said
    assert said.index("first undid") < said.index("reproduction "), said
    assert not left.exists() and list(lab.ledger_dir.iterdir()) == []
    page = " ".join(r.stderr.split())
    assert "No interval stands behind the 17 testable verdicts yet" in page, "nothing measured: no '1 intervals'"
