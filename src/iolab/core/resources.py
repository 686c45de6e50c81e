"""The ledger of everything iolab creates, kept on disk so a crash leaves a to-do list.

Every module that creates something system-wide (a loop device, a mount, a cgroup, a
scheduler change, a QEMU process, a load generator, a scratch file or dir) records it
here *before* creating it and registers one cleaner for its kind. Teardown, Ctrl-C and
`iolab clean` all go through the same cleaners, so there is one way to undo each kind.

Pending entries: `Ledger.creating()` writes the entry as *pending*, holds SIGINT/SIGTERM/
SIGHUP (core.signals) while the thing is made, then marks it live with what creation
learnt (the loop device's name, the pid). A kill -9 inside that window leaves a pending
entry; its cleaner must find what may or may not exist (a loop device by its backing
file, a QEMU by its -name tag, a load generator by its IOLAB_SPAWN tag) and undo it.

One ledger file per owner (core.owner): `$IOLAB_DATA/ledger/o<pid>.<start>.json`, a JSON
list of entries, removed when empty. A ledger is orphaned when its owner is dead (pid and
start time); files of iolab before 0.2 are named `<pid>.json` and are judged by pid and
by whether that pid started before the file was last written.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from iolab.core import owner as owners
from iolab.core import paths, signals

PENDING = "pending"
LIVE = "live"

Cleaner = Callable[["Resource"], None]
# Run for a dead owner before its entries are undone (e.g. kill the processes it started,
# which may still hold its loop devices); returns what it did, one line each.
OwnerCleaner = Callable[[owners.Owner], list[str]]
_CLEANERS: dict[str, Cleaner] = {}
_OWNER_CLEANERS: list[OwnerCleaner] = []
# Kinds undone in this order: processes before what they use, a scheduler claim while its
# device is still attached (a detach starts a new diskseq: the claim's record would be
# dropped as stale, not restored), a mount before its loop device, a loop device before its image.
_ORDER = ["pgroup", "process", "cgroup", "scheduler", "mount", "loop", "file", "dir"]

# Test hook (the kill test): seconds to sleep between a pending entry and the creation,
# so a kill can land in that window on purpose. Never set outside tests.
_CREATE_DELAY_ENV = "IOLAB_TEST_CREATE_DELAY"


def register_cleaner(kind: str, fn: Cleaner) -> None:
    _CLEANERS[kind] = fn


def register_owner_cleaner(fn: OwnerCleaner) -> None:
    if fn not in _OWNER_CLEANERS:
        _OWNER_CLEANERS.append(fn)


@dataclass
class Resource:
    kind: str
    ident: str
    info: dict = field(default_factory=dict)
    rid: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    state: str = LIVE

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Resource:
        return cls(kind=str(d["kind"]), ident=str(d.get("ident", "")), info=dict(d.get("info") or {}),
                   rid=str(d.get("rid") or uuid.uuid4().hex[:12]), state=str(d.get("state", LIVE)))


class Ledger:
    """This process's ledger file under the state dir; created at the first entry, removed when empty."""

    def __init__(self, directory: Path | None = None):
        self.dir = directory or paths.ledger_dir()  # made on the first add(): a --dry-run creates nothing
        self.owner = owners.adopt()
        self.path = self.dir / f"{self.owner.token}.json"
        self._items: list[Resource] = []
        self._lock = threading.RLock()

    def add(self, kind: str, ident: str, *, pending: bool = False, **info: object) -> Resource:
        res = Resource(kind, ident, dict(info), state=PENDING if pending else LIVE)
        with self._lock:
            self._items.append(res)
            self._flush()
        return res

    @contextmanager
    def creating(self, kind: str, ident: str, **info: object) -> Iterator[Resource]:
        """Record a pending entry, let the block create the thing, then mark it live.

        Stop signals are held over the whole block, so keep it to the creating call
        itself (open O_EXCL, losetup, mount, mkdir, Popen). If the block raises, what may
        exist is undone by the kind's cleaner, except on FileExistsError: the thing was
        there before and is not ours to remove.
        """
        with signals.held():
            res = self.add(kind, ident, pending=True, **info)
            delay = os.environ.get(_CREATE_DELAY_ENV)
            try:
                if delay:
                    time.sleep(float(delay))
                yield res
            except FileExistsError:
                self.forget(res)
                raise
            except BaseException:
                try:
                    self.release(res)
                except Exception:
                    pass  # the entry stays: `iolab clean` tries again; the creation error is the news
                raise
            self.confirm(res)

    def confirm(self, res: Resource, ident: str | None = None, **info: object) -> None:
        """Mark an entry live, with what creation learnt (e.g. the loop device, the pid)."""
        with self._lock:
            if ident is not None:
                res.ident = ident
            res.info.update(info)
            res.state = LIVE
            self._flush()

    def update(self, res: Resource, ident: str | None = None, **info: object) -> None:
        """Record more about an entry while it is still being created (stays pending)."""
        with self._lock:
            if ident is not None:
                res.ident = ident
            res.info.update(info)
            self._flush()

    def release(self, res: Resource) -> None:
        """Undo one resource now (its cleaner) and forget it."""
        _clean_one(res)
        self.forget(res)

    def forget(self, res: Resource) -> None:
        with self._lock:
            self._items = [r for r in self._items if r.rid != res.rid]
            self._flush()

    def release_all(self) -> list[str]:
        """Undo everything still recorded, newest first; returns errors instead of raising."""
        errors = []
        for res in reversed(list(self._items)):
            try:
                self.release(res)
            except Exception as exc:  # keep going: one stuck resource must not strand the rest
                errors.append(f"{res.kind} {res.ident}: {exc}")
        return errors

    @property
    def items(self) -> list[Resource]:
        with self._lock:
            return list(self._items)

    def _flush(self) -> None:
        if not self._items:
            self.path.unlink(missing_ok=True)
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps([asdict(r) for r in self._items], indent=1))
        os.replace(tmp, self.path)


