"""A server that does not answer, and a colleague who holds a lock: nothing waits for ever.

A stopped server closes its connections and iolab reconnects (test_pg_outage.py). A *frozen*
one (its processes stopped with SIGSTOP: a hung machine, a network that drops packets) closes
nothing: libpq waits on its socket as long as the server stays frozen, and before, so did the
run. A colleague's `LOCK TABLE iolab.runs` (or a long `VACUUM FULL`) made every write wait as
long as the lock was held. Both now end each attempt (store/pgconn.py: a deadline kept on the
client, and `lock_timeout` asked of the server), so the write goes to the spool within the retry
window and the run goes on; everything is written once when the server answers again.

The harm is done for real to the session's own throw-away server (tests/store/pgserver.py):
its postmaster and every backend are stopped, then continued, whatever the test does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from iolab.store import postgres
from iolab.store.pgconn import CONNECT_TIMEOUT_S, LOCK_WAIT_S
from iolab.store.pgerrors import StoreFailed
from tests.core.helpers import Lab, needs_fio, needs_root, one_line

from . import pgserver
from .pgserver import PgServer, children_of, set_read_only, signal_each
from .pgstudy import ended_whole, loop_study, made_trial, reopened, spooled_lines, stored_trials


@contextmanager
def frozen(server: PgServer) -> Iterator[None]:
    """Every process of the server stopped, and continued afterwards whatever happened.

    The postmaster is stopped first, so it forks no backend while its children are listed; a
    backend may still exit between the listing and its SIGSTOP, which is no error. Whatever was
    stopped is continued even if stopping the rest failed: this server is shared by the session,
    and a postmaster left stopped would time out every later test's connection (CI run of stop
    42: one exiting backend did exactly that to four tests)."""
    try:
        postmaster = server.postmaster()
        assert postmaster, "the server is not running"
        signal_each([postmaster], signal.SIGSTOP)
        signal_each(children_of(postmaster), signal.SIGSTOP)
        yield
    finally:
        server.thaw()


@contextmanager
def table_locked_by_a_colleague(url: str) -> Iterator[psycopg.Connection]:
    """Another session holding `LOCK TABLE iolab.runs` (nothing can read or write it) until the block ends."""
    with psycopg.connect(url) as other:
        other.execute("LOCK TABLE iolab.runs IN ACCESS EXCLUSIVE MODE")
        try:
            yield other
        finally:
            other.rollback()


def _within(seconds: float, call: Callable[[], object]) -> tuple[object, float]:
    """What `call` returned or raised, and how long it took; the test fails (instead of hanging
    like the code it tests once did) when it has not returned within `seconds`."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # noqa: BLE001  # handed to the test's thread
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still waiting after {seconds:g} s"
    return outcome[0], time.monotonic() - started


def _lock_waiters(server: PgServer) -> int:
    with server.admin() as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'iolab'"
                            " AND wait_event_type = 'Lock'").fetchone()[0]  # type: ignore[index]


