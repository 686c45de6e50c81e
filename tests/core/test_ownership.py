"""Owners, pending ledger entries, held signals and scheduler claims, in-process on real
loop devices and processes (the end-to-end versions are test_kill.py and test_concurrent_runs.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.core.helpers import Lab, needs_root

from iolab.cgroups import queue_claims, scheduler
from iolab.cgroups.device import resolve
from iolab.core import owner, resources, signals
from iolab.core.cleaners import loop_backing_file
from iolab.core.errors import RefusedError
from iolab.core.resources import Ledger


@pytest.fixture
def env_lab(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> Lab:
    monkeypatch.setenv("IOLAB_DATA", str(lab.data))
    monkeypatch.setenv("IOLAB_SCRATCH", str(lab.scratch))
    return lab


def _dead_owner() -> owner.Owner:
    p = subprocess.Popen(["sleep", "0"])
    start = owner.start_time(p.pid)
    p.wait()
    assert start is not None
    return owner.Owner(p.pid, start)


def _dead_ledger(lab: Lab, items: list[dict]) -> Path:
    """A ledger file as a process killed with -9 leaves it."""
    lab.ledger_dir.mkdir(parents=True, exist_ok=True)
    f = lab.ledger_dir / f"{_dead_owner().token}.json"
    f.write_text(json.dumps(items))
    return f


# ---------------------------------------------------------------- owners

def test_an_owner_is_its_pid_and_start_time() -> None:
    me = owner.me()
    assert me.alive()
    assert not owner.Owner(me.pid, me.start + 1).alive(), "same pid, other start time: a recycled pid"
    assert not _dead_owner().alive()
    tag = owner.tag("loop", "abc")
    assert tag == f"iolab-{me.token}-loop-abc"
    assert owner.owner_of_name(f"/var/tmp/{tag}.img") == me
    assert owner.owner_of_name("iolab-loop-3fa2c1d0.img") is None  # untagged (older iolab)
    assert owner.owner_of_name("iolab-o12x.34-x") is None
    assert owner.parse_token(me.token) == me and owner.parse_token("o1.") is None


def test_processes_carry_their_owner_and_spawn_tags() -> None:
    dead = _dead_owner()
    env = {**os.environ, owner.ENV_OWNER: dead.token, owner.ENV_SPAWN: "t123"}
    child = subprocess.Popen(["sh", "-c", "sleep 30 & wait"], env=env)
    try:
        time.sleep(0.2)
        found = [p for p in owner.tagged_processes() if p.owner == dead]
        assert {p.spawn for p in found} == {"t123"} and len(found) == 2, "the shell and its sleep (inherited)"
        assert all(p.pid != os.getpid() for p in owner.tagged_processes())
    finally:
        child.kill()
        child.wait()
        subprocess.run(["pkill", "-KILL", "-P", str(child.pid)], capture_output=True)


# ---------------------------------------------------------------- held signals

def test_stop_signals_are_held_over_the_window_then_delivered() -> None:
    got: list[int] = []

    def handler(signum: int, frame: object) -> None:
        got.append(signum)
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGHUP, handler)
    helper = threading.Thread(target=time.sleep, args=(1,))  # another thread the kernel may pick
    helper.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            with signals.held():
                os.kill(os.getpid(), signal.SIGHUP)
                time.sleep(0.2)
                assert got == [], "delivered inside the window"
                inside_done = True
        assert inside_done and got == [signal.SIGHUP], "delivered once, when the window ended"
    finally:
        signal.signal(signal.SIGHUP, old)
        helper.join()


# ---------------------------------------------------------------- pending entries

def test_an_entry_is_pending_on_disk_while_its_thing_is_created(env_lab: Lab) -> None:
    ledger = Ledger()
    f = env_lab.scratch / owner.tag("file", "x")
    with ledger.creating("file", str(f)) as res:
        on_disk = json.loads(ledger.path.read_text())
        assert [(i["rid"], i["state"]) for i in on_disk] == [(res.rid, "pending")]
        f.write_text("made")
    assert json.loads(ledger.path.read_text())[0]["state"] == "live"
    ledger.release(res)
    assert not f.exists() and not ledger.path.exists()

    # a creation that fails halfway is undone by the kind's cleaner
    with pytest.raises(RuntimeError):
        with ledger.creating("file", str(f)):
            f.write_text("half")
            raise RuntimeError("failed after creating")
    assert not f.exists() and not ledger.path.exists()

    # a thing that existed before is not ours: the entry goes, the thing stays
    f.write_text("someone else's")
    with pytest.raises(FileExistsError):
        with ledger.creating("file", str(f)):
            os.open(f, os.O_CREAT | os.O_EXCL)
    assert f.read_text() == "someone else's" and not ledger.path.exists()
    f.unlink()


@needs_root
def test_a_pending_loop_entry_finds_the_device_by_its_backing_file(env_lab: Lab) -> None:
    """iolab killed between losetup and recording the device's name: clean still detaches it."""
    img = env_lab.scratch / f"iolab-{_dead_owner().token}-loop-12345678.img"
    with open(img, "wb") as fh:
        fh.truncate(16 << 20)
    dev = subprocess.run(["losetup", "--find", "--show", str(img)], check=True, capture_output=True,
                         text=True).stdout.strip()
    try:
        _dead_ledger(env_lab, [
            {"kind": "file", "ident": str(img), "info": {}, "rid": "a", "state": "live"},
            {"kind": "loop", "ident": "", "info": {"backing": str(img)}, "rid": "b", "state": "pending"},
        ])
        cleaned, errors = resources.clean_orphans()
        assert errors == []
        assert loop_backing_file(dev) is None, f"{dev} still attached"
        assert not img.exists() and env_lab.ledger_entries() == []
        assert f"file {img}" in cleaned
    finally:
        subprocess.run(["losetup", "-d", dev], capture_output=True)