def _clean_one(res: Resource) -> None:
    fn = _CLEANERS.get(res.kind)
    if fn is None:  # a module that creates this kind forgot to import its cleaner: find it anyway
        load_all_cleaners()
        fn = _CLEANERS.get(res.kind)
    if fn is None:
        raise RuntimeError(f"no cleaner registered for {res.kind!r}")
    fn(res)


# ---------------------------------------------------------------- orphans

@dataclass
class LedgerFile:
    path: Path
    owner: owners.Owner | None  # None: a file of iolab before 0.2 (<pid>.json)
    items: list[Resource]


def ledger_owner(path: Path) -> owners.Owner | None:
    return owners.parse_token(path.stem)


def owner_alive(path: Path) -> bool:
    """Is the process that writes this ledger file still running?"""
    o = ledger_owner(path)
    if o is not None:
        return o.alive()
    if not path.stem.isdigit():
        return False
    return _legacy_alive(int(path.stem), path)


def _legacy_alive(pid: int, path: Path) -> bool:
    """A `<pid>.json` ledger: alive if that pid runs and started before the file was last written."""
    start = owners.start_time(pid)
    if start is None:
        return owners.proc_stat(pid) is not None  # unreadable stat: in doubt, alive
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return False
    return _boot_time() + start / os.sysconf("SC_CLK_TCK") <= mtime + 1.0


def _boot_time() -> float:
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("btime "):
                return float(line.split()[1])
    return 0.0


def read_ledger(path: Path) -> list[Resource]:
    try:
        data = json.loads(path.read_text())
        return [Resource.from_json(r) for r in data if isinstance(r, dict) and "kind" in r]
    except (OSError, ValueError, TypeError, KeyError):
        return []


def ledger_files(directory: Path | None = None) -> list[Path]:
    d = directory or paths.ledger_dir()
    return sorted(d.glob("*.json")) if d.is_dir() else []


def live_items(directory: Path | None = None) -> list[Resource]:
    """Entries of ledgers whose owners are alive (what a sweep must not touch)."""
    return [r for f in ledger_files(directory) if owner_alive(f) for r in read_ledger(f)]


def orphaned(directory: Path | None = None) -> list[tuple[Path, list[Resource]]]:
    """Ledgers of iolab processes that are no longer alive."""
    return [(f, read_ledger(f)) for f in ledger_files(directory) if not owner_alive(f)]


def clean_orphans(directory: Path | None = None) -> tuple[list[str], list[str]]:
    """Undo what dead iolab processes left; returns (cleaned, errors).

    Per dead owner: first its owner cleaners (the processes it started are killed, so
    nothing holds its devices), then its entries in dependency order. The file goes only
    when every entry was undone, so a failed cleaner is tried again next time.
    """
    load_all_cleaners()
    cleaned: list[str] = []
    errors: list[str] = []
    for f, items in orphaned(directory):
        dead = ledger_owner(f)
        if dead is not None:
            for fn in _OWNER_CLEANERS:
                try:
                    cleaned += fn(dead)
                except Exception as exc:
                    errors.append(f"processes of {dead.token}: {exc}")
        items.sort(key=lambda r: _ORDER.index(r.kind) if r.kind in _ORDER else -1)
        failed: list[Resource] = []
        for res in items:
            try:
                _clean_one(res)
                cleaned.append(f"{res.kind} {res.ident}" if res.ident else f"{res.kind} (pending) {res.info}")
            except Exception as exc:
                failed.append(res)
                errors.append(f"{res.kind} {res.ident}: {exc}")
        if failed:  # keep what could not be undone, so the next `iolab clean` tries again
            f.write_text(json.dumps([asdict(r) for r in failed], indent=1))
        else:
            f.unlink(missing_ok=True)
    d = directory or paths.ledger_dir()
    for tmp in d.glob("*.tmp") if d.is_dir() else []:  # a flush cut short by a kill
        if not owner_alive(tmp):
            tmp.unlink(missing_ok=True)
    return cleaned, errors


def load_all_cleaners() -> None:
    """Import every module that registers a cleaner (they register at import)."""
    import importlib

    for mod in ("iolab.core.cleaners", "iolab.cgroups.cleanup", "iolab.vm.cleanup"):
        importlib.import_module(mod)
