"""Suite-wide set-up: the stop signals reach every iolab the tests start.

A shell without job control starts a background command with SIGINT ignored (`bash .ci/run &`
from a script), and `nohup` ignores SIGHUP. An ignored signal stays ignored across exec, and
iolab deliberately honours that (`nohup iolab run ...` survives a hang-up). The tests that
send SIGINT, SIGTERM or SIGHUP to an iolab they started must therefore start it with those
signals at their defaults: pytest catches them itself (a Python handler, which exec resets to
the default in every child) instead of ignoring them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest

from iolab.core import owner
from iolab.core.signals import STOP_SIGNALS
from tests import leaks, machine


def restore_stop_signals() -> list[str]:
    """Catch instead of ignore every stop signal this process inherited as ignored; returns their names.
    pytest itself still ignores SIGTERM and SIGHUP as it was asked to; SIGINT interrupts it again."""
    restored = []
    for s in STOP_SIGNALS:
        if signal.getsignal(s) == signal.SIG_IGN:
            signal.signal(s, signal.default_int_handler if s == signal.SIGINT else _ignore)
            restored.append(s.name)
    return restored


def _ignore(signum: int, frame: object) -> None:
    """Ignore in pytest, default in children (exec resets a caught signal, not an ignored one)."""


RESTORED = restore_stop_signals()


# --- the suite in parallel (tests/machine.py) and the leak check (tests/leaks.py) -------------------

REPRODUCE_GROUP = "reproduce"  # every test of the `reproduced` session fixture: one worker, one reproduce run
WHOLE_MACHINE_GROUP = "whole_machine"  # every whole_machine test: one worker queues them (tests/machine.py)
# every dead_owners test: `iolab clean` takes what any dead owner left, so a clean in one test took (and
# failed on: fio in D state) what another worker's test had just made by killing its iolab
DEAD_OWNERS_GROUP = "dead_owners"
_leftovers: dict[str, dict[str, list[str]]] = {}  # owner token -> what it left, reported at the session's end
_alive: dict[str, list[str]] = {}  # owner token -> its processes still alive at the end (a warning)
_per_test: dict[str, list[str]] = {}  # test id -> what it left (cgroups, netns) that was not there before it
_notes: list[str] = []  # the workers' timings of the suite's serial part (machine.NOTES), printed at the end
_timeline: list[list[Any]] = []  # [worker, test id, start, end] (wall clock), this process's then all workers'


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and not os.environ.get(machine.ENV_LOCK_DIR):
        # the controlling process (or a serial run): one lock directory for the session, inherited by the workers
        os.environ[machine.ENV_LOCK_DIR] = tempfile.mkdtemp(prefix=f"iolab-test-lock-{os.getpid()}-", dir="/tmp")
        config.stash[_LOCK_DIR_MADE] = True
    if hasattr(config.option, "loadscopereorder"):  # xdist: hand the work out in our order (queue_rank),
        config.option.loadscopereorder = False      # not its own largest-group-first


_LOCK_DIR_MADE = pytest.StashKey[bool]()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: the CPUs this process may use plus one, bounded (tests/machine.py)."""
    return machine.workers_for_this_machine()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put every test of the `reproduced` fixture in one xdist group: a session fixture runs once per
    worker, and a second `iolab reproduce --quick` would cost a quarter of an hour. Put every
    whole_machine test in another: they run one at a time anyway, and queued on one worker only
    that worker waits while the reproduce run excludes them (tests/machine.py). Runs before
    xdist's own hook, which reads the group marks. Then the order the work is handed out in
    (machine.queue_rank): the reproduce run first, the whole_machine tests last."""
    both = []
    rank: dict[str, int] = {}
    for item in items:
        reproduce = "reproduced" in getattr(item, "fixturenames", ())
        whole = item.get_closest_marker("whole_machine") is not None
        rank[item.nodeid] = machine.queue_rank(reproduce, item.get_closest_marker("dead_owners") is not None, whole)
        if reproduce and whole:
            both.append(item.nodeid)
        elif reproduce:
            item.add_marker(pytest.mark.xdist_group(REPRODUCE_GROUP))
        elif whole:  # alone anyway, dead_owners or not
            item.add_marker(pytest.mark.xdist_group(WHOLE_MACHINE_GROUP))
        elif item.get_closest_marker("dead_owners") is not None:
            item.add_marker(pytest.mark.xdist_group(DEAD_OWNERS_GROUP))
        elif (group := module_fixture_group(item)) is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if both:  # it would wait for the very run it reads (the reproduce lock, tests/machine.py)
        raise pytest.UsageError("a test of the reproduce run cannot be whole_machine: " + ", ".join(both))
    items.sort(key=lambda it: rank[it.nodeid])  # stable: within a rank, the collection's order


def module_fixture_group(item: pytest.Item) -> str | None:
    """One xdist group per test module whose tests share a module-scoped fixture (a booted guest, a
    pair of measured runs): a module fixture is set up once per worker that runs any of its tests,
    and xdist spreads a module's tests over every worker (`iolab compare`'s two measured runs were set
    up twice, 135 s each). Grouped, the module's tests go to one worker and the fixture runs once."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for name in info.names_closure:
        defs = info.name2fixturedefs.get(name) or ()
        if defs and defs[-1].scope in ("module", "class", "package"):
            return "module:" + item.nodeid.split("::", 1)[0]
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Each test's set-up, call and teardown under the machine lock: alone for a whole_machine test,
    shared for any other; none here for the reproduce group, whose fixture holds the reproduce lock
    for the run itself (tests/machine.py). Then what the
    test left of this process's own tagged cgroups and network namespaces, by test id."""
    token = owner.me().token
    before = leaks.counted_now(token)
    whole = item.get_closest_marker("whole_machine") is not None
    if whole:
        hold: contextlib.AbstractContextManager[object] = machine.session_lock().exclusive()
    elif "reproduced" in getattr(item, "fixturenames", ()):
        hold = contextlib.nullcontext()
    else:
        hold = machine.session_lock().shared()
    with hold as waited:
        t0, start = time.monotonic(), time.time()
        yield
    _timeline.append([os.environ.get("PYTEST_XDIST_WORKER", "main"), item.nodeid, start, time.time()])
    if whole:  # the suite's serial part: what each whole_machine test held the machine for, and waited
        machine.NOTES.append(f"whole_machine {time.monotonic() - t0:6.0f} s held, {waited:5.0f} s waited: "
                             f"{item.nodeid}")
    new = sorted(leaks.counted_now(token) - before)
    if new:
        _per_test[item.nodeid] = new


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After every fixture's teardown: what this process (a worker, or a serial run) left; the controller
    adds what each worker reported, prints it all and fails the run."""
    config = session.config
    token = owner.me().token
    mine = leaks.left_by(token)
    alive = leaks.processes(token)
    if hasattr(config, "workerinput"):
        config.workeroutput["iolab_leftovers"] = json.dumps({"token": token, "left": mine, "by_test": _per_test,
                                                            "alive": alive, "notes": machine.NOTES,
                                                            "timeline": _timeline})
        return
    _notes.extend(machine.NOTES)
    _write_timeline(config)
    if mine:
        _leftovers[token] = mine
    if alive:
        _alive[token] = alive
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if _notes and reporter is not None:  # the critical path: the reproduce run and the whole_machine tests
        reporter.write_sep("=", "the suite's serial part (tests/machine.py)")
        for ln in sorted(_notes):
            reporter.write_line(ln)
    if _alive:  # a warning: a process still exiting under load must not fail a green run (tests/leaks.py)
        lines = [f"  {tok}: {row}" for tok, rows in sorted(_alive.items()) for row in rows]
        if reporter is not None:
            reporter.write_sep("=", "warning: still alive at the session's end", yellow=True)
            for ln in lines:
                reporter.write_line(ln)
        else:
            print("\n".join(lines))
    if config.stash.get(_LOCK_DIR_MADE, False):
        shutil.rmtree(os.environ.pop(machine.ENV_LOCK_DIR), ignore_errors=True)
    if _leftovers:
        lines = ["the test session left iolab resources of its own (owner tokens of pytest and its workers):"]
        for tok, kinds in sorted(_leftovers.items()):
            lines += [f"  {tok} {kind}: {', '.join(names)}" for kind, names in kinds.items()]
        lines += [f"  after {test}: {', '.join(names)}" for test, names in sorted(_per_test.items())]
        if reporter is not None:
            reporter.write_sep("=", "LEFT BEHIND", red=True, bold=True)
            for ln in lines:
                reporter.write_line(ln)
        else:
            print("\n".join(lines))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist controller: a worker ended; keep what it reported having left."""
    raw = getattr(node, "workeroutput", {}).get("iolab_leftovers")
    if not raw:
        return
    report = json.loads(raw)
    if report["left"]:
        _leftovers[report["token"]] = report["left"]
    if report.get("alive"):
        _alive[report["token"]] = report["alive"]
    _per_test.update(report["by_test"])
    _notes.extend(report.get("notes", []))
    _timeline.extend(report.get("timeline", []))


