"""cgroup v1 for real on this machine: detection, create / read back / remove, the 128-group
timing, teardown on exceptions, crash recovery through the ledger, and the sweep."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from iolab.cgroups import cleanup, detect, fs, queue_claims, registry, scheduler
from iolab.cgroups.device import resolve
from iolab.cgroups.registry import open_backend
from iolab.cgroups.session import CgroupSession
from iolab.core import owner
from iolab.core.errors import CapabilityMissing
from iolab.core.resources import Ledger, clean_orphans

pytestmark = pytest.mark.cgroup


def _sched(dev: str) -> str:
    return scheduler.current(resolve(dev))


def test_describe_reports_modes_and_backends(loopdev: str) -> None:
    d = registry.describe(loopdev)
    assert d["v1_blkio_mount"] == "/sys/fs/cgroup/blkio"
    assert d["backends"]["v1-bfq"] == "ok" and d["backends"]["v1-none"] == "ok"
    assert "bfq" in d["device"]["schedulers"]
    for key in ("nr_requests", "rotational", "nr_tags"):
        assert key in d["device"]


def test_cfq_refused_clearly(loopdev: str, ledger: Ledger) -> None:
    if (Path("/sys/fs/cgroup/blkio") / "blkio.weight").exists():
        pytest.skip("this kernel still has CFQ's blkio.weight")
    with pytest.raises(CapabilityMissing, match="CFQ was removed in Linux 5.0"):
        open_backend("cfq", loopdev, ledger)


def test_bfq_session_sets_up_and_restores(loopdev: str, ledger: Ledger, no_leftovers: None) -> None:
    weights = [100, 200, 400, 800]
    with CgroupSession("bfq", loopdev, ledger, runid="t-setup") as s:
        groups = s.setup(weights)
        assert _sched(loopdev) == "bfq"
        assert scheduler.tunables(s.backend.dev)["low_latency"] == "0"
        assert [s.backend.read_weight(g) for g in groups] == weights
        assert all(Path(p).exists() for p in s.procs_files().values())
        assert all(c.ios == 0 for c in s.counters().values())
        m = s.manifest()
        assert m["cgroups"]["groups"] == {"g000": 100, "g001": 200, "g002": 400, "g003": 800}
        assert m["device"]["iosched"]["low_latency"] == "0"
    assert not ledger.path.exists()


def test_weight_out_of_range_refused_before_any_change(loopdev: str, ledger: Ledger,
                                                       no_leftovers: None) -> None:
    s = CgroupSession("bfq", loopdev, ledger, runid="t-range")
    with pytest.raises(ValueError, match="outside 1..1000"):
        s.setup([100, 1001])
    assert s.teardown() == []


def test_128_groups_created_and_removed(loopdev: str, ledger: Ledger, no_leftovers: None) -> None:
    """128 x (mkdir + weight write + read back) + removal, every weight as asked. How fast:
    `bench/run cgroup-groups` (a timed assert here would fail on a busy machine, not on a slow iolab)."""
    t0 = time.monotonic()
    s = CgroupSession("bfq", loopdev, ledger, runid="t-128")
    groups = s.setup([(100, 200, 400, 800)[i % 4] for i in range(128)])
    assert len(groups) == 128 and all(g.weight == (100, 200, 400, 800)[i % 4]
                                      for i, g in enumerate(groups))
    t1 = time.monotonic()
    assert s.teardown() == []
    t2 = time.monotonic()
    print(f"\n128 groups: create+write+readback {t1 - t0:.3f} s, remove {t2 - t1:.3f} s, "
          f"total {t2 - t0:.3f} s")


def test_teardown_when_body_raises_with_tasks_inside(loopdev: str, ledger: Ledger,
                                                     leftovers: Callable[[], list[str]],
                                                     no_leftovers: None) -> None:
    sleeper = None
    with pytest.raises(RuntimeError, match="boom"):
        with CgroupSession("bfq", loopdev, ledger, runid="t-raise") as s:
            s.setup([100, 800])
            procs = s.procs_files()["g001"]
            sleeper = subprocess.Popen(["sleep", "30"],
                                       preexec_fn=lambda: Path(procs).write_text(str(os.getpid())))
            time.sleep(0.05)
            assert fs.pids(Path(procs).parent) == [sleeper.pid]
            raise RuntimeError("boom")
    try:
        assert leftovers() == []
        assert sleeper is not None and sleeper.poll() is None  # moved out, not killed
    finally:
        if sleeper:
            sleeper.kill()
            sleeper.wait()


def test_crashed_process_is_cleaned_from_its_ledger(loopdev: str, tmp_path: Path,
                                                    leftovers: Callable[[], list[str]],
                                                    no_leftovers: None) -> None:
    """A process that dies mid-run leaves its ledger; clean_orphans() undoes it all."""
    data = tmp_path / "crash-data"
    code = textwrap.dedent(f"""
        import os
        from iolab.cgroups.session import CgroupSession
        from iolab.core.resources import Ledger
        s = CgroupSession("bfq", {loopdev!r}, Ledger(), runid="t-crash")
        s.setup([100, 200, 400, 800])
        os._exit(3)  # no teardown: a crash
    """)
    env = {**os.environ, "IOLAB_DATA": str(data)}
    rc = subprocess.run([sys.executable, "-c", code], env=env).returncode
    assert rc == 3
    assert any(p.endswith("iolab-t-crash") for p in leftovers())
    assert _sched(loopdev) == "bfq"
    cleaned, errors = clean_orphans(data / "ledger")
    assert errors == []
    assert {c.split()[0] for c in cleaned} == {"cgroup", "scheduler"}
    assert leftovers() == []  # no_leftovers then checks scheduler and low_latency


def _dead_owner() -> owner.Owner:
    """An owner that existed and is gone (a pid with a start time no live process has)."""
    p = subprocess.Popen(["sleep", "0"])
    start = owner.start_time(p.pid)
    p.wait()
    return owner.Owner(p.pid, start if start is not None else 1)


@pytest.mark.dead_owners  # cleanup.sweep() takes every dead owner's groups on the machine
def test_sweep_finds_groups_of_dead_owners_without_a_ledger(loopdev: str,
                                                           leftovers: Callable[[], list[str]]) -> None:
    """A group named with a dead owner's tag goes (its task moved out, not killed); a group
    with a live owner, and an untagged group (it says nothing about who uses it), stay."""
    root = detect.mounts().v1_blkio
    assert root is not None
    dead = root / f"iolab-{_dead_owner().token}-abc123"
    alive = root / f"iolab-{owner.me().token}-def456"
    untagged = root / "iolab-stray-test"
    untagged_empty = root / "iolab-stray-empty"
    for g in (dead, alive, untagged, untagged_empty):
        (g / "child").mkdir(parents=True)
    sleepers = [subprocess.Popen(["sleep", "30"]) for _ in range(2)]
    try:
        fs.write_value(dead / "child" / "cgroup.procs", str(sleepers[0].pid))
        fs.write_value(untagged / "child" / "cgroup.procs", str(sleepers[1].pid))
        mine = {str(g) for g in (dead, alive, untagged, untagged_empty)}  # other runs' groups may be here too

        def ours(found: list) -> list[str]:
            return [str(p) for p in found if str(p) in mine]

        assert ours(cleanup.leftovers()) == [str(dead)]
        assert ours(cleanup.sweep(dry_run=True)[0]) == [str(dead)] and dead.exists()
        removed, errors = cleanup.sweep()
        assert ours(removed) == [str(dead)] and errors == []
        assert not dead.exists() and alive.exists() and untagged.exists() and untagged_empty.exists()
        assert sleepers[0].poll() is None and sleepers[1].poll() is None
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
        for g in (dead, alive, untagged, untagged_empty):
            fs.remove_tree(g)
    assert leftovers() == []


def test_scheduler_select_and_restore(loopdev: str, ledger: Ledger) -> None:
    dev = resolve(loopdev)
    before = scheduler.current(dev)
    other = "mq-deadline" if before != "mq-deadline" else "none"
    res = scheduler.select(dev, other, ledger)
    assert scheduler.current(dev) == other
    again = scheduler.select(dev, other, ledger)  # already so, but still a claim: nobody may switch it away
    assert queue_claims.holders(dev.name) == [owner.me().token]
    ledger.release(res)
    assert scheduler.current(dev) == other, "restored while a claim was still held"
    ledger.release(again)
    assert scheduler.current(dev) == before
    assert queue_claims.holders(dev.name) == []
    with pytest.raises(ValueError, match="not offered"):
        scheduler.select(dev, "cfq", ledger)
