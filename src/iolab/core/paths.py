"""Where iolab keeps things. Every location can be moved with an environment variable."""

from __future__ import annotations

import os
from pathlib import Path


def data_dir() -> Path:
    """Per-user data: the results database and reports ($IOLAB_DATA, else XDG data home)."""
    base = os.environ.get("IOLAB_DATA") or os.path.join(
        os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share"), "iolab")
    return Path(base)


def default_db() -> Path:
    return data_dir() / "results.sqlite"


def reports_dir() -> Path:
    return data_dir() / "reports"


def ledger_dir() -> Path:
    return data_dir() / "ledger"


def run_dir() -> Path:
    """Machine-wide state shared by every iolab process, whatever its data dir ($IOLAB_RUN, else
    /run/iolab): the per-device records of scheduler changes (cgroups.queue_claims). On tmpfs,
    so it goes with a reboot, as do the settings it records."""
    return Path(os.environ.get("IOLAB_RUN") or "/run/iolab")


def scratch_dir() -> Path:
    """Scratch images and files; on disk, not tmpfs ($IOLAB_SCRATCH, else /var/tmp/iolab)."""
    return Path(os.environ.get("IOLAB_SCRATCH") or "/var/tmp/iolab")


def cache_dir() -> Path:
    """Built artefacts reused across runs: the guest initramfs, native helpers."""
    base = os.environ.get("IOLAB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "iolab")
    return Path(base)
