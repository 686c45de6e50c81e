"""The data dir's disk fills up in the middle of a run. iolab records everything in its ledger
before it makes it, and every trial in its store: once neither can be written the run must stop
(each further trial would fail the same way), undo what it made, keep what it stored, and say so
in one message, with no traceback. Made for real: a data dir on a small tmpfs, filled by the test
as soon as the first trial is stored. On the code before: four chained tracebacks, exit 1, the
run's status 'failed'; a 0-byte ledger .tmp left behind."""

from __future__ import annotations

import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.core import owned
from tests.core.helpers import IOLAB, Lab, fio_workload, needs_fio, needs_root, one_line, study_table, tmpfs_at

pytestmark = [needs_root, needs_fio]


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Path]:
    yield from tmpfs_at(tmp_path / "small", "6M")


def _stored(db: Path) -> int:
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return int(con.execute("SELECT COUNT(*) FROM trials WHERE status='ok'").fetchone()[0])
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def test_a_full_data_dir_stops_the_run_cleanly_and_keeps_what_was_stored(lab: Lab, small: Path) -> None:
    data = small / "data"
    env = {**lab.env, "IOLAB_DATA": str(data)}
    env.pop("IOLAB_DB", None)
    spec = lab.spec(study_table("full", repetitions=3, max_repetitions=3)
                    + '[target]\nkind = "loop"\nsize = "64M"\n' + fio_workload(runtime=1, bs=["4k", "64k"]))
    proc = subprocess.Popen([str(IOLAB), "run", str(spec)], env=env, cwd=lab.root, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    token = owned.token_of(proc.pid)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline and _stored(data / "results.sqlite") < 1:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before the disk could fill"
    stored_before = _stored(data / "results.sqlite")
    subprocess.run(["dd", "if=/dev/zero", f"of={small / 'fill'}", "bs=64k"], capture_output=True)
    out, err = proc.communicate(timeout=300)
    said = one_line(err)
    assert proc.returncode == 1, said
    assert "Traceback" not in err, err
    assert "the run stopped: cannot write" in said and ("No space left" in said or "disk is full" in said), said
    assert "iolab run --resume" in said, said
    assert owned.nothing(token, data / "scratch") == {}, "what it made is undone, with no `iolab clean`"
    assert [p.name for p in (data / "ledger").iterdir()] in ([], [f"{token}.json"]), "no half-written .tmp"

    (small / "fill").unlink()
    r = subprocess.run([str(IOLAB), "clean"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    run_id = sqlite3.connect(str(data / "results.sqlite")).execute("SELECT id FROM runs").fetchone()[0]
    assert _stored(data / "results.sqlite") >= stored_before, "the trials stored before are kept"
    r = subprocess.run([str(IOLAB), "run", "--resume", run_id], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert _stored(data / "results.sqlite") == 6
