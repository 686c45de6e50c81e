"""A local spool of the writes a remote store could not take: nothing finished is lost to a
network, a failover or a read-only server.

Every write a run makes is one operation: the run created, its status, a run-level datum, a
trial, a claim and its release. One the server cannot take now is appended (one JSON line,
fsynced) to `$IOLAB_DATA/spool/<store>.jsonl`, one file per store location (its URL without the
password, hashed; `key_of`), with the time it was made; every later write of any run into that
store goes behind it, so the store receives them in the order they were made. A later write that
reaches the server (`Pacing` says when one tries), closing the store, opening it for writing
again and `iolab push --spool` write them, oldest first, each replayed with its own time, so the
store ends exactly as if the server had never been away. Every operation is idempotent (a trial
is an upsert keyed by run and trial, a status or a datum is set, a run created once): a crash
between writing one and forgetting it duplicates nothing. One the server proves it will never
take (its data, an integrity constraint: store/pgerrors.py) is set aside in
`<store>.rejected.jsonl` with the reason, for a person to look at, and does not hold the rest
back. flock keeps two iolab processes on one machine from flushing one file at once.

While writes wait, a store does not knock on every write (`Pacing`): a frozen server costs each
attempt a connect timeout, and one attempt per trial tripled a run of short trials. Attempts
back off (up to 2 min), and take at most a tenth of the run's time while an attempt costs up to
13 s (a frozen server's connect timeout is 10 s).

A line without "op" is a trial kept by an iolab from before operations were spooled.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from iolab.core import paths
from iolab.core.errors import DataDirUnwritable
from iolab.core.model import TrialResult

# "written"; "later" (the server cannot take it now: keep it and everything after it);
# "rejected" (the server will never take it: set aside, never retried)
Outcome = Literal["written", "later", "rejected"]
Op = dict[str, Any]  # {"op": "run" | "status" | "extra" | "trial" | "claim" | "release", "run_id", "at", ...}
Writer = Callable[[Op], tuple[Outcome, str | None]]  # an outcome and, unless written, why


def key_of(location: str) -> str:
    """One spool per store, however its URL was spelled: with the password in it or given the
    libpq ways (PGPASSWORD, .pgpass), postgres:// or postgresql://."""
    return location.replace(":***@", "@").replace("postgres://", "postgresql://", 1)


def trial_op(run_id: str, trial: TrialResult, raw: Any, at: float) -> Op:
    return {"op": "trial", "run_id": run_id, "at": at, "trial": dataclasses.asdict(trial), "raw": raw}


def trial_of(op: Op) -> TrialResult:
    return TrialResult(**op["trial"])


@dataclass
class Pacing:
    """When a store tries its server again while writes wait in the spool. After a failed attempt
    the next one waits `first_s`, doubling with every failure in a row, and at least
    (1 - share) / share times what the failed attempt cost, never more than `most_s`: attempts
    that fail take at most `share` of the run's time while one costs up to 13 s (a frozen server:
    a 10 s connect timeout, then 90 s without one), and writes wait at most `most_s` after the
    server is back. The run's end (`write_kept`) and `iolab push --spool` try whatever the pace
    says, and so does closing the store unless the run's end has just tried; a success resets it."""

    first_s: float = 1.0
    most_s: float = 120.0
    share: float = 0.1
    failures: int = 0
    next_at: float = 0.0  # time.monotonic() before which a write does not try the server

    def due(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) >= self.next_at

    def failed(self, cost_s: float, now: float | None = None) -> float:
        """Record a failed attempt that took `cost_s`; returns the wait before the next one."""
        self.failures += 1
        wait = min(self.most_s, max(self.first_s * 2 ** (self.failures - 1),
                                    max(cost_s, 0.0) * (1 - self.share) / self.share))
        self.next_at = (time.monotonic() if now is None else now) + wait
        return wait

    def succeeded(self) -> None:
        self.failures, self.next_at = 0, 0.0


@dataclass
class Flushed:
    written: int = 0
    rejected: int = 0
    left: int = 0
    reason: str | None = None  # why the first one left waits (or, if none waits, why the last was set aside)