def test_a_pending_load_generator_is_found_by_its_spawn_tag(env_lab: Lab) -> None:
    """Killed between Popen and recording the pid: the generator and its children still go;
    a process of the same dead owner outside any entry goes too (owner cleaner)."""
    f = _dead_ledger(env_lab, [{"kind": "pgroup", "ident": "", "info": {"spawn": "s-pending"}, "rid": "p",
                                "state": "pending"}])
    dead = owner.parse_token(f.stem)
    assert dead is not None
    env = {**os.environ, owner.ENV_OWNER: dead.token, owner.ENV_SPAWN: "s-pending"}
    gen = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & wait"], env=env, start_new_session=True)
    helper = subprocess.Popen(["sleep", "60"], env={**os.environ, owner.ENV_OWNER: dead.token})
    unrelated = subprocess.Popen(["sleep", "60"])
    try:
        time.sleep(0.2)
        cleaned, errors = resources.clean_orphans()
        assert errors == []
        assert gen.wait(timeout=5) == -signal.SIGKILL
        assert helper.wait(timeout=5) == -signal.SIGKILL
        assert not [p for p in owner.tagged_processes() if p.owner == dead]
        assert unrelated.poll() is None, "a process without the dead owner's tag is never touched"
        assert any(c.startswith("process ") for c in cleaned), cleaned
    finally:
        for p in (gen, helper, unrelated):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_a_live_owners_ledger_is_never_cleaned(env_lab: Lab) -> None:
    ledger = Ledger()
    f = env_lab.scratch / owner.tag("mine")
    with ledger.creating("file", str(f)):
        f.write_text("x")
    assert resources.clean_orphans() == ([], [])
    assert f.exists()
    ledger.release_all()


# ---------------------------------------------------------------- scheduler claims

@pytest.fixture
def loopdev(lab: Lab) -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("needs root (loop devices)")
    img = lab.scratch / "claims.img"
    with open(img, "wb") as fh:
        fh.truncate(16 << 20)
    dev = subprocess.run(["losetup", "--find", "--show", str(img)], check=True, capture_output=True,
                         text=True).stdout.strip()
    try:
        yield dev
    finally:
        subprocess.run(["losetup", "-d", dev], capture_output=True)
        rec = queue_claims.records_dir() / f"{os.path.basename(dev)}.json"
        rec.unlink(missing_ok=True)


def _other(dev: str) -> str:
    offered = scheduler.available(resolve(dev))
    now = scheduler.current(resolve(dev))
    return next(s for s in ("mq-deadline", "none", "kyber", "bfq") if s in offered and s != now)


def _claim_as(dead: owner.Owner, dev: str, sched: str) -> None:
    """A claim written by another owner (as a crashed run leaves it)."""
    d = resolve(dev)
    rec_path = queue_claims.records_dir() / f"{d.name}.json"
    queue_claims.records_dir().mkdir(parents=True, exist_ok=True)
    rec = {"device": d.name, "queue": str(d.queue), "instance": queue_claims._instance(d.queue),
           "original": {"scheduler": scheduler.current(d), "iosched": {}},
           "claims": {"x": {"owner": dead.token, "scheduler": sched, "iosched": {}}}}
    rec_path.write_text(json.dumps(rec))
    Path(d.queue / "scheduler").write_text(sched)