def _write_timeline(config: pytest.Config) -> None:
    """Where the suite's time went, per worker: busy seconds (set-up, test and teardown, the
    machine lock held) against the session's span, and the slowest tests on each. Idle time on a
    worker is time the suite could lose only by rebalancing; a worker busy to the end is the
    critical path. IOLAB_TEST_TIMELINE=FILE also writes every test's [worker, id, start, end]."""
    if not _timeline:
        return
    path = os.environ.get("IOLAB_TEST_TIMELINE")
    if path:
        with open(path, "w") as f:
            json.dump(sorted(_timeline, key=lambda r: r[2]), f)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    t0, t1 = min(r[2] for r in _timeline), max(r[3] for r in _timeline)
    reporter.write_sep("=", f"where the time went: {t1 - t0:.0f} s from the first test's start to the last's end")
    for worker in sorted({r[0] for r in _timeline}):
        rows = [r for r in _timeline if r[0] == worker]
        busy, last = sum(r[3] - r[2] for r in rows), max(r[3] for r in rows)
        top = ", ".join(f"{r[1].split('::')[-1][:48]} {r[3] - r[2]:.0f} s"
                        for r in sorted(rows, key=lambda r: r[2] - r[3])[:3])
        reporter.write_line(f"{worker}: {len(rows)} tests, {busy:5.0f} s busy, done at +{last - t0:5.0f} s; "
                            f"slowest: {top}")
