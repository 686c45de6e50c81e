"""A local spool of trials a remote store could not take: nothing finished is lost to a network.

When a server stays away longer than the retry window, the trial is appended (one JSON line,
fsynced) to `$IOLAB_DATA/spool/<store>.jsonl`, one file per store location (its redacted URL,
hashed). The next write that reaches the server, and closing the store, flush it oldest
first; a trial written twice is still one row (the backend's write is an upsert keyed by run
and trial), so a crash between writing and forgetting a line duplicates nothing. flock keeps
two iolab processes on one machine from flushing one file at once.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Literal

from iolab.core import paths
from iolab.core.model import TrialResult

# (run id, trial, raw) -> "written"; "later" (the server is still away: keep it and stop);
# "rejected" (the server answered no, e.g. its run is not there: set aside, never retried)
Outcome = Literal["written", "later", "rejected"]
Writer = Callable[[str, TrialResult, Any], Outcome]


class Spool:
    def __init__(self, location: str, directory: Path | None = None):
        self.location = location
        digest = hashlib.sha256(location.encode()).hexdigest()[:16]
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

    def add(self, run_id: str, trial: TrialResult, raw: Any) -> None:
        """Keep one trial, durably, until a flush writes it."""
        line = json.dumps({"store": self.location, "run_id": run_id, "trial": dataclasses.asdict(trial), "raw": raw},
                          default=str)
        with self._locked() as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def count(self) -> int:
        if not self.path.exists():
            return 0
        with self._locked() as f:
            f.seek(0)
            return sum(1 for line in f if line.strip())

    def flush(self, write: Writer) -> int:
        """Hand every kept trial to `write`, oldest first, until the server is away again; keep the
        rest, set rejected ones aside (one bad line must not hold every later trial back).
        Returns how many are still kept."""
        if not self.path.exists():
            return 0
        with self._locked() as f:
            f.seek(0)
            lines = [line for line in f if line.strip()]
            written = 0
            for line in lines:
                entry = json.loads(line)
                outcome = write(entry["run_id"], TrialResult(**entry["trial"]), entry["raw"])
                if outcome == "later":
                    break
                if outcome == "rejected":
                    with open(self.rejected, "a", encoding="utf-8") as bad:
                        bad.write(line if line.endswith("\n") else line + "\n")
                written += 1
            if written:  # rewritten in place (never replaced: a waiter holds the lock on this inode)
                f.seek(0)
                f.truncate()
                f.write("".join(lines[written:]))
                f.flush()
                os.fsync(f.fileno())
            return len(lines) - written
