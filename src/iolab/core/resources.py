"""The ledger of everything iolab creates, kept on disk so a crash leaves a to-do list.

Every module that creates something system-wide (a loop device, a mount, a cgroup, a
scheduler change, a QEMU process, a load generator, a scratch file or dir) records it
here *before* creating it and registers its `ResourceKind`: how to undo an entry, when (its
order) and how `iolab clean --all` finds one without a ledger (its sweep). Teardown, Ctrl-C
and `iolab clean` all go through the same cleaners, so there is one way to undo each kind;
nothing here lists the kinds.

Pending entries: `Ledger.creating()` writes the entry as *pending*, holds SIGINT/SIGTERM/
SIGHUP (core.signals) while the thing is made, then marks it live with what creation
learnt (the loop device's name, the pid). A kill -9 inside that window leaves a pending
entry; its cleaner must find what may or may not exist (a loop device by its backing
file, a QEMU by its -name tag, a load generator by its IOLAB_SPAWN tag) and undo it.

One ledger file per owner (core.owner): `$IOLAB_DATA/ledger/o<pid>.<start>.json`, a JSON
list of entries, removed when empty. A ledger is orphaned when its owner is dead (pid and
start time); files of iolab before 0.2 are named `<pid>.json` and are judged by pid and
by whether that pid started before the file was last written.

Size: the ledger's file format, its writer (which must refuse to record when the disk cannot
take it, and fsync before the rename) and its readers (which must tell an unreadable file from
an empty one, and undo a dead owner's entries in the kinds' order) are one contract; split, a
change to one side could no longer be read against the other.
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
from iolab.core import paths, registry, signals
from iolab.core.errors import DataDirUnwritable

PENDING = "pending"
LIVE = "live"

Cleaner = Callable[["Resource"], None]
# Run for a dead owner before its entries are undone (e.g. kill the processes it started,
# which may still hold its loop devices); returns what it did, one line each.
OwnerCleaner = Callable[[owners.Owner], list[str]]
# `iolab clean --all`: find and undo things of one kind whose owner is dead, without a ledger;
# returns (what was undone, errors), one line each.
Sweep = Callable[["SweepScope"], tuple[list[str], list[str]]]

# The order scale kinds declare themselves on (ResourceKind.order): what runs before what it
# uses, so nothing is busy when its turn comes; a scheduler claim while its device is still
# attached (a detach starts a new diskseq: the claim's record would be dropped as stale, not
# restored); what is stacked on a device before the device, a device before its image file.
ORDER_PROCESSES = 10  # processes: a load generator's cgroup leaf (10), a QEMU (20)
ORDER_GROUPS = 30  # cgroups: a trial cgroup's processes are killed through it
ORDER_CLAIMS = 40  # machine-wide settings of a device (scheduler claims)
ORDER_MOUNTS = 50  # filesystems mounted on a device
ORDER_DEVICES = 60  # loop devices
ORDER_FILES = 70  # files (images), then dirs (80)
UNORDERED = -1  # a kind registered with a cleaner alone (register_cleaner): undone first, as ever


@dataclass(frozen=True)
class ResourceKind:
    """One kind of thing iolab creates, registered by the module that creates it.

    name:  the ledger entries' `kind`
    order: when it is undone among a dead owner's entries and in a sweep (the ORDER_* scale)
    clean: undo one ledger entry, live or pending (whose thing may or may not exist);
           idempotent: undoing what is gone is not an error
    sweep: `iolab clean --all`: undo things of this kind whose owner is dead, found by their
           names and tags alone (SweepScope says what may be taken); None: swept with another
           kind (a dir with the files) or never left without a ledger
    """

    name: str
    order: int
    clean: Cleaner
    sweep: Sweep | None = None


@dataclass(frozen=True)
class SweepScope:
    """What `iolab clean --all` may take: names carrying a dead owner's tag anywhere; untagged
    `iolab-*` names (iolab before 0.2) only directly in this data dir's scratch dir and only when
    no live ledger of this data dir names them (`protected`)."""

    scratch: Path
    protected: frozenset[str]

    @classmethod
    def here(cls) -> SweepScope:
        """This data dir's scratch dir, and what its live ledgers name (loop devices by backing file too)."""
        out: set[str] = set()
        for r in live_items():
            out.add(r.ident)
            if r.info.get("backing"):
                out.add(str(r.info["backing"]))
            if r.info.get("workdir"):
                out.add(str(r.info["workdir"]))
        return cls(Path(os.path.realpath(paths.scratch_dir())), frozenset(out))

    def removable(self, path: str) -> bool:
        """A name iolab made whose owner is dead; untagged: only in this scratch dir, unprotected."""
        name = os.path.basename(path.rstrip("/"))
        if not name.startswith(owners.PREFIX):
            return False
        o = owners.owner_of_name(name)
        if o is not None:
            return not o.alive()
        return os.path.dirname(path) == str(self.scratch) and path not in self.protected


_KINDS: dict[str, ResourceKind] = {}
_OWNER_CLEANERS: list[OwnerCleaner] = []

# Test hook (the kill test): seconds to sleep between a pending entry and the creation,
# so a kill can land in that window on purpose. Never set outside tests.
_CREATE_DELAY_ENV = "IOLAB_TEST_CREATE_DELAY"


def register_kind(kind: ResourceKind) -> None:
    _KINDS[kind.name] = kind


