"""A trial cgroup its owner left frozen: `iolab clean --all` must still end its processes.

iolab ends a trial's processes through the freezer (freeze, SIGKILL all, thaw:
cgroups/processes.py). An owner killed between the freeze and the thaw leaves the group
frozen, and a SIGKILLed task of a frozen group does not die until the group is thawed: the
process sweep waited 15 s five times over for each such process (a CI run's `clean --all`
timed out at 180 s on three of them). Made for real here: an owner process makes a tagged
trial cgroup, starts a tagged `sleep` in it, freezes it, and dies.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from tests.core.helpers import Lab

FREEZER_V1 = Path("/sys/fs/cgroup/freezer")

OWNER = r"""
import os, subprocess, sys, time
from pathlib import Path
root, state, frozen, label = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
start = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]
token = f"o{os.getpid()}.{start}"
group = root / f"iolab-{token}-trial-{label}" / "s-frozen"
group.mkdir(parents=True)
child = subprocess.Popen(["sleep", "600"], env={**os.environ, "IOLAB_OWNER": token}, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
(group / "cgroup.procs").write_text(str(child.pid))
(group.parent / state).write_text(frozen)
print(child.pid, group.parent, flush=True)
"""  # the owner exits here without thawing: as if killed between freeze and thaw


def _freezer() -> tuple[Path, str, str]:
    if (FREEZER_V1 / "freezer.state").exists() or FREEZER_V1.is_dir():
        return FREEZER_V1, "freezer.state", "FROZEN"
    v2 = Path("/sys/fs/cgroup")
    if (v2 / "cgroup.controllers").exists():
        return v2, "cgroup.freeze", "1"
    pytest.skip("no cgroup freezer here (neither v1 freezer nor cgroup2)")


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


@pytest.mark.dead_owners  # `clean --all` takes any dead owner's leftovers, and this test's leftover is one
def test_clean_all_ends_the_processes_of_a_trial_cgroup_its_dead_owner_left_frozen(lab: Lab) -> None:
    root, state, frozen = _freezer()
    label = uuid.uuid4().hex[:8]
    made = subprocess.run([sys.executable, "-c", OWNER, str(root), state, frozen, label],
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    pid_s, group_s = made.stdout.split()
    pid, group = int(pid_s), Path(group_s)
    try:
        assert (group / state).read_text().strip() == frozen
        assert _state(pid) == "D", "the leftover must really be frozen for the test to mean anything"
        t0 = time.monotonic()
        r = lab.iolab("clean", "--all", timeout=120)
        took = time.monotonic() - t0
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"process {pid}" in r.stdout, r.stdout
        assert str(group) in r.stdout, r.stdout
        # old code: 5 rounds of a 15 s wait for a task that cannot die while frozen (>= 75 s)
        assert took < 30, f"clean --all took {took:.1f} s: it waited on a frozen task"
        deadline = time.monotonic() + 10
        while _state(pid) not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _state(pid) in (None, "Z"), f"the frozen leftover {pid} is still alive ({_state(pid)})"
        assert not group.exists()
    finally:  # never leave a frozen group behind, whatever failed
        if group.exists():
            for d in sorted(group.rglob("*"), reverse=True):
                if d.is_dir() and (d / state).exists():
                    (d / state).write_text("THAWED" if state == "freezer.state" else "0")
            (group / state).write_text("THAWED" if state == "freezer.state" else "0")
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
