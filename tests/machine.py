"""The suite in parallel (pytest-xdist) on one machine: how many workers, and who may share it.

Worker count. `-n auto` asks `workers_for_this_machine()`: the CPUs this process may really
use (its affinity mask, then its cgroup's CPU quota, v2 `cpu.max` or v1 `cpu.cfs_quota_us`),
plus one, between 2 and 6. One more than the CPUs because most of the suite waits (fio on a
loop device, a TCG guest booting, PostgreSQL, sleeps in kill campaigns): on the 2-core machine
3 workers measured faster than 2, and more adds memory and I/O pressure without CPU to use it
(docs/architecture.md#the-test-suite-in-parallel). IOLAB_TEST_WORKERS overrides.

Whole machine. A test that measures a proportion or a timing (BFQ splitting by weight, a tenant
alone against beside four groups, a budget's wall-clock bound, kills at random instants of a
run whose length a warm-up measured) carries `@pytest.mark.whole_machine`: it runs alone. The
rule is a reader-writer lock over the workers, flock(2) on a file of the session: a
whole-machine test holds it exclusively from its set-up to its teardown, every other test
holds it shared. A turnstile (a second lock file) gives a waiting whole-machine test priority
over readers arriving after it, so it waits for the tests already running and no longer: plain
flock would let a stream of shared holders starve it.

The reproduce run. The `reproduced` session fixture (tests/studies/conftest.py) runs
`iolab reproduce --quick` once, on one worker (its tests are one xdist group), for a quarter of
an hour: the quick studies boot TCG guests and measure. A whole-machine test beside it would
measure against those guests (the one loaded run of the first design failed that way: STREAM
against sysbench out of its band), so the two exclude each other through a third lock file,
`reproduce`, taken before the others: the reproduce run holds it shared (then the main lock
shared, like any test), a whole-machine test holds it exclusively (then the gate and the main
lock). A whole-machine test that finds the reproduce run going waits at that lock alone,
without the gate, so ordinary tests keep running beside the reproduce run; it never waits at
the gate for the reproduce run either, since the run takes the main lock only while it holds
`reproduce`. Every holder takes the locks in one order (reproduce, gate, main): no cycle, no
deadlock. The whole-machine tests are one xdist group too (tests/conftest.py), so at most one
worker waits for the reproduce run; xdist hands its largest groups out first, so the
reproduce group and the whole-machine group start at once on two workers and whichever gets
the lock first goes first: the suite takes about reproduce + whole-machine tests + a tail.
That cost a worker for the whole reproduce run (the whole-machine group's, waiting at the lock),
so the suite hands out its own order instead (`queue_rank`): the reproduce run first, the
whole-machine group last.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

ENV_WORKERS = "IOLAB_TEST_WORKERS"
ENV_LOCK_DIR = "IOLAB_TEST_LOCK_DIR"  # set by the controlling pytest; its workers inherit it
MIN_WORKERS, MAX_WORKERS = 2, 6
NOTES: list[str] = []  # this process's timings of the serial part (the reproduce run, whole_machine tests)
WAIT_LIMIT_S = 5400.0  # a lock not got in 90 min (CI's limit) is a bug (a leaked holder), not a busy machine


def usable_cpus() -> float:
    """CPUs this process may run on: its affinity mask, capped by its cgroup's CPU quota."""
    cpus: float = len(os.sched_getaffinity(0))
    quota = cgroup_cpu_quota()
    return min(cpus, quota) if quota is not None else cpus