def register_cleaner(kind: str, fn: Cleaner) -> None:
    """A kind known by its cleaner alone (no sweep, undone before the ordered kinds)."""
    register_kind(ResourceKind(kind, UNORDERED, fn))


def register_owner_cleaner(fn: OwnerCleaner) -> None:
    if fn not in _OWNER_CLEANERS:
        _OWNER_CLEANERS.append(fn)


def kinds() -> list[ResourceKind]:
    """Every registered kind in the order they are undone (load_all_kinds() first for all of them)."""
    return sorted(_KINDS.values(), key=lambda k: k.order)


def _order(res: Resource) -> int:
    kind = _KINDS.get(res.kind)
    return kind.order if kind is not None else UNORDERED


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
        """Record an entry before its thing is made; DataDirUnwritable (and nothing recorded) when
        the ledger cannot be written: iolab never makes what it could not undo after a crash."""
        res = Resource(kind, ident, dict(info), state=PENDING if pending else LIVE)
        with self._lock:
            self._items.append(res)
            try:
                self._flush()
            except OSError as exc:
                self._items.remove(res)
                raise DataDirUnwritable(f"cannot write iolab's ledger {self.path} "
                                        f"({exc.strerror or exc}), so nothing more is made") from None
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
            self._flush_or_keep()

    def update(self, res: Resource, ident: str | None = None, **info: object) -> None:
        """Record more about an entry while it is still being created (stays pending)."""
        with self._lock:
            if ident is not None:
                res.ident = ident
            res.info.update(info)
            self._flush_or_keep()

    def release(self, res: Resource) -> None:
        """Undo one resource now (its cleaner) and forget it."""
        _clean_one(res)
        self.forget(res)

    def forget(self, res: Resource) -> None:
        with self._lock:
            self._items = [r for r in self._items if r.rid != res.rid]
            self._flush_or_keep()

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

    def _flush_or_keep(self) -> None:
        """A flush after the fact (the thing made, or undone): one that fails keeps the file as it
        was, which names at most more than is left (cleaners find a thing by its tag and skip
        what is gone), and it is tried again at the next change."""
        try:
            self._flush()
        except OSError:
            pass

    def _flush(self) -> None:
        if not self._items:
            self.path.unlink(missing_ok=True)
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with signals.held():  # a stop signal waits the few ms of the fsync: no .tmp left beside the ledger
            try:
                with open(tmp, "w") as f:  # on disk before the rename: a host crash must not leave it empty
                    f.write(json.dumps([asdict(r) for r in self._items], indent=1))
                    f.flush()
                    os.fsync(f.fileno())
                    _count_sync()
            except BaseException:
                tmp.unlink(missing_ok=True)  # a full disk: the ledger stays as it was, nothing half written beside it
                raise
            os.replace(tmp, self.path)
            _fsync_dir(self.dir)


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    _count_sync()


_syncs = 0
_syncs_lock = threading.Lock()


def _count_sync() -> None:
    global _syncs
    with _syncs_lock:
        _syncs += 1


def own_syncs() -> int:
    """How many fsync calls this process's ledgers have made so far. Each costs the disk holding
    the data dir a flush or two during whatever trial is running (about 20 per trial: its cgroups,
    work dir and processes, each ledgered before it exists): probes/under_disk.py counts them so
    that iolab's own durability is not taken for a neighbour's I/O."""
    return _syncs


def _clean_one(res: Resource) -> None:
    kind = _KINDS.get(res.kind)
    if kind is None:  # a module that creates this kind was not imported here: find it anyway
        load_all_kinds()
        kind = _KINDS.get(res.kind)
    if kind is None:
        raise RuntimeError(f"no cleaner registered for {res.kind!r}")
    kind.clean(res)


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
    """The ledger's entries; none when it cannot be read (unreadable_ledger says why)."""
    return _read(path)[0]


def unreadable_ledger(path: Path) -> str | None:
    """Why `path` is not a ledger iolab can undo (empty, cut short, not JSON), or None."""
    return _read(path)[1]


def _read(path: Path) -> tuple[list[Resource], str | None]:
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, list):
            return [], "not a list of entries"
        return [Resource.from_json(r) for r in data if isinstance(r, dict) and "kind" in r], None
    except OSError as exc:
        return [], exc.strerror or str(exc)
    except (ValueError, TypeError, KeyError) as exc:
        return [], "empty" if path.exists() and path.stat().st_size == 0 else f"cut short or not JSON ({exc})"


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
    load_all_kinds()
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
        why = unreadable_ledger(f)
        if why is not None:  # kept: the only trace that something may be left; clean --all sweeps by tag
            errors.append(f"what {dead.token if dead else f.stem} made: its ledger {f} is unreadable ({why}: cut "
                          "short by a crash or a full disk?), so it cannot be undone from it. `iolab clean --all` "
                          "finds what that owner made by its tag, then removes the ledger")
            continue
        items.sort(key=_order)
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


def load_all_kinds() -> None:
    """Register every resource kind: each is registered by the module that creates it, and
    everything iolab creates is created by a target's set-up or by what runs under one (the
    executor's load generators, the runner's trial cgroups, a guest's QEMU), all imported by
    the target modules. So importing every registered target registers every kind, and a new
    target's own kind needs no list here (tests/core/test_resource_kinds.py checks that every
    kind any module records is registered after this)."""
    for kind in registry.TARGETS:
        registry.target_class(kind)