@needs_root
@pytest.mark.dead_owners  # queue_claims.sweep() restores every dead owner's claim on the machine
def test_a_claim_of_another_live_owner_refuses_a_different_scheduler(env_lab: Lab, loopdev: str) -> None:
    d = resolve(loopdev)
    before = scheduler.current(d)
    other = _other(loopdev)
    holder = subprocess.Popen(["sleep", "60"])  # a live "other run"
    try:
        alive = owner.Owner(holder.pid, owner.start_time(holder.pid) or 0)
        _claim_as(alive, loopdev, other)
        ledger = Ledger()
        with pytest.raises(RefusedError, match=f"holds the scheduler at '{other}'"):
            scheduler.select(d, before, ledger)
        assert scheduler.current(d) == other and not ledger.path.exists()
        same = scheduler.select(d, other, ledger)  # the same value: joins
        assert queue_claims.holders(d.name) == sorted([alive.token, owner.me().token])
        ledger.release(same)
        assert scheduler.current(d) == other, "the other run still holds it"
    finally:
        holder.kill()
        holder.wait()
    # its owner is dead now: the claim counts as released, the sweep restores the snapshot
    restored, errors = queue_claims.sweep()
    assert errors == [] and restored and scheduler.current(d) == before


@needs_root
def test_old_scheduler_ledger_formats_are_undone_without_error(env_lab: Lab, loopdev: str) -> None:
    """Before one format per kind, the loop target wrote {previous} and cgroups wrote
    {queue, scheduler[, tunables]}; `iolab clean` raised KeyError on one of them."""
    d = resolve(loopdev)
    before = scheduler.current(d)
    Path(d.queue / "scheduler").write_text(_other(loopdev))
    (env_lab.ledger_dir).mkdir(parents=True, exist_ok=True)
    pid = _dead_owner().pid
    (env_lab.ledger_dir / f"{pid}.json").write_text(json.dumps([
        {"kind": "scheduler", "ident": d.name, "info": {"previous": before}, "rid": "old-loop"},
        {"kind": "scheduler", "ident": d.name, "info": {"queue": str(d.queue), "scheduler": before,
                                                         "tunables": {"nonexistent": "1"}}, "rid": "old-cg"},
        {"kind": "scheduler", "ident": d.name, "info": {"something": "else"}, "rid": "unknown"},
    ]))
    cleaned, errors = resources.clean_orphans()
    assert errors == [], errors
    assert scheduler.current(d) == before
    assert env_lab.ledger_entries() == []


@needs_root
def test_a_crashed_runs_scheduler_claim_is_restored_before_its_loop_device_is_detached(env_lab: Lab) -> None:
    """A detach starts a new diskseq, after which the claim's record no longer matches the
    device: `iolab clean` must release the claim first, or the loop number keeps the run's
    scheduler for its next user."""
    dead = _dead_owner()
    img = env_lab.scratch / f"iolab-{dead.token}-loop-87654321.img"
    with open(img, "wb") as fh:
        fh.truncate(16 << 20)
    dev = subprocess.run(["losetup", "--find", "--show", str(img)], check=True, capture_output=True,
                         text=True).stdout.strip()
    d = resolve(dev)
    try:
        (d.queue / "scheduler").write_text("none")
        other = _other(dev)
        rec = {"device": d.name, "queue": str(d.queue), "instance": queue_claims._instance(d.queue),
               "original": {"scheduler": "none", "iosched": {}},
               "claims": {"c": {"owner": dead.token, "scheduler": other, "iosched": {}}}}
        queue_claims.records_dir().mkdir(parents=True, exist_ok=True)
        (queue_claims.records_dir() / f"{d.name}.json").write_text(json.dumps(rec))
        (d.queue / "scheduler").write_text(other)
        env_lab.ledger_dir.mkdir(parents=True, exist_ok=True)
        (env_lab.ledger_dir / f"{dead.token}.json").write_text(json.dumps([  # in creation order
            {"kind": "file", "ident": str(img), "info": {}, "rid": "a", "state": "live"},
            {"kind": "loop", "ident": dev, "info": {"backing": str(img)}, "rid": "b", "state": "live"},
            {"kind": "scheduler", "ident": d.name, "info": {"queue": str(d.queue), "claim": True}, "rid": "c",
             "state": "live"},
        ]))
        cleaned, errors = resources.clean_orphans()
        assert errors == []
        assert loop_backing_file(dev) is None and not img.exists()
        assert scheduler.current(d) == "none", "the claim was dropped as stale instead of restored"
        assert not (queue_claims.records_dir() / f"{d.name}.json").exists()
    finally:
        subprocess.run(["losetup", "-d", dev], capture_output=True)
        (queue_claims.records_dir() / f"{d.name}.json").unlink(missing_ok=True)