def cgroup_cpu_quota(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
                     ) -> float | None:
    """The CPU quota (in CPUs) of this process's cgroup and its ancestors, the smallest; None if unlimited."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    found: list[float] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        if controllers == "":  # v2: cpu.max = "<quota> <period>" or "max <period>"
            base, files = root if not (root / "unified").is_dir() else root / "unified", ("cpu.max",)
        elif "cpu" in controllers.split(","):
            base, files = root / "cpu", ("cpu.cfs_quota_us", "cpu.cfs_period_us")
        else:
            continue
        d = base / rel
        while True:
            q = _quota_in(d, files)
            if q is not None:
                found.append(q)
            if d == base or base not in d.parents:
                break
            d = d.parent
    return min(found) if found else None


def _quota_in(d: Path, files: tuple[str, ...]) -> float | None:
    try:
        if len(files) == 1:
            quota, period = (d / files[0]).read_text().split()
        else:
            quota, period = (d / files[0]).read_text().strip(), (d / files[1]).read_text().strip()
    except (OSError, ValueError):
        return None
    if quota in ("max", "-1"):
        return None
    return int(quota) / int(period)


def queue_rank(reproduce: bool, dead_owners: bool, whole_machine: bool) -> int:
    """Where a test goes in the queue xdist hands out (tests/conftest.py sorts by this, and turns
    off xdist's own largest-group-first order): the reproduce run first, so it starts at once on
    one worker; the dead-owners group next, so its serial queue runs beside it on another; the
    ordinary tests; the whole-machine group last. Queued early, the whole-machine group's worker
    sat waiting for the reproduce run's lock for the whole run (9 min of one worker of three in
    the measured run); last, it is taken when the ordinary work is handed out, runs alone while
    the others finish, and no worker waits for the reproduce run."""
    if reproduce:
        return 0
    if whole_machine:
        return 3
    return 1 if dead_owners else 2


def workers_for_this_machine() -> int:
    env = os.environ.get(ENV_WORKERS)
    if env:
        return int(env)
    return max(MIN_WORKERS, min(MAX_WORKERS, int(usable_cpus()) + 1))


class MachineLock:
    """The session's reader-writer lock (see the module docstring); one per pytest process."""

    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self.gate = os.open(directory / "gate", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.main = os.open(directory / "machine", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.reproduce = os.open(directory / "reproduce", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[float]:
        """Alone on the machine (among this session's tests); yields the seconds waited."""
        t0 = time.monotonic()
        _flock(self.reproduce, fcntl.LOCK_EX, t0)  # the reproduce run ends (ordinary tests go on meanwhile)
        try:
            with self._through_gate(fcntl.LOCK_EX, t0):  # later readers queue behind us at the gate
                yield time.monotonic() - t0
        finally:
            fcntl.flock(self.reproduce, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def reproduce_run(self) -> Iterator[float]:
        """The session's one reproduce run: beside ordinary tests, never beside a whole-machine test."""
        t0 = time.monotonic()
        _flock(self.reproduce, fcntl.LOCK_SH, t0)
        try:
            with self.shared():
                yield time.monotonic() - t0
        finally:
            fcntl.flock(self.reproduce, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def shared(self) -> Iterator[float]:
        t0 = time.monotonic()
        with self._through_gate(fcntl.LOCK_SH, t0):
            yield time.monotonic() - t0

    @contextlib.contextmanager
    def _through_gate(self, op: int, t0: float) -> Iterator[None]:
        """The machine lock in mode `op`, taken through the gate: a writer waiting at the gate holds
        back readers that come after it, and the tests already running end before it goes on."""
        _flock(self.gate, op, t0)
        try:
            _flock(self.main, op, t0)
        finally:
            fcntl.flock(self.gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self.main, fcntl.LOCK_UN)


_session_lock: MachineLock | None = None


def session_lock() -> MachineLock:
    """This process's one MachineLock (flock locks belong to an open file: a second one would be a
    second holder, and releasing a lock taken twice through one descriptor releases it)."""
    global _session_lock
    if _session_lock is None:
        _session_lock = MachineLock(Path(os.environ[ENV_LOCK_DIR]))
    return _session_lock


def _flock(fd: int, op: int, t0: float) -> None:
    """flock, waiting at most WAIT_LIMIT_S from t0 (polled: a blocking flock cannot time out)."""
    while True:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() - t0 > WAIT_LIMIT_S:
                raise TimeoutError(f"the suite's machine lock was not free in {WAIT_LIMIT_S:.0f} s: a process "
                                   "that inherited it holds it (tests/machine.py)") from None
            time.sleep(0.05)
