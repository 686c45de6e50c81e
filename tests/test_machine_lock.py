"""The suite's own parallel machinery (tests/machine.py): the reader-writer lock between xdist
workers, in real separate processes, and the worker count from a cgroup's CPU quota.

Wrong programs these catch: a lock that lets a whole-machine test start beside a running test,
or two whole-machine tests together; one where a stream of ordinary tests starves a waiting
whole-machine test (plain flock: a shared lock is granted while an exclusive one waits); a
reproduce run that a whole-machine test runs beside (the first design's: STREAM against sysbench
measured beside TCG guests), or one where a whole-machine test waiting for the reproduce run holds
the gate and so stops every ordinary test for a quarter of an hour; a quota parser that ignores
v1's cfs files, takes "max" or -1 for a number, or reads the root instead of the process's own
group.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

import pytest

from tests import machine

CTX = mp.get_context("spawn")  # a fresh interpreter: no lock file descriptor inherited


def _hold(directory: str, mode: str, seconds: float, log: str, name: str) -> None:
    lock = machine.MachineLock(Path(directory))
    hold = {"ex": lock.exclusive, "sh": lock.shared, "rep": lock.reproduce_run}[mode]
    with hold():
        with open(log, "a") as f:
            f.write(f"{time.monotonic():.4f} start {name}\n")
        time.sleep(seconds)
        with open(log, "a") as f:
            f.write(f"{time.monotonic():.4f} end {name}\n")


def _events(log: Path) -> list[tuple[float, str, str]]:
    rows = [line.split() for line in log.read_text().splitlines()]
    return sorted((float(t), what, name) for t, what, name in rows)


def _intervals(log: Path) -> dict[str, tuple[float, float]]:
    ev = _events(log)
    return {name: (next(t for t, w, n in ev if n == name and w == "start"),
                   next(t for t, w, n in ev if n == name and w == "end")) for _, _, name in ev}


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _start(tmp: Path, mode: str, seconds: float, name: str) -> mp.process.BaseProcess:
    p = CTX.Process(target=_hold, args=(str(tmp / "lock"), mode, seconds, str(tmp / "log"), name))
    p.start()
    return p


def _wait_for(log: Path, text: str, limit: float = 30) -> None:
    deadline = time.monotonic() + limit
    while not (log.exists() and text in log.read_text()):
        assert time.monotonic() < deadline, f"{text!r} never logged"
        time.sleep(0.02)


def test_readers_share_and_a_writer_is_alone(tmp_path: Path) -> None:
    log = tmp_path / "log"
    r1 = _start(tmp_path, "sh", 1.5, "r1")
    r2 = _start(tmp_path, "sh", 1.5, "r2")
    _wait_for(log, "start r1")
    _wait_for(log, "start r2")
    w = _start(tmp_path, "ex", 0.5, "w")
    for p in (r1, r2, w):
        p.join(60)
        assert p.exitcode == 0
    iv = _intervals(log)
    assert _overlap(iv["r1"], iv["r2"]), iv  # shared holders run together
    assert not _overlap(iv["w"], iv["r1"]) and not _overlap(iv["w"], iv["r2"]), iv


def test_a_waiting_writer_goes_before_readers_that_came_after_it(tmp_path: Path) -> None:
    log = tmp_path / "log"
    first = _start(tmp_path, "sh", 1.5, "first")
    _wait_for(log, "start first")
    w = _start(tmp_path, "ex", 0.5, "w")
    time.sleep(0.5)  # the writer is waiting for `first` now
    late = [_start(tmp_path, "sh", 1.5, f"late{i}") for i in range(3)]
    for p in (first, w, *late):
        p.join(60)
        assert p.exitcode == 0
    iv = _intervals(log)
    assert iv["w"][0] >= iv["first"][1], iv  # it waited for the test already running...
    for i in range(3):  # ...and no later one started before it ended
        assert iv[f"late{i}"][0] >= iv["w"][1], iv


def test_two_writers_never_together(tmp_path: Path) -> None:
    log = tmp_path / "log"
    ws = [_start(tmp_path, "ex", 0.4, f"w{i}") for i in range(3)]
    for p in ws:
        p.join(60)
        assert p.exitcode == 0
    iv = _intervals(log)
    for i in range(3):
        for j in range(i + 1, 3):
            assert not _overlap(iv[f"w{i}"], iv[f"w{j}"]), iv


def test_a_writer_waits_for_the_reproduce_run_while_readers_go_on(tmp_path: Path) -> None:
    log = tmp_path / "log"
    rep = _start(tmp_path, "rep", 2.5, "rep")
    _wait_for(log, "start rep")
    w = _start(tmp_path, "ex", 0.3, "w")
    time.sleep(0.5)  # the writer waits for the reproduce run now
    r = _start(tmp_path, "sh", 0.3, "r")
    for p in (rep, w, r):
        p.join(60)
        assert p.exitcode == 0
    iv = _intervals(log)
    assert iv["w"][0] >= iv["rep"][1], iv  # never beside the reproduce run
    assert iv["r"][1] <= iv["rep"][1], iv  # an ordinary test came, ran and ended meanwhile: no gate held
    assert not _overlap(iv["w"], iv["r"]), iv


def test_the_reproduce_run_waits_for_a_running_writer(tmp_path: Path) -> None:
    log = tmp_path / "log"
    w = _start(tmp_path, "ex", 1.5, "w")
    _wait_for(log, "start w")
    rep = _start(tmp_path, "rep", 0.3, "rep")
    r = _start(tmp_path, "sh", 0.3, "r")
    for p in (w, rep, r):
        p.join(60)
        assert p.exitcode == 0
    iv = _intervals(log)
    assert iv["rep"][0] >= iv["w"][1], iv
    assert iv["r"][0] >= iv["w"][1], iv


def _cgroup_tree(tmp: Path, proc: str, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp / "fs"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (tmp / "cgroup").write_text(proc)
    return tmp / "cgroup", root


def test_cpu_quota_of_the_process_group_and_its_parents(tmp_path: Path) -> None:
    # v1: 150000/100000 in the job's group, a tighter 50000/100000 above it, none at the root
    proc, root = _cgroup_tree(tmp_path, "4:cpu,cpuacct:/ci/job\n3:memory:/ci/job\n", {
        "cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n",
        "cpu/ci/cpu.cfs_quota_us": "50000\n", "cpu/ci/cpu.cfs_period_us": "100000\n",
        "cpu/ci/job/cpu.cfs_quota_us": "150000\n", "cpu/ci/job/cpu.cfs_period_us": "100000\n"})
    assert machine.cgroup_cpu_quota(proc, root) == 0.5


def test_cpu_quota_v2_and_unlimited(tmp_path: Path) -> None:
    proc, root = _cgroup_tree(tmp_path / "a", "0::/ci/job\n", {
        "cpu.max": "max 100000\n", "ci/cpu.max": "max 100000\n", "ci/job/cpu.max": "250000 100000\n"})
    assert machine.cgroup_cpu_quota(proc, root) == 2.5
    proc, root = _cgroup_tree(tmp_path / "b", "0::/ci/job\n", {"ci/job/cpu.max": "max 100000\n"})
    assert machine.cgroup_cpu_quota(proc, root) is None
    assert machine.cgroup_cpu_quota(tmp_path / "missing", root) is None


def test_worker_count_is_bounded_and_overridable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(machine.ENV_WORKERS, raising=False)
    for cpus, expect in ((1, 2), (2, 3), (4, 5), (64, machine.MAX_WORKERS)):
        monkeypatch.setattr(machine, "usable_cpus", lambda c=cpus: float(c))
        assert machine.workers_for_this_machine() == expect
    monkeypatch.setenv(machine.ENV_WORKERS, "7")
    assert machine.workers_for_this_machine() == 7


def test_the_queue_starts_the_reproduce_run_and_ends_with_the_whole_machine_tests() -> None:
    ranks = {(r, d, w): machine.queue_rank(r, d, w) for r in (False, True) for d in (False, True)
             for w in (False, True) if not (r and w)}
    first, last = min(ranks.values()), max(ranks.values())
    assert {k for k, v in ranks.items() if v == first} == {(True, False, False), (True, True, False)}
    assert {k for k, v in ranks.items() if v == last} == {(False, False, True), (False, True, True)}
    assert ranks[(False, True, False)] < ranks[(False, False, False)]  # the dead-owners queue starts early


def test_the_collected_order_is_the_queue_order(request: pytest.FixtureRequest) -> None:
    """tests/conftest.py sorted this very session: no whole_machine test before an ordinary one,
    no reproduce test after one, and xdist's own reordering is off."""
    items = request.session.items
    kinds = [("reproduced" in getattr(i, "fixturenames", ()), i.get_closest_marker("dead_owners") is not None,
              i.get_closest_marker("whole_machine") is not None) for i in items]
    ranks = [machine.queue_rank(*k) for k in kinds]
    assert ranks == sorted(ranks)
    if hasattr(request.config.option, "loadscopereorder"):
        assert request.config.option.loadscopereorder is False