def test_freezing_survives_a_backend_that_exits_and_always_thaws_the_shared_server(
        server: PgServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The helper the tests below rely on: a backend gone before its SIGSTOP is no error, and a
    failure while freezing still continues what was stopped (stop 42's CI: a postmaster left
    stopped timed out four later tests)."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    monkeypatch.setattr(sys.modules[__name__], "children_of", lambda pid: [gone.pid, *pgserver.children_of(pid)])
    stat = Path("/proc") / str(server.postmaster()) / "stat"
    with frozen(server):
        deadline = time.monotonic() + 10  # SIGSTOP is delivered when the process next runs
        while stat.read_text().split()[2] != "T" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stat.read_text().split()[2] == "T", "the postmaster was not stopped"
    assert stat.read_text().split()[2] != "T", "the postmaster was left stopped"

    def fails(pid: int) -> list[int]:
        raise RuntimeError("listing the backends failed")

    monkeypatch.setattr(sys.modules[__name__], "children_of", fails)
    with pytest.raises(RuntimeError), frozen(server):
        pass
    with psycopg.connect(server.url(), connect_timeout=10) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    postmaster = server.postmaster()
    assert postmaster, "the server is not running"
    os.kill(postmaster, signal.SIGSTOP)  # a test that died before it continued the server:
    server.thaw()  # the `server` fixture's teardown thaws it for the next test
    with psycopg.connect(server.url(), connect_timeout=10) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_colleagues_lock_sends_the_write_to_the_spool_instead_of_holding_the_run(
        server: PgServer, store_with_run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOLAB_DB_RETRY_S", "1")
    s = store_with_run
    notes: list[str] = []
    s.notify = notes.append
    with table_locked_by_a_colleague(s.url):
        got, took = _within(120, lambda: s.save_trial("r", made_trial(0), None))
        assert got is None, got
        assert s.waiting() == 1, "the write is kept while the table is locked"
        assert _lock_waiters(server) == 0, "no session of iolab is left waiting for the lock"
        s.save_trial("r", made_trial(1), None)  # queues behind the first, in order
        assert s.waiting() == 2
    # the server gave up each wait itself: a few lock waits, not the lock's whole length
    assert took < 4 * LOCK_WAIT_S + 10, took
    assert len(notes) == 1 and "lock timeout" in one_line(notes[0]), notes
    s.set_status("r", "complete")  # the lock is gone, but the pace has not come round: queued, in order
    assert s.waiting() == 3
    s.close()  # closing tries whatever the pace says: everything kept is written, once, in order
    with reopened(s) as again:
        assert [t.trial_id for t in again.trials("r")] == ["c0-r0", "c1-r1"] and again.waiting() == 0
        assert again.resolve("r").status == "complete"


def test_while_writes_wait_a_frozen_server_is_not_knocked_on_at_every_write(
        server: PgServer, store_with_run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, every write while others waited tried the server once: a frozen server cost each one
    a connect timeout (10 s), so a run of 2 s trials took three times as long. Now the attempts are
    paced (spool.Pacing): after the first write went to the spool, the next ones queue at once."""
    monkeypatch.setenv("IOLAB_DB_RETRY_S", "1")
    s = store_with_run
    with frozen(server):
        got, took = _within(90, lambda: s.save_trial("r", made_trial(0), None))
        assert got is None and s.waiting() == 1, got
        got, took = _within(120, lambda: [s.save_trial("r", made_trial(i), None) for i in range(1, 6)])
        assert got == [None] * 5, got
        assert took < CONNECT_TIMEOUT_S, f"5 writes took {took:.1f} s: the frozen server was tried again"
        assert s.waiting() == 6
    s.close()  # the server answers again: closing writes everything kept, in order
    with reopened(s) as again:
        assert [t.trial_id for t in again.trials("r")] == [made_trial(i).trial_id for i in range(6)]
        assert again.waiting() == 0


def test_a_write_once_the_pace_comes_round_writes_everything_kept(
        server: PgServer, store_with_run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pace holds attempts back, never the writes for the rest of the run: once the server takes
    writes again, the first write after the pace's wait writes everything kept, without closing."""
    monkeypatch.setenv("IOLAB_DB_RETRY_S", "0.2")
    s = store_with_run
    set_read_only(server, True)
    try:
        s.save_trial("r", made_trial(0), None)
        s.save_trial("r", made_trial(1), None)
        assert s.waiting() == 2
    finally:
        set_read_only(server, False)
    deadline = time.monotonic() + 30
    while not s._pace.due() and time.monotonic() < deadline:  # a few seconds: fast failures, short waits
        time.sleep(0.1)
    assert s._pace.due(), s._pace
    s.save_trial("r", made_trial(2), None)
    assert s.waiting() == 0, "the write after the pace wrote what was kept"
    assert [t.trial_id for t in s.trials("r")] == [made_trial(i).trial_id for i in range(3)]


def test_the_end_of_a_run_tries_a_frozen_server_once_not_again_when_closing(
        server: PgServer, store_with_run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's end tries what the spool keeps whatever the pace (`write_kept`), then closes the
    store. Before, closing tried again: against a frozen server a second connect timeout at the
    end of every run. Closing still tries when something was kept after that attempt."""
    monkeypatch.setenv("IOLAB_DB_RETRY_S", "1")
    s = store_with_run
    with frozen(server):
        s.save_trial("r", made_trial(0), None)
        got, took = _within(90, s.write_kept)
        assert got is None and s.waiting() == 1, got
        got, took = _within(90, s.close)
        assert got is None and took < CONNECT_TIMEOUT_S / 2, f"closing took {took:.1f} s: it tried again"
    with reopened(s) as again:
        assert again.waiting() == 1, "what the end of the run reported as waiting still waits"
        set_read_only(server, True)
        try:
            again.save_trial("r", made_trial(1), None)
            again.write_kept()
            assert again.waiting() == 2
        finally:
            set_read_only(server, False)
        again.save_trial("r", made_trial(2), None)  # kept after the attempt (or written, if the pace came round)
    with reopened(s) as last:  # closing `again` tried: everything is written, in order
        assert last.waiting() == 0
        assert [t.trial_id for t in last.trials("r")] == [made_trial(i).trial_id for i in range(3)]


def test_a_read_from_a_frozen_server_ends_with_a_reason(server: PgServer, store_with_run: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOLAB_DB_RETRY_S", "0.5")
    monkeypatch.setattr(postgres, "READ_ANSWER_S", 2.0)  # a read's deadline is 2 min: not for a test
    s = store_with_run
    with frozen(server):
        got, took = _within(2 + CONNECT_TIMEOUT_S + 30, s.runs)
    assert isinstance(got, StoreFailed) and "no answer within 2 s" in str(got), got
    assert took < 2 + CONNECT_TIMEOUT_S + 15, took
    assert [r.id for r in s.runs()] == ["r"], "the same store reads again once the server answers"


@needs_root
@needs_fio
def test_a_frozen_server_mid_study_holds_nothing_back_and_loses_nothing(
        pg_lab: tuple[Lab, str], server: PgServer) -> None:
    lab, url = pg_lab  # IOLAB_DB_RETRY_S=1
    proc = lab.popen("run", loop_study(lab, "pgfrozen", reps=3))
    try:
        lab.wait_until(lambda: len(stored_trials(url)) >= 1, 120, "a stored trial", proc)
        with frozen(server):  # nothing may connect to it in here, the test neither
            # one write's attempts: the 15 s answer deadline, then the retry window
            lab.wait_until(lambda: spooled_lines(lab) >= 1, 60, "a write kept while the server is frozen", proc)
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "no answer within" in one_line(err) and "takes writes again" in one_line(err), err
    ended_whole(lab, url, proc.returncode, err)