class Spool:
    def __init__(self, location: str, directory: Path | None = None):
        self.location = location
        digest = hashlib.sha256(key_of(location).encode()).hexdigest()[:16]
        self.path = (directory or paths.data_dir() / "spool") / f"{digest}.jsonl"
        self.rejected = self.path.with_suffix(".rejected.jsonl")  # kept for a person to look at

    @contextmanager
    def _locked(self) -> Iterator[IO[str]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+", encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield f
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def empty(self) -> bool:
        """Nothing kept (a stat, no lock: a write checks this before every operation)."""
        try:
            return self.path.stat().st_size == 0
        except FileNotFoundError:
            return True

    def add(self, op: Op) -> None:
        """Keep one operation, durably, until a flush writes it. A disk that is full or read-only
        ends the run (DataDirUnwritable, as for the ledger) and leaves the file as it was: a line
        written in part would be a torn line that every later flush has to set aside."""
        line = (json.dumps({"store": self.location, **op}, default=str) + "\n").encode()
        try:
            with self._locked() as f:
                fd = f.fileno()
                end = os.lseek(fd, 0, os.SEEK_END)
                torn = end > 0 and os.pread(fd, 1, end - 1) != b"\n"  # a crash cut the last line short
                try:
                    view = memoryview(b"\n" + line if torn else line)
                    while view:
                        view = view[os.write(fd, view):]
                    os.fsync(fd)
                except OSError:
                    os.ftruncate(fd, end)
                    raise
        except OSError as exc:
            raise DataDirUnwritable(f"cannot keep a write for {self.location} in the local spool {self.path} "
                                    f"({exc.strerror or exc}): the store did not take it either") from None

    def set_aside(self, op: Op, reason: str) -> None:
        """An operation the server will never take, kept for a person with the reason."""
        self.rejected.parent.mkdir(parents=True, exist_ok=True)
        with open(self.rejected, "a", encoding="utf-8") as bad:
            bad.write(json.dumps({"store": self.location, "reason": reason, **op}, default=str) + "\n")
            bad.flush()
            os.fsync(bad.fileno())

    def entries(self) -> list[Op]:
        """Every kept operation, oldest first (a line from an older iolab is a trial; a torn line,
        left by a crash mid-write, is not one)."""
        if self.empty():
            return []
        with self._locked() as f:
            f.seek(0)
            return [op for op in map(_parsed, f) if op is not None]

    def count(self, run_id: str | None = None) -> int:
        return sum(1 for e in self.entries() if run_id is None or e.get("run_id") == run_id)

    def rejected_count(self) -> int:
        if not self.rejected.exists():
            return 0
        with open(self.rejected, encoding="utf-8") as f:
            return sum(1 for line in f if line.strip())

    def flush(self, write: Writer) -> Flushed:
        """Hand every kept operation to `write`, oldest first, until the server cannot take one;
        keep that one and the rest, set rejected ones aside (one bad line must not hold every
        later one back)."""
        done = Flushed()
        if self.empty():
            return done
        with self._locked() as f:
            f.seek(0)
            lines = [line for line in f if line.strip()]
            handled = 0
            for line in lines:
                op = _parsed(line)
                if op is None:  # set aside as it is, for a person: it holds nothing back
                    self.set_aside({"torn_line": line[:4096]}, "not a whole line: a write cut short by a crash")
                    done.rejected += 1
                    handled += 1
                    continue
                outcome, reason = write(op)
                if outcome == "later":
                    done.reason = reason
                    break
                if outcome == "rejected":
                    self.set_aside(op, reason or "refused")
                    done.rejected += 1
                    done.reason = reason
                else:
                    done.written += 1
                handled += 1
            if handled:  # rewritten in place (never replaced: a waiter holds the lock on this inode)
                f.seek(0)
                f.truncate()
                f.write("".join(lines[handled:]))
                f.flush()
                os.fsync(f.fileno())
            done.left = len(lines) - handled
        return done


def _parsed(line: str) -> Op | None:
    """The operation on one line; None for a torn line (a crash between a write and its end)."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    return _op(entry) if isinstance(entry, dict) else None


def _op(entry: dict[str, Any]) -> Op:
    entry.pop("store", None)
    if "op" not in entry:  # kept by an iolab that spooled trials only
        entry = {"op": "trial", "at": entry.get("trial", {}).get("ended"), **entry}
    return entry
