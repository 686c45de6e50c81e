"""The processes in a cgroup directory (and below): which they are, their CPU time, and
ending them all. Works on v1 (cpuacct, freezer) and v2 directories alike: what a
directory offers decides how (`cgroup.kill`, `freezer.state`, `cgroup.freeze`, `cpuacct.*`,
`cpu.stat`), so a ledger entry needs to record only paths. Used by trial cgroups
(cgroups.trial) and their cleaners.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

from iolab.cgroups import fs
from iolab.core import signals

KILL_WAIT_S = 30.0  # a process in uninterruptible I/O dies when its I/O completes
FREEZE_WAIT_S = 2.0  # then kill anyway: a task in D state delays freezing, not SIGKILL


def cpu_times(d: Path) -> tuple[float, float, float]:
    """(total, user, system) CPU seconds of everything that ran in `d` and below since it was made.

    The total is the scheduler's exact runtime (`cpuacct.usage`, `usage_usec`). The kernel
    splits it into user and system time by sampling at ticks; v2 scales that split to the
    total, and so does this function on v1, so user + system == total on both."""
    usage = d / "cpuacct.usage"
    if usage.exists():
        total = int(fs.read_value(usage)) / 1e9
        try:
            user, system = int(fs.read_value(d / "cpuacct.usage_user")), int(fs.read_value(d / "cpuacct.usage_sys"))
        except FileNotFoundError:  # kernels before 4.7: the split only in clock ticks
            stat = dict(line.split() for line in (d / "cpuacct.stat").read_text().splitlines())
            user, system = int(stat["user"]), int(stat["system"])
        share = user / (user + system) if user + system else 1.0
        return total, total * share, total * (1.0 - share)
    stat = dict(line.split() for line in (d / "cpu.stat").read_text().splitlines() if line.strip())
    return int(stat["usage_usec"]) / 1e6, int(stat["user_usec"]) / 1e6, int(stat["system_usec"]) / 1e6


def pids(d: Path) -> list[int]:
    """Every process in `d` and its descendants (zombies are not listed by the kernel)."""
    out: list[int] = []
    try:
        subs = [Path(root) for root, _dirs, _files in os.walk(d)]
    except OSError:
        return out
    for sub in subs:
        try:
            out += fs.pids(sub)
        except OSError:  # removed meanwhile
            continue
    return out


def populated(d: Path) -> bool:
    """Does a live process remain in `d` or below?"""
    try:
        events = (d / "cgroup.events").read_text()
    except FileNotFoundError:
        return bool(pids(d))  # v1: no events file
    return "populated 1" in events.splitlines()


def kill(d: Path, wait_s: float = KILL_WAIT_S) -> None:
    """SIGKILL every process in `d` and below, and return once none is left.

    Raises RuntimeError naming the survivors if they outlive `wait_s` (a task stuck in
    uninterruptible I/O)."""
    if not d.is_dir():
        return
    deadline = time.monotonic() + wait_s
    delay = 0.005
    next_kill = 0.0
    while populated(d):
        now = time.monotonic()
        if now > deadline:
            raise RuntimeError(f"{d}: processes {sorted(pids(d))} still alive {wait_s:.0f} s after SIGKILL")
        if now >= next_kill:  # again now and then: a process can still be joining the group
            _kill_once(d)
            next_kill = now + 0.5
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _kill_once(d: Path) -> None:
    try:
        if (d / "cgroup.kill").exists():
            fs.write_value(d / "cgroup.kill", "1")  # the kernel kills the subtree, forks included
        elif (d / "freezer.state").exists():
            _frozen_kill(d, d / "freezer.state", "FROZEN", "THAWED")
        elif (d / "cgroup.freeze").exists():
            _frozen_kill(d, d / "cgroup.freeze", "1", "0")
        else:
            _signal_all(d)  # cpuacct alone cannot freeze: its processes are ended through the freezer
    except FileNotFoundError:
        return  # removed meanwhile: nothing left to kill


def _frozen_kill(d: Path, state: Path, frozen: str, thawed: str) -> None:
    """Freeze, so nothing forks between listing and killing; SIGKILL all; thaw, so they die.

    The stop signals are held over the window: a Ctrl-C (a second one, while the first is being
    cleaned up) raised between the freeze and the thaw would leave the group frozen and its
    SIGKILLed tasks alive for good (`iolab clean` thaws a dead owner's frozen group too)."""
    with signals.held():
        fs.write_value(state, frozen)
        try:
            deadline = time.monotonic() + FREEZE_WAIT_S
            while not _is_frozen(d, state, frozen) and time.monotonic() < deadline:
                time.sleep(0.005)
            _signal_all(d)
        finally:
            fs.write_value(state, thawed)


def _is_frozen(d: Path, state: Path, frozen: str) -> bool:
    if state.name == "freezer.state":
        return fs.read_value(state) == frozen
    return "frozen 1" in (d / "cgroup.events").read_text().splitlines()


def _signal_all(d: Path) -> None:
    me = os.getpid()
    for pid in pids(d):
        if pid == me:
            continue  # never ourselves, whatever happened to the group
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def destroy(dirs: Sequence[Path]) -> None:
    """Kill everything in these directories (the same cgroup in each hierarchy), then remove them."""
    ordered = sorted(dirs, key=lambda d: not _can_end(d))  # end through a freezer first
    for d in ordered:
        kill(d)
    for d in ordered:
        fs.remove_tree(d, dest=d.parent, kill=True)


def _can_end(d: Path) -> bool:
    return any((d / f).exists() for f in ("cgroup.kill", "freezer.state", "cgroup.freeze"))


def make(dirs: Sequence[Path]) -> None:
    """mkdir each (the same cgroup in each hierarchy); none is left if one fails."""
    made: list[Path] = []
    try:
        for d in dirs:
            d.mkdir()
            made.append(d)
    except BaseException:
        for d in reversed(made):
            fs.rmdir_retry(d)
        raise
