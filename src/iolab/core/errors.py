"""Errors users see. Each carries enough context to act on without a traceback."""

from __future__ import annotations


class IolabError(Exception):
    """Base for errors that end a command with a clear message (exit status 1)."""

    exit_status = 1


class SpecError(IolabError):
    """A study spec is invalid. Raised before anything is created (exit status 2)."""

    exit_status = 2

    def __init__(self, source: str, problems: list[tuple[str, str]]):
        self.source = source
        self.problems = problems
        lines = [f"{source}: {key}: {msg}" for key, msg in problems]
        super().__init__("invalid study spec\n" + "\n".join(lines))


class RefusedError(IolabError):
    """iolab refuses to touch something (a device holding data, a command-running fio option)."""

    exit_status = 2


class InputError(IolabError):
    """A file or place named on the command line cannot be used (not readable, not writable,
    not a regular file, too large). Raised before anything is created (exit status 2)."""

    exit_status = 2


class CapabilityMissing(IolabError):
    """The machine lacks something a study needs (no QEMU, no cgroup controller...)."""


class TrialFailed(IolabError):
    """One trial failed; the runner records the reason and goes on with the study."""


class Interrupted(IolabError):
    """SIGINT/SIGTERM arrived: stop, clean up, keep finished trials."""

    exit_status = 130


class DataDirUnwritable(BaseException):
    """iolab's own state (the ledger, the results store) cannot be written: the data dir's disk is
    full or went read-only. A BaseException on purpose, like a stop signal: it must end the run
    through every per-trial `except Exception` (each next trial would fail the same way), and it
    is raised only where nothing is half made (before a ledger entry, by a store write); the
    runner then tears down, keeps what was stored and says so (runner.Runner.run)."""