@pytest.fixture(scope="module")
def _set_up_once_per_module() -> list[int]:
    return []


def test_a_module_fixture_user(_set_up_once_per_module: list[int]) -> None:
    """One of two tests sharing a module fixture (read by the next test)."""
    _set_up_once_per_module.append(1)


def test_a_modules_shared_fixture_keeps_its_tests_on_one_worker(request: pytest.FixtureRequest,
                                                                 _set_up_once_per_module: list[int]) -> None:
    """tests/conftest.py put the tests of a module that share a module-scoped fixture in one xdist
    group named after the module (a worker sets a module fixture up for itself: spread over the
    workers, `iolab compare`'s measured runs were set up twice), and left every other test out of it."""
    from tests.conftest import module_fixture_group

    def groups(item: pytest.Item) -> list[str]:
        return [m.args[0] if m.args else m.kwargs["name"] for m in item.iter_markers("xdist_group")]

    here = [i for i in request.session.items if i.nodeid.startswith("tests/test_machine_lock.py::")]
    users = {i.name for i in here if "_set_up_once_per_module" in i.fixturenames}
    assert users == {"test_a_module_fixture_user", "test_a_modules_shared_fixture_keeps_its_tests_on_one_worker"}
    for item in here:
        want = ["module:tests/test_machine_lock.py"] if item.name in users else []
        assert groups(item) == want and module_fixture_group(item) == (want[0] if want else None), item.nodeid
    # and over the whole session: a module group is only ever its own module's, on tests with a module fixture
    for item in request.session.items:
        for g in groups(item):
            if g.startswith("module:"):
                assert g == "module:" + item.nodeid.split("::")[0] and module_fixture_group(item) == g, item.nodeid
