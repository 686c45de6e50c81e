"""The ledger of everything iolab creates, kept on disk so a crash leaves a to-do list.

Every module that creates something system-wide (a loop device, a mount, a cgroup, a
scheduler change, a QEMU process, a scratch file) records it here *before* relying on it
and registers one cleaner for its kind. Teardown, Ctrl-C and `iolab clean` all go
through the same cleaners, so there is one way to undo each kind of thing.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from iolab.core import paths

Cleaner = Callable[["Resource"], None]
_CLEANERS: dict[str, Cleaner] = {}
# Kinds undone last: a mount must go before its loop device, a loop device before its image.
_ORDER = ["pgroup", "process", "cgroup", "mount", "loop", "scheduler", "file", "dir"]


def register_cleaner(kind: str, fn: Cleaner) -> None:
    _CLEANERS[kind] = fn


@dataclass
class Resource:
    kind: str
    ident: str
    info: dict = field(default_factory=dict)
    rid: str = field(default_factory=lambda: uuid.uuid4().hex[:12])


class Ledger:
    """One file per iolab process under the state dir; removed when empty."""

    def __init__(self, directory: Path | None = None):
        self.dir = directory or paths.ledger_dir()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / f"{os.getpid()}.json"
        self._items: list[Resource] = []
        self._lock = threading.Lock()

    def add(self, kind: str, ident: str, **info: object) -> Resource:
        res = Resource(kind, ident, dict(info))
        with self._lock:
            self._items.append(res)
            self._flush()
        return res

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

    def _flush(self) -> None:
        if not self._items:
            self.path.unlink(missing_ok=True)
            return
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps([asdict(r) for r in self._items], indent=1))
        os.replace(tmp, self.path)


def _clean_one(res: Resource) -> None:
    fn = _CLEANERS.get(res.kind)
    if fn is None:
        raise RuntimeError(f"no cleaner registered for {res.kind!r}")
    fn(res)


def orphaned(directory: Path | None = None) -> list[tuple[Path, list[Resource]]]:
    """Ledgers of iolab processes that are no longer alive."""
    d = directory or paths.ledger_dir()
    out = []
    if not d.exists():
        return out
    for f in sorted(d.glob("*.json")):
        pid = int(f.stem) if f.stem.isdigit() else -1
        if pid > 0 and _alive(pid):
            continue
        try:
            items = [Resource(**r) for r in json.loads(f.read_text())]
        except (ValueError, TypeError):
            items = []
        out.append((f, items))
    return out


def clean_orphans(directory: Path | None = None) -> tuple[list[str], list[str]]:
    """Undo what dead iolab processes left; returns (cleaned, errors)."""
    _load_all_cleaners()
    cleaned, errors = [], []
    for f, items in orphaned(directory):
        items.sort(key=lambda r: _ORDER.index(r.kind) if r.kind in _ORDER else -1)
        for res in items:
            try:
                _clean_one(res)
                cleaned.append(f"{res.kind} {res.ident}")
            except Exception as exc:
                errors.append(f"{res.kind} {res.ident}: {exc}")
        f.unlink(missing_ok=True)
    return cleaned, errors


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    cmd = Path(f"/proc/{pid}/cmdline")
    try:
        return b"iolab" in cmd.read_bytes() or b"pytest" in cmd.read_bytes()
    except OSError:
        return False


def _load_all_cleaners() -> None:
    """Import every module that registers a cleaner (they register at import)."""
    import importlib

    for mod in ("iolab.core.cleaners", "iolab.cgroups.cleanup", "iolab.vm.cleanup"):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError:
            pass
