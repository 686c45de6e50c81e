"""Ctrl-C / SIGTERM mid-run: stop within seconds, remove everything, keep finished trials;
`--resume` then runs only what is missing. Crash (kill -9): `iolab clean` undoes the leftovers."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from tests.core.helpers import LOOP_TARGET, Lab, fio_workload, needs_fio, needs_root, one_line, study_table

# kills iolab or runs `iolab clean`, which takes what any dead owner left: never beside another such test
pytestmark = [needs_root, needs_fio, pytest.mark.dead_owners]


def _spec(lab: Lab, runtime: int) -> Path:
    return lab.spec(study_table("interrupt", repetitions=3, max_repetitions=3)
                    + LOOP_TARGET + fio_workload(bs=["4k", "8k"], runtime=runtime))


def _interrupt_then_resume(lab: Lab, sig: int, runtime: int, min_trials: int) -> None:
    spec = _spec(lab, runtime)
    proc = lab.popen("run", spec)
    try:
        lab.wait_until(lambda: len(lab.trial_rows()) >= min_trials, 60, f"{min_trials} stored trials", proc)
        # `iolab clean` never touches what a live iolab is using
        loops = lab.loops()
        assert len(loops) == 1
        c = lab.iolab("clean")
        assert c.returncode == 0 and "nothing to clean" in c.stdout, c.stdout + c.stderr
        # one ledger (the live run may be between writing its .tmp and renaming it over its .json)
        live = [e for e in lab.ledger_entries() if not e.endswith(".tmp")]
        assert lab.loops() == loops and len(live) == 1, live
        # make sure fio is really running: the signal must land in the middle of a trial
        lab.wait_until(lambda: lab.fio_pids(), 10, "the next fio", proc)
        t0 = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=15)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, f"exit {proc.returncode}\n{err}"
    assert took < 10, f"took {took:.1f} s to stop"
    assert "--resume" in one_line(err), "the message should say how to resume"
    lab.assert_nothing_left()

    (run_id, status), = lab.run_rows()
    assert status == "partial"
    before = lab.trial_rows(run_id)
    assert len(before) >= min_trials
    assert all(r[2] == "ok" for r in before), "an interrupted trial is not recorded as a result"
    assert len(before) < 6

    r = lab.iolab("run", "--resume", run_id, timeout=120)
    assert r.returncode == 0, r.stderr
    assert lab.run_rows() == [(run_id, "complete")], "resume continues the same run"
    after = lab.trial_rows(run_id)
    ids = [row[0] for row in after]
    assert len(ids) == len(set(ids)) == 6, ids
    assert {row[0]: row[4] for row in before}.items() <= {row[0]: row[4] for row in after}.items(), \
        "earlier trials are kept unchanged (same ids, same start times)"
    assert [row[0] for row in after[:len(before)]] == [row[0] for row in before]
    assert sum(row[2] == "ok" for row in after) == 6
    per_config: dict[str, int] = {}
    for row in after:
        per_config[row[1]] = per_config.get(row[1], 0) + 1
    assert sorted(per_config.values()) == [3, 3]
    doc = lab.report_json(run_id)
    assert doc["status"] == "complete" and len(doc["trials"]) == 6
    assert sorted((t["params"]["bs"], t["repetition"]) for t in doc["trials"]) == \
        [(4096, 0), (4096, 1), (4096, 2), (8192, 0), (8192, 1), (8192, 2)]
    lab.assert_nothing_left()

    # resuming a finished run does nothing (and creates nothing)
    r = lab.iolab("run", "--resume", run_id, timeout=60)
    assert r.returncode == 0, r.stderr
    assert len(lab.trial_rows(run_id)) == 6
    lab.assert_nothing_left()


def test_sigint_mid_run_cleans_up_and_resume_finishes(lab: Lab) -> None:
    _interrupt_then_resume(lab, signal.SIGINT, runtime=2, min_trials=2)


def test_sigterm_mid_run_cleans_up_and_resume_finishes(lab: Lab) -> None:
    _interrupt_then_resume(lab, signal.SIGTERM, runtime=1, min_trials=1)


@pytest.mark.parametrize("gap", [0.0, 0.05, 0.3])
def test_impatient_double_ctrl_c_still_leaves_nothing(lab: Lab, gap: float) -> None:
    """Ctrl-C pressed twice: the second one lands while iolab is stopping and cleaning up."""
    spec = lab.spec(study_table("double-int", repetitions=2, max_repetitions=2) + LOOP_TARGET + fio_workload())
    proc = lab.popen("run", spec)
    try:
        lab.wait_until(lambda: lab.fio_pids(), 60, "fio", proc)
        proc.send_signal(signal.SIGINT)
        time.sleep(gap)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    lab.assert_nothing_left()
    assert [s for _, s in lab.run_rows()] == ["partial"]


def test_sigint_during_target_setup_leaves_nothing(lab: Lab) -> None:
    """Ctrl-C while the scratch image is still being written: nothing may be left half-made."""
    spec = lab.spec(study_table("setup-int", repetitions=1, max_repetitions=1)
                    + '[target]\nkind = "loop"\nsize = "1G"\n' + fio_workload())
    proc = lab.popen("run", spec)
    try:
        lab.wait_until(lambda: any(n.endswith(".img") for n in lab.scratch_entries()), 30, "the image file", proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    lab.assert_nothing_left()
    assert [s for _, s in lab.run_rows()] == ["partial"]


def test_kill9_then_clean_removes_loop_image_and_ledger(lab: Lab) -> None:
    spec = lab.spec(study_table("crash", repetitions=3, max_repetitions=3) + LOOP_TARGET
                    + fio_workload(runtime=1))
    proc = lab.popen("run", spec)
    try:
        lab.wait_until(lambda: lab.loops() and lab.fio_pids(), 60, "the loop device and fio", proc)
        (dev, image), = lab.loops()
        proc.kill()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert lab.loops(), "kill -9 gives iolab no chance to clean: the loop device is still there"
    assert len(lab.ledger_entries()) == 1, "the ledger of the dead process is the to-do list"
    # fio runs in its own session and survives iolab; wait for its 1 s to end so that the
    # loop device is free (an orphaned fio is checked separately below)
    lab.wait_until(lambda: not lab.fio_pids(), 15, "the orphaned fio to finish")

    r = lab.iolab("clean")
    assert r.returncode == 0, r.stderr
    assert f"loop {dev}" in r.stdout and f"file {image}" in r.stdout, r.stdout
    assert lab.loops() == []
    assert not any(n.endswith(".img") for n in lab.scratch_entries())
    assert lab.ledger_entries() == []

    r = lab.iolab("clean")
    assert r.returncode == 0
    assert "nothing to clean" in r.stdout


def test_kill9_then_clean_leaves_no_process_or_work_dir(lab: Lab) -> None:
    """Everything iolab creates, iolab removes -- also the fio it started and its work dir.

    BUG: HostExecutor (src/iolab/cgroups/executor.py) records neither the fio process group it
    starts (in its own session, so it survives iolab) nor its `iolab-work-*` directory in
    the ledger. After kill -9, `iolab clean` leaves fio running against the (already
    "detached") loop device until its runtime ends, and the work dir stays in the scratch dir.
    """
    spec = lab.spec(study_table("crash2", repetitions=3, max_repetitions=3) + LOOP_TARGET
                    + fio_workload(runtime=8))
    proc = lab.popen("run", spec)
    try:
        lab.wait_until(lambda: lab.loops() and lab.fio_pids(), 60, "the loop device and fio", proc)
        proc.kill()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    r = lab.iolab("clean")
    assert r.returncode == 0, r.stderr
    problems = []
    if lab.fio_pids():
        problems.append(f"fio started by iolab still runs after `iolab clean`: pids {lab.fio_pids()}")
    if lab.scratch_entries():
        problems.append(f"left in the scratch dir after `iolab clean`: {lab.scratch_entries()}")
    assert not problems, "\n".join(problems)
