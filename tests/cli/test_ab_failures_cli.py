"""`iolab ab` on this machine when B fails, its load ends early, or --metric names nothing.

The study of tests/cli/test_ab_cli.py (sysbench cpu, 1 thread, 1 s, on the host), short:

* B's sysbench segfaults in every block (a wrapper first on B's PATH, as a crashing candidate
  build would be): a regression of B's failures (8 of 8 blocks where only B failed, exact sign
  test p = 2/256), exit 1, the failures named per side. Before: every row "invalid", exit 3
  "nothing was measured on both sides" (and with a build that crashed in 5 of 8 blocks,
  "undecided, missing 5" with exit 0).
* `--load-b false`: the load exits at once; B's run of that block is set aside, the study stops
  there, exit 4 naming the command and its exit status. Before: "B run ... beside `false`", exit 0.
* `--metric` with a name no workload declares: exit 2 before anything is created (also with
  --dry-run), naming the option, the name and the declared metrics. Before: --dry-run exit 0, the
  real run ran every block and exited 3.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.core.helpers import IOLAB, Lab, drive, make_lab, needs_root, sysbench_cpu_spec

pytestmark = [needs_root, pytest.mark.skipif(shutil.which("sysbench") is None, reason="sysbench is needed")]

SPEC = sysbench_cpu_spec("ab-fail")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    lab = make_lab(tmp_path_factory.mktemp("abfail"))
    try:
        yield lab
    finally:
        lab.force_cleanup()


def _ab(lab: Lab, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(IOLAB), "ab", *args], env=lab.env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300, cwd=lab.root)


def test_a_build_of_b_that_crashes_in_every_block_is_a_regression_with_exit_1(lab: Lab) -> None:
    bindir = lab.root / "crashing-build"
    bindir.mkdir(exist_ok=True)
    wrapper = bindir / "sysbench"
    wrapper.write_text('#!/bin/sh\necho "Segmentation fault" >&2\nkill -SEGV $$\n')
    wrapper.chmod(0o755)
    spec = lab.spec(SPEC)
    r = _ab(lab, str(spec), "--env-b", f"PATH={bindir}:/usr/sbin:/usr/bin:/sbin:/bin", "--blocks", "8",
            "--max-blocks", "8", "--seed", "2", "--json")
    assert r.returncode == 1, (r.stdout, r.stderr)
    res = json.loads(r.stdout)
    assert res["exit_status"] == 1
    rows = {x["metric"]: x for x in res["rows"]}
    fails = rows["failed blocks"]
    assert fails["verdict"] == "regression" and fails["failed"] == {"A": 0, "B": 8}, fails
    assert "Segmentation fault" in fails["reason"]
    assert rows["events_per_s"]["failed"] == {"A": 0, "B": 8} and rows["events_per_s"]["verdict"] == "invalid"
    # the stored study judges the same again, and its text names the failures per side
    doc = lab.report_json(res["run"])
    assert {x["metric"]: x["verdict"] for x in doc["findings"]["ab"]["rows"]}["failed blocks"] == "regression"


def test_a_load_that_exits_at_once_sets_its_side_aside_and_ends_the_study_with_exit_4(lab: Lab) -> None:
    spec = lab.spec(SPEC)
    r = _ab(lab, str(spec), "--load-b", "false", "--blocks", "2", "--max-blocks", "2", "--seed", "1", "--json")
    assert r.returncode == 4, (r.stdout, r.stderr)
    assert "load `false` exited with status 1" in r.stderr and "--load-b" in r.stderr, r.stderr
    assert "not a pass" in r.stderr
    res = json.loads(r.stdout)
    assert res["exit_status"] == 4 and res["blocks"] == 1  # the study stopped after the block
    (row,) = res["rows"]
    assert row["invalid"] == {"A": 0, "B": 1} and row["verdict"] == "invalid"
    blocks = lab.report_json(res["run"])["extra"]["blocks"]
    assert "exited with status 1" in blocks[0]["invalid"]["B"]


def test_an_unknown_metric_is_exit_2_before_anything_is_created(lab: Lab, tmp_path: Path) -> None:
    spec = lab.spec(SPEC, "metric.toml")
    db = tmp_path / "never.sqlite"
    results = drive(lab, [["ab", str(spec), "--metric", "events_per_sec", *extra, "--db", str(db)]
                          for extra in (["--dry-run"], ["--blocks", "2", "--max-blocks", "2"])])
    for r in results:
        assert r["exit"] == 2 and not r["traceback"], r
        err = " ".join(r["stderr"].split())
        assert "--metric 'events_per_sec'" in err and "events_per_s" in err, err
    assert not db.exists()
