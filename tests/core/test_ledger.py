"""The ledger and its cleaners, in-process, on real loop devices and files."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from tests.core.helpers import Lab, all_loops, needs_root

from iolab.core import owner, resources
from iolab.core.resources import Ledger
from iolab.targets.loop import create_scratch_loop, release_scratch_loop


@pytest.fixture
def env_lab(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> Lab:
    monkeypatch.setenv("IOLAB_DATA", str(lab.data))
    monkeypatch.setenv("IOLAB_SCRATCH", str(lab.scratch))
    return lab


def _attached(dev: str) -> bool:
    return any(d == dev for d, _ in all_loops())


@needs_root
def test_ledger_is_on_disk_before_the_resource_is_used(env_lab: Lab) -> None:
    ledger = Ledger()
    loop = create_scratch_loop(ledger, 16 << 20, prefill=False)
    try:
        items = json.loads(ledger.path.read_text())
        me = owner.me()
        assert ledger.path == env_lab.ledger_dir / f"o{os.getpid()}.{me.start}.json"
        assert [(i["kind"], i["ident"], i["state"]) for i in items] == \
            [("file", str(loop.image), "live"), ("loop", loop.device, "live")]
        assert items[1]["info"]["backing"] == str(loop.image)
        assert owner.owner_of_name(loop.image.name) == me, "the image's name carries its owner"
    finally:
        release_scratch_loop(ledger, loop)
    assert not _attached(loop.device) and not loop.image.exists()
    assert not ledger.path.exists(), "an empty ledger leaves no file"


@needs_root
def test_clean_skips_live_processes_and_undoes_dead_ones(env_lab: Lab) -> None:
    # a ledger of this (live, pytest) process: not touched
    mine = Ledger()
    f = env_lab.scratch / "iolab-mine"
    f.write_text("x")
    mine.add("file", str(f))
    # a ledger of a dead process: undone in dependency order (mount, loop, then file)
    dead = _dead_pid()
    img = env_lab.scratch / "iolab-dead.img"
    with open(img, "wb") as fh:
        fh.truncate(16 << 20)
    dev = subprocess.run(["losetup", "--find", "--show", str(img)], check=True, capture_output=True,
                         text=True).stdout.strip()
    (env_lab.ledger_dir / f"{dead}.json").write_text(json.dumps([
        {"kind": "file", "ident": str(img), "info": {}, "rid": "a"},
        {"kind": "loop", "ident": dev, "info": {"backing": str(img)}, "rid": "b"},
    ]))
    cleaned, errors = resources.clean_orphans()
    assert errors == []
    assert cleaned == [f"loop {dev}", f"file {img}"]
    assert not _attached(dev) and not img.exists()
    assert f.exists() and mine.path.exists()
    mine.release_all()
    assert not f.exists()


@needs_root
def test_loop_cleaner_never_detaches_a_reused_device_number(env_lab: Lab) -> None:
    img = env_lab.scratch / "someone-else.img"
    with open(img, "wb") as fh:
        fh.truncate(16 << 20)
    dev = subprocess.run(["losetup", "--find", "--show", str(img)], check=True, capture_output=True,
                         text=True).stdout.strip()
    try:
        ledger = Ledger()
        res = ledger.add("loop", dev, backing=str(env_lab.scratch / "iolab-loop-gone.img"))
        ledger.release(res)
        assert _attached(dev), "the device now serves another image: it must be left alone"
    finally:
        subprocess.run(["losetup", "-d", dev], capture_output=True)


@needs_root
def test_loop_release_does_not_pretend_while_the_device_is_busy(env_lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    """Releasing a loop device that something still holds open must not report success.

    BUG (src/iolab/core/cleaners.py _loop): `losetup -d` on a busy loop device only sets
    autoclear and exits 0, so the cleaner returns at once and the ledger forgets the device
    while it is still attached (its image already unlinked). This is how a SIGINT during a
    trial can leave a loop device behind after iolab has exited: fio was sent SIGKILL but
    not waited for (core/exec.py Executor.run / cgroups/executor.py _HostRunning.kill), so it still held the
    device when the cleaner ran.
    """
    from iolab.core import cleaners

    monkeypatch.setattr(cleaners, "DETACH_WAIT_S", 2.0)  # how long it waits is not the point here
    ledger = Ledger()
    loop = create_scratch_loop(ledger, 16 << 20, prefill=False)
    holder = os.open(loop.device, os.O_RDONLY)
    try:
        errors = ledger.release_all()
        still = _attached(loop.device)
    finally:
        os.close(holder)
    if still:
        # the kernel detaches it now that the last holder closed it (autoclear)
        for _ in range(50):
            if not _attached(loop.device):
                break
            time.sleep(0.1)
    assert not (still and not errors), \
        f"{loop.device} was still attached after release_all() reported no error"
    if still:  # and the error says who held it: this very process
        assert f"pid {os.getpid()} (" in " ".join(map(str, errors)), errors


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_orphaned_ignores_junk(tmp_path: Path) -> None:
    d = tmp_path / "ledger"
    d.mkdir()
    (d / "notapid.json").write_text("not json")
    out = resources.orphaned(d)
    assert [(f.name, items) for f, items in out] == [("notapid.json", [])]
