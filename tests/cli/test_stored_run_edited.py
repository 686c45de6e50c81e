"""A stored run read back is input: a hand-edited store ends compare and report with exit 2 naming
the store, run, trial and key (it died with a TypeError traceback, exit 1), and nothing is
created; a run compared with itself is refused the same way."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from tests.core.helpers import Lab, needs_root, sysbench_cpu_spec

pytestmark = [needs_root, pytest.mark.skipif(shutil.which("sysbench") is None, reason="sysbench is needed")]

SPEC = sysbench_cpu_spec("edited", repetitions=3, max_repetitions=3)


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.name.endswith(("-wal", "-shm")))


def test_a_hand_edited_store_is_exit_2_naming_run_trial_and_key(lab: Lab) -> None:
    spec = lab.root / "cpu.toml"
    spec.write_text(SPEC)
    for _ in range(2):
        done = lab.iolab("run", spec)
        assert done.returncode == 0, done.stderr
    con = sqlite3.connect(lab.db)
    rows = con.execute("SELECT run_id, trial_id, metrics_json FROM trials ORDER BY run_id, trial_id").fetchall()
    run_b, trial_b, text = rows[-1]
    assert '"events_per_s"' in text, text
    con.execute("UPDATE trials SET metrics_json = json_set(metrics_json, '$.events_per_s', 'fast') "
                "WHERE run_id = ? AND trial_id = ?", (run_b, trial_b))
    con.commit()
    con.close()
    run_a = next(r for r, *_ in rows if r != run_b)
    before = _files(lab.root)
    for args in (("compare", run_a, run_b), ("report", run_b, "--format", "json")):
        done = lab.iolab(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        err = " ".join(done.stderr.split())
        assert "Traceback" not in err
        assert f"run {run_b}" in err and f"trial '{trial_b}'" in err, err
        assert "metrics.events_per_s: a number or null, got str 'fast'" in err, err
        assert str(lab.db) in err, err
    assert _files(lab.root) == before
    same = lab.iolab("compare", run_a, run_a)
    assert same.returncode == 2 and "same run" in same.stderr, same.stderr
