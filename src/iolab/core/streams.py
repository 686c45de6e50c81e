"""Standard output and error as iolab's consoles write them, for a reader that may go away.

Why: `iolab run X 2>&1 | head -3` closes the pipe after three lines. Python ignores SIGPIPE, so
the next progress line raised BrokenPipeError inside whatever was printing: a trial's code,
which recorded it as that trial's failure, and every later trial failed the same way; the run
ended 'failed' with every trial it had measured ok. The reader's going is the user's stop: the
stream stops writing and sends this process SIGTERM, so the run stops exactly as on a stop
signal (the trial ended, everything undone, finished trials kept, status 'partial', resumable).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import TextIO


class ReaderMayGo:
    """sys.stdout or sys.stderr, looked up at every write (tests and click swap them), that turns a
    closed pipe into a stop signal once and then discards what is written."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.gone = False

    @property
    def stream(self) -> TextIO:
        s: TextIO = getattr(sys, self.name)
        return s

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self.stream.write(text)
            except BrokenPipeError:
                self._reader_gone()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._reader_gone()

    def isatty(self) -> bool:
        return not self.gone and self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"

    def _reader_gone(self) -> None:
        self.gone = True
        try:  # what is still buffered for the closed pipe would raise again at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), self.stream.fileno())
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), signal.SIGTERM)
