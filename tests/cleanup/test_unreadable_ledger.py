"""A dead owner's ledger that cannot be read (empty or cut short: a crash, a full disk) must not
be taken for "nothing to clean". Made for real: a loop-device study killed with SIGKILL once its
target stands, its ledger then emptied. `iolab clean` says what it cannot undo, keeps the ledger
and leaves the resources it no longer knows (nothing is removed by guess); `iolab clean --all`
finds them by their owner's tag and then removes the ledger. On the code before, `iolab clean`
deleted the ledger, printed "nothing to clean" and exited 0 with the loop device, mount and
cgroups still there.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from tests.core import owned
from tests.core.helpers import IOLAB, Lab, fio_workload, needs_fio, needs_root, study_table

pytestmark = [needs_root, needs_fio, pytest.mark.dead_owners]  # clean --all takes any dead owner's leftovers


@pytest.mark.parametrize("damage", ["empty", "cut"])
def test_an_unreadable_ledger_is_kept_and_clean_all_finds_its_owners_things(lab: Lab, damage: str) -> None:
    spec = lab.spec(study_table("unreadable", repetitions=3, max_repetitions=3)
                    + '[target]\nkind = "loop"\nsize = "64M"\nfilesystem = "ext4"\n' + fio_workload(runtime=3))
    proc = subprocess.Popen([str(IOLAB), "run", str(spec)], env=lab.env, cwd=lab.root, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    token = owned.token_of(proc.pid)
    ledger = lab.ledger_dir / f"{token}.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            kinds = {i["kind"] for i in json.loads(ledger.read_text()) if i.get("state") != "pending"}
        except (OSError, ValueError):
            kinds = set()
        if {"loop", "mount"} <= kinds:
            break
        time.sleep(0.02)
    assert proc.poll() is None, f"the run ended before its target stood: {proc.stderr.read() if proc.stderr else ''}"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if proc.stderr:
        proc.stderr.close()
    text = ledger.read_text()
    ledger.write_text("" if damage == "empty" else text[: len(text) // 2])
    assert owned.loops(token) and owned.mounts(token), "the killed run's loop device and mount stand"

    r = lab.iolab("clean", timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    said = " ".join(r.stderr.split())
    assert "unreadable" in said and str(ledger) in said and "iolab clean --all" in said, said
    assert "nothing to clean" not in r.stdout
    assert ledger.exists(), "the only trace of what may be left is kept"
    assert owned.loops(token) and owned.mounts(token), "nothing is removed by guess from an unreadable ledger"

    r = lab.iolab("clean", "--all", timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"the unreadable ledger {ledger}" in " ".join(r.stdout.split()), r.stdout
    assert not ledger.exists()
    assert owned.nothing(token, lab.scratch) == {}
    lab.assert_nothing_left()
