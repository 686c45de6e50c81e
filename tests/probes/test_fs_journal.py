"""Probe fs_journal on a real ext4 scratch loop device: O_SYNC appends commit the journal once
per write, O_SYNC overwrites of a laid-out file almost never (the count the write-modes
cross-check uses as evidence)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from iolab.cgroups.executor import HostExecutor
from iolab.core.resources import Ledger
from iolab.probes import registry as probe_registry
from iolab.probes.fs_journal import FsJournal, journal_of, parse_info
from iolab.targets.base import Placement
from iolab.targets.loop import ScratchLoop, create_scratch_loop, release_scratch_loop


def test_parse_info_reads_the_first_line() -> None:
    text = "1582 transactions (1580 requested), each up to 2730 blocks\nper-transaction ...\n"
    assert parse_info(text) == (1582, 1580)
    with pytest.raises(ValueError):
        parse_info("not jbd2")


@pytest.fixture()
def ext4(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ScratchLoop]:
    monkeypatch.setenv("IOLAB_SCRATCH", str(tmp_path / "scratch"))
    ledger = Ledger(tmp_path / "ledger")
    loop = create_scratch_loop(ledger, 64 << 20, filesystem="ext4", prefill=False, label="test-journal")
    try:
        yield loop
    finally:
        release_scratch_loop(ledger, loop)


CLOCK_REALTIME_COARSE = 5  # Linux's clock id (<linux/time.h>); Python's time module does not name it


def _sync_writes(path: Path, n: int, bs: int = 4096) -> tuple[int, float]:
    """n O_SYNC writes; (distinct values of the coarse clock seen at the writes, seconds taken).

    The coarse clock (CLOCK_REALTIME_COARSE) is the one ext4 stamps mtime from: an overwrite
    changes the inode, and so commits the journal, only when it has ticked since the last one,
    which on a slow or busy machine can be every write.

    The kernel reads that clock inside the write, between a reading just before and one just
    after it: a tick neither reading saw (the writer preempted in between, as beside a parallel
    suite: 40 commits against 35 ticks seen before the writes alone) is counted from the gap."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_SYNC, 0o600)
    ticks: set[float] = set()
    unseen = 0  # ticks that passed inside a write between its two readings, none of them read
    res = time.clock_getres(CLOCK_REALTIME_COARSE)
    t0 = time.monotonic()
    try:
        for i in range(n):
            before = time.clock_gettime(CLOCK_REALTIME_COARSE)
            os.pwrite(fd, b"x" * bs, i * bs)
            after = time.clock_gettime(CLOCK_REALTIME_COARSE)
            ticks |= {before, after}
            unseen += max(0, round((after - before) / res) - 1)
    finally:
        os.close(fd)
    return len(ticks) + unseen, time.monotonic() - t0


def _multigrain_timestamps() -> bool:
    """Whether the running kernel hands out multigrain timestamps (its coarse-time helper for them exists)."""
    try:
        with open("/proc/kallsyms") as f:
            return any(line.rstrip().endswith(" ktime_get_coarse_real_ts64_mg") for line in f)
    except OSError:
        return True  # unknown: the weaker bound, which holds either way


def test_appends_commit_once_per_write_overwrites_do_not(ext4: ScratchLoop) -> None:
    assert ext4.mountpoint is not None
    assert journal_of(str(ext4.mountpoint)) is not None, "ext4 on the scratch loop device has a journal"
    ex = HostExecutor()
    try:
        placement = Placement(executor=ex, directory=str(ext4.mountpoint))
        assert FsJournal.applies_to(placement)
        f = ext4.mountpoint / "data"
        probe = FsJournal()
        probe.start(placement)
        _sync_writes(f, 200)                     # appends: the size changes with every write
        appended = probe.stop()
        probe = FsJournal()
        probe.start(placement)
        ticks, seconds = _sync_writes(f, 200)    # the same offsets again: no size change
        overwritten = probe.stop()
    finally:
        ex.close()
    assert 195 <= appended["commits"] <= 205, appended
    if not _multigrain_timestamps():
        # only when the coarse mtime ticks (+ jbd2's own commit every 5 s, + the one already open):
        # on an idle machine a few ticks for 200 writes; never more than one per tick, busy or not
        assert overwritten["commits"] <= ticks + seconds / 5 + 2, (overwritten, ticks, seconds)
    # With multigrain timestamps (Linux 6.13+, ext4 among them) a "coarse" stamp is the later of the coarse
    # clock and a machine-wide floor that every fine-grained stamp handed out anywhere moves up, so on a busy
    # machine mtime advances between ticks the writer can see (39 commits against 19 ticks beside the parallel
    # suite and stress-ng); and the file's own stamp cannot be read without making the next one fine-grained.
    # What holds on every kernel, busy or not, is what the write-modes cross-check reads: overwrites commit far
    # less often than appends, which commit once per write.
    if ticks < 100:
        assert overwritten["commits"] < appended["commits"] / 2, (overwritten, appended, ticks)
    assert appended["journal"].startswith(os.path.basename(ext4.device))
    declared = probe_registry.metric_set("fs_journal")
    attrs = set(probe_registry.attributes("fs_journal"))
    assert [k for k in appended if k not in attrs and k not in declared] == [], appended
