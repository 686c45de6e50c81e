"""Two runs at once on one machine never hurt each other.

* Two studies with different IOLAB_DATA (sharing one scratch dir, the harder case): one is
  killed with SIGKILL mid-trial, then `iolab clean --all` runs, from the killed run's data
  dir and from the survivor's, while the survivor is still measuring. The killed run's
  leftovers all go; the survivor keeps every resource, goes on measuring (a trial ends ok after
  the cleans) and stops cleanly when the test stops it: a survivor of five trials finished on
  its own before the cleans had run, once, on a loaded machine.
* Two `--resume` of one run: the second is refused while the first is alive, allowed once
  it is dead.
* Two runs retuning the scheduler of one device (a loop device the test makes): the device
  is restored only when the last of them ends, and a third run asking for another
  scheduler meanwhile is refused instead of pulling it from under them. The long run has
  more trials than the test needs and ends when the test stops it (Ctrl-C): a long run that
  had to outlast two others on its own lost that race once on a loaded machine, and was
  caught between putting the device back and exiting.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.core import owned
from tests.core.helpers import LOOP_TARGET, Lab, fio_workload, make_lab, needs_fio, needs_root, one_line, study_table

# kills iolab or runs `iolab clean`, which takes what any dead owner left: never beside another such test
pytestmark = [needs_root, needs_fio, pytest.mark.dead_owners]


def _bfq_and_cgroups() -> bool:
    from iolab.cgroups import detect

    m = detect.mounts()
    offered = {s.strip("[]") for f in Path("/sys/block").glob("loop*/queue/scheduler") for s in f.read_text().split()}
    return (m.v1_blkio is not None or (m.v2 is not None and "io" in m.v2_controllers)) and "bfq" in offered


def _target() -> str:
    """Everything a run can leave at once: image, loop device, ext4 mount, scheduler and tunable
    claims, cgroup parent (when the machine has BFQ and a blkio/io hierarchy), work dir, fio."""
    if _bfq_and_cgroups():
        return ('[target]\nkind = "cgroups"\ncontroller = "bfq"\nsize = "192M"\nfilesystem = "ext4"\n'
                'data_size = "64M"\n')
    return '[target]\nkind = "loop"\nsize = "64M"\nfilesystem = "ext4"\nscheduler = "mq-deadline"\n'


@pytest.fixture
def two_labs(tmp_path: Path) -> Iterator[tuple[Lab, Lab]]:
    a = make_lab(tmp_path / "a")
    b = make_lab(tmp_path / "b")
    os.rmdir(b.scratch)
    b.scratch = a.scratch  # one scratch dir, two data dirs
    b.env["IOLAB_SCRATCH"] = str(a.scratch)
    try:
        yield a, b
    finally:
        a.force_cleanup()
        b.force_cleanup()


def test_clean_all_while_another_study_runs_takes_only_the_dead_runs_leftovers(two_labs: tuple[Lab, Lab]) -> None:
    a, b = two_labs
    spec_a = a.spec(study_table("killed", repetitions=3, max_repetitions=3) + _target() + fio_workload(runtime=2))
    # more trials than the test needs: it is stopped (Ctrl-C) once it has measured past the cleans
    spec_b = b.spec(study_table("survivor", repetitions=40, max_repetitions=40) + _target() + fio_workload(runtime=2))
    pb = b.popen("run", spec_b)
    pa = a.popen("run", spec_a)
    try:
        token_a, token_b = owned.token_of(pa.pid), owned.token_of(pb.pid)
        a.wait_until(lambda: a.trial_rows() and any("fio" in p for p in owned.processes(token_a)), 90,
                     "the first run's second trial", pa)
        b.wait_until(lambda: any("fio" in p for p in owned.processes(token_b)), 60, "the survivor's fio", pb)
        pa.kill()
        pa.wait(timeout=10)
        left = owned.everything(token_a, a.scratch)
        for kind in ("processes", "loops", "mounts", "files"):
            assert left[kind], f"kill -9 should leave {kind} for clean to find: {left}"
        b_before = owned.everything(token_b, b.scratch)

        r = a.iolab("clean", "--all")  # from the killed run's data dir, which is not the survivor's
        assert r.returncode == 0, r.stdout + r.stderr
        assert owned.nothing(token_a, a.scratch) == {}, f"left after clean --all:\n{r.stdout}"
        r2 = b.iolab("clean", "--all")  # from the survivor's own data dir: its live ledger protects it
        assert r2.returncode == 0, r2.stdout + r2.stderr
        assert pb.poll() is None, "the survivor must still be measuring while clean --all runs"
        b_after = owned.everything(token_b, b.scratch)
        # a trial cgroup lives one trial (2 s): the survivor's next trial has a new one by now; one
        # that clean --all ended would fail its trial, which the all-ok check below catches
        for state in (b_before, b_after):
            state["cgroups"] = [c for c in state["cgroups"] if "-trial-" not in c]
        for kind in ("loops", "mounts", "cgroups", "scheduler claims", "files"):
            # a trial cgroup goes when its trial ends (the survivor's trials keep running meanwhile: that they
            # all end ok is checked below); everything else must be exactly as before
            before, after = ([x for x in d[kind] if "-trial-" not in str(x)] for d in (b_before, b_after))
            assert after == before, f"clean --all touched the survivor's {kind}"
        assert token_b not in r.stdout + r2.stdout, r.stdout + r2.stdout

        stored = len(b.trial_rows())
        b.wait_until(lambda: len(b.trial_rows()) > stored, 60, "a survivor's trial ended after the cleans", pb)
        pb.send_signal(signal.SIGINT)
        out, err = pb.communicate(timeout=60)
    finally:
        for p in (pa, pb):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert pb.returncode == 130, err
    doc = b.report_json()
    assert doc["status"] == "partial"
    assert len(doc["trials"]) > stored and all(t["status"] == "ok" for t in doc["trials"]), \
        [t["error"] for t in doc["trials"]]
    assert owned.nothing(token_b, b.scratch) == {}
    assert owned.nothing(token_a, a.scratch) == {}
    a.assert_nothing_left()
    b.assert_nothing_left()


def test_a_second_resume_of_a_live_run_is_refused(lab: Lab) -> None:
    spec = lab.spec(study_table("resume-twice", repetitions=4, max_repetitions=4) + LOOP_TARGET
                    + fio_workload(runtime=2))
    first = lab.popen("run", spec)
    lab.wait_until(lambda: lab.trial_rows(), 60, "a stored trial", first)
    first.send_signal(signal.SIGINT)
    first.communicate(timeout=30)
    (run_id, status), = lab.run_rows()
    assert status == "partial"

    p1 = lab.popen("run", "--resume", run_id)
    p3 = None
    try:
        lab.wait_until(lambda: lab.fio_pids(), 60, "the first resume's fio", p1)
        # frozen, the holder stays live however long the second resume takes to start on a loaded
        # machine (a 2 s trial could otherwise end the first resume before the second asks)
        p1.send_signal(signal.SIGSTOP)
        loops = lab.loops()
        r = lab.iolab("run", "--resume", run_id, timeout=60)
        assert r.returncode == 2, r.stdout + r.stderr
        assert f"is being run right now by another iolab process (pid {p1.pid})" in one_line(r.stderr), r.stderr
        assert "Traceback" not in r.stderr
        assert lab.loops() == loops and p1.poll() is None, "the refused resume created or touched nothing"

        # a holder that died (kill -9) does not block the run forever
        p1.kill()
        p1.wait(timeout=10)
        c = lab.iolab("clean")
        assert c.returncode == 0, c.stderr
        p3 = lab.popen("run", "--resume", run_id)
        out, err = p3.communicate(timeout=180)
        assert p3.returncode == 0, err
    finally:
        for p in (p1, p3):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    assert lab.run_rows() == [(run_id, "complete")]
    assert sum(row[2] == "ok" for row in lab.trial_rows(run_id)) == 4
    lab.assert_nothing_left()


def _queue(dev: str) -> tuple[str, str | None]:
    q = Path("/sys/block") / os.path.basename(dev) / "queue"
    active = q.joinpath("scheduler").read_text().split("[", 1)[1].split("]", 1)[0]
    ll = q / "iosched" / "low_latency"
    return active, ll.read_text().strip() if ll.exists() else None


@pytest.mark.skipif(not _bfq_and_cgroups(), reason="needs BFQ and a cgroup blkio/io hierarchy")
def test_a_shared_device_is_restored_only_when_the_last_run_ends(lab: Lab) -> None:
    img = lab.scratch / "shared-device.img"
    with open(img, "wb") as f:
        f.truncate(256 << 20)
    dev = subprocess.run(["losetup", "--find", "--show", "--direct-io=on", str(img)], check=True,
                         capture_output=True, text=True).stdout.strip()
    procs: list[subprocess.Popen[str]] = []
    try:
        queue = Path("/sys/block") / os.path.basename(dev) / "queue" / "scheduler"
        if _queue(dev)[0] == "bfq":  # a loop device number keeps its scheduler across detach/attach
            queue.write_text("none")
        original = _queue(dev)
        assert original[0] != "bfq"

        def spec(name: str, controller: str, reps: int, runtime: int) -> Path:
            return lab.spec(study_table(name, repetitions=reps, max_repetitions=reps)
                            + f'[target]\nkind = "cgroups"\ncontroller = "{controller}"\ndevice = "{dev}"\n'
                            + fio_workload(runtime=runtime), name=f"{name}.toml")

        # outlasts the test; stopped below
        long_run = lab.popen("run", spec("long", "bfq", 60, 2), "--destroy-data", dev)
        procs.append(long_run)
        token_long = owned.token_of(long_run.pid)
        lab.wait_until(lambda: owned.claims(token_long) and _queue(dev) == ("bfq", "0"), 60,
                       "the long run's scheduler claim", long_run)
        short = lab.iolab("run", spec("short", "bfq", 2, 1), "--destroy-data", dev, timeout=120)
        assert short.returncode == 0, short.stderr
        assert long_run.poll() is None, "the long run must outlast the short one"
        assert _queue(dev) == ("bfq", "0"), "restored when the first run ended, under the other one"

        other = lab.iolab("run", spec("other", "none", 1, 1), "--destroy-data", dev, timeout=120)
        assert other.returncode == 1, other.stdout + other.stderr  # no trial could run: a failed run
        errors = {row[3] for row in lab.query("SELECT t.trial_id, t.config_id, t.status, t.error FROM trials t "
                                                "JOIN runs r ON r.id = t.run_id WHERE r.study = 'other'")}
        assert errors and all("holds the scheduler at 'bfq'" in e for e in errors), errors
        assert _queue(dev) == ("bfq", "0") and long_run.poll() is None

        assert long_run.poll() is None, "the long run must still be measuring"
        long_run.send_signal(signal.SIGINT)
        _, err = long_run.communicate(timeout=180)
        assert long_run.returncode == 130, err
        assert _queue(dev) == original, "the last run to end restores the device"
        assert owned.claims(token_long) == [] and not (owned.QUEUE_RECORDS / f"{os.path.basename(dev)}.json").exists()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if procs and procs[0].returncode not in (130, None):
            lab.iolab("clean")
        for _ in range(50):
            if subprocess.run(["losetup", "-d", dev], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        img.unlink(missing_ok=True)
    lab.assert_nothing_left()
