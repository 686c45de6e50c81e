"""iolab's cache of saved guest states: a guest booted once per shape, saved when its agent was
ready, restored by every later guest of that shape (vm/restore.py makes and uses them).

Layout under `cache_dir()/vmstate/`:

    <key>/state         the migration stream QEMU wrote (QMP `migrate` to a descriptor)
    <key>/meta.json     what the key was made of, the state's size, when and how it was made
    <key>.lock          flock'ed while <key> is being made (a tiny file, never removed)
    <key>.unsupported   why this shape cannot be saved (an agent too old, ...): later runs boot
                        at once instead of booting and failing again
    last-restore.json   whether the last restore worked (and why not), for `iolab doctor`
    .tmp-<key>-<pid>-…  a state being written; renamed to <key> only when complete
    .trash-<key>-…      a state being removed (renamed away first)

Guarantees, by construction rather than by checks:

* **Never half a state.** A state is written into a temporary directory, fsync'ed, then renamed
  to `<key>` in one step (rename(2) is atomic within a file system). A reader opens
  `<key>/state` or gets ENOENT; a killed writer leaves a `.tmp-` directory (in its ledger, so
  `iolab clean` removes it; `prune` removes those of dead writers too), never a `<key>`.
* **One writer per key.** Makers take `flock(<key>.lock)`; a second iolab run wanting the same
  state waits for the first and then uses its state (a lock dies with its process: a killed
  maker never blocks anyone).
* **Removal never pulls a state from under a reader.** A state is removed by renaming it away
  and then deleting it; a guest already restoring holds its file open, and an open file lives
  on after its name is gone (QEMU inherited the descriptor).
* **Bounded.** After every save the least recently used states beyond `IOLAB_VM_STATES_MAX`
  (default 3 GiB; a 512 MiB built-in guest saves to ~250 MB) are removed; the newest is kept.

The key is a digest of what the state depends on (vm/restore.py `state_material`): the
kernel and initramfs bytes, the QEMU binary, its version and firmware, and the whole saved
command line (machine, memory, CPUs, accelerator, devices) with only per-run names left out.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iolab.core import owner as owners
from iolab.core import paths
from iolab.core.errors import InputError
from iolab.core.resources import Ledger
from iolab.core.units import format_size, parse_size

STATE_FILE = "state"
META_FILE = "meta.json"
OUTCOME_FILE = "last-restore.json"  # how the last restore on this machine went, for `iolab doctor`
MAX_ENV = "IOLAB_VM_STATES_MAX"
DEFAULT_MAX_BYTES = 3 << 30
FORMAT = "iolab-vmstate 1"  # bump when what a state holds changes in a way the key does not show
LOCK_POLL_S = 0.1


class StateBusy(Exception):
    """Another process has been making this state for longer than we wait."""


class StateUnsupported(Exception):
    """This shape cannot be saved (the reason was recorded by an earlier attempt)."""


@dataclass(frozen=True)
class SavedState:
    """A complete saved state in the cache."""

    key: str
    directory: Path
    meta: dict[str, Any]

    @property
    def path(self) -> Path:
        return self.directory / STATE_FILE

    def open(self) -> int:
        """A read-only descriptor of the state (for QEMU to inherit). FileNotFoundError if it was
        removed since it was looked up: then it is simply not there."""
        return os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)

    @property
    def size(self) -> int:
        return int(self.meta.get("size", 0))


def states_dir() -> Path:
    return paths.cache_dir() / "vmstate"


def max_bytes() -> int:
    """The cache bound: $IOLAB_VM_STATES_MAX (a size like '3G'), else 3 GiB."""
    raw = os.environ.get(MAX_ENV)
    if raw is None or raw == "":
        return DEFAULT_MAX_BYTES
    try:
        return parse_size(raw.strip())
    except ValueError as exc:
        raise InputError(f"environment variable {MAX_ENV}: {exc}") from exc


def key_of(material: Mapping[str, Any]) -> str:
    """The cache key of a state: a digest of everything it depends on."""
    text = json.dumps({"format": FORMAT, **material}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def lookup(key: str) -> SavedState | None:
    """The complete state for `key`, marked as just used; None if there is none."""
    d = states_dir() / key
    try:
        meta = json.loads((d / META_FILE).read_text())
        os.utime(d / META_FILE)  # last use: pruning removes the least recently used first
    except (OSError, ValueError):
        return None
    return SavedState(key, d, meta) if (d / STATE_FILE).is_file() else None


def unsupported(key: str) -> str | None:
    """Why an earlier attempt found this shape cannot be saved, if one did."""
    try:
        return json.loads((states_dir() / f"{key}.unsupported").read_text())["reason"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def mark_unsupported(key: str, reason: str) -> None:
    d = states_dir()
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".tmp-{key}-{os.getpid()}-u.unsupported"
    tmp.write_text(json.dumps({"reason": reason, "at": time.time()}))
    os.replace(tmp, d / f"{key}.unsupported")


def discard(key: str) -> bool:
    """Remove the state for `key` (e.g. one QEMU could not load); True if there was one."""
    src = states_dir() / key
    trash = states_dir() / f".trash-{key}-{uuid.uuid4().hex[:8]}"
    try:
        os.rename(src, trash)
    except OSError:
        return False
    shutil.rmtree(trash, ignore_errors=True)
    return True


def obtain(key: str, material: Mapping[str, Any], make: Callable[[Path], Mapping[str, Any]],
           ledger: Ledger, wait_s: float) -> tuple[SavedState, bool]:
    """The state for `key`, made by `make(path)` if nobody has made it yet: (state, made here).

    `make` writes the state to `path` (a file in a fresh temporary directory) and returns facts
    for the meta file (timings, sizes). It runs under the key's lock; a second process asking
    for the same key meanwhile waits up to `wait_s` (StateBusy after that) and then gets the
    first one's state. An exception from `make` leaves nothing behind and propagates.
    """
    found = lookup(key)
    if found is not None:
        return found, False
    root = states_dir()
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f"{key}.lock", wait_s):
        found = lookup(key)  # made by the process we waited for
        if found is not None:
            return found, False
        reason = unsupported(key)
        if reason is not None:
            raise StateUnsupported(reason)
        tmp = root / f".tmp-{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        with ledger.creating("dir", str(tmp), recursive=True) as res:
            tmp.mkdir(mode=0o700)
        try:
            facts = dict(make(tmp / STATE_FILE))
            size = _fsync(tmp / STATE_FILE)
            meta = {"key": key, "format": FORMAT, "material": dict(material), "size": size,
                    "created": time.time(), "created_by": owners.me().token, **facts}
            (tmp / META_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True))
            _fsync(tmp / META_FILE)
            _fsync_dir(tmp)
            os.rename(tmp, root / key)
            _fsync_dir(root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            ledger.forget(res)
            raise
        ledger.forget(res)  # renamed into the cache: no longer this run's to undo
    prune(keep=key)
    state = lookup(key)
    if state is None:  # pruned at once by a concurrent prune: cannot happen to the kept key
        raise FileNotFoundError(f"saved state {key} vanished right after it was made")
    return state, True


@contextmanager
def _locked(lock: Path, wait_s: float) -> Iterator[None]:
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                if time.monotonic() > deadline:
                    raise StateBusy(f"another iolab process has been saving this guest state for over "
                                    f"{wait_s:.0f} s (lock {lock})") from None
                time.sleep(LOCK_POLL_S)
        yield
    finally:
        os.close(fd)  # releases the lock


def _try_lock(lock: Path) -> int | None:
    """The lock's descriptor if nobody holds it (the caller closes it), else None."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except OSError:
        os.close(fd)
        return None


def _fsync(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def states() -> list[SavedState]:
    """Every complete state, most recently used first."""
    root = states_dir()
    out = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    for d in entries:
        if d.name.startswith(".") or not d.is_dir():
            continue
        try:
            meta = json.loads((d / META_FILE).read_text())
            used = (d / META_FILE).stat().st_mtime
        except (OSError, ValueError):
            continue
        out.append((used, SavedState(d.name, d, meta)))
    out.sort(key=lambda x: x[0], reverse=True)
    return [s for _, s in out]


def prune(keep: str | None = None, limit: int | None = None) -> list[str]:
    """Remove the least recently used states while the cache holds more than `limit` bytes
    (default max_bytes()); `keep` and the most recent state stay whatever their size. Also
    removes what dead writers left (`.tmp-`, `.trash-`). Returns what was removed, one line
    each. A state whose key is locked (being remade after a failed restore) is left alone."""
    limit = max_bytes() if limit is None else limit
    removed = _remove_leftovers()
    all_states = states()
    total = sum(s.size for s in all_states)
    for s in reversed(all_states[1:]):  # oldest first; the most recent one always stays
        if total <= limit:
            break
        if s.key == keep:
            continue
        fd = _try_lock(states_dir() / f"{s.key}.lock")
        if fd is None:
            continue
        try:
            if discard(s.key):
                total -= s.size
                removed.append(f"saved guest state {s.key} ({format_size(s.size)}), least recently used")
        finally:
            os.close(fd)
    return removed


def _remove_leftovers() -> list[str]:
    """Temporary and trash directories whose writer is gone (its pid is in the name)."""
    out: list[str] = []
    try:
        entries = list(states_dir().iterdir())
    except OSError:
        return out
    for d in entries:
        if not (d.name.startswith(".tmp-") or d.name.startswith(".trash-")):
            continue
        parts = d.name.split("-")
        pid = int(parts[2]) if d.name.startswith(".tmp-") and len(parts) > 2 and parts[2].isdigit() else None
        if pid is not None and _pid_alive(pid):
            continue
        if d.is_dir():
            shutil.rmtree(d, ignore_errors=True)
        else:
            d.unlink(missing_ok=True)
        out.append(f"left-over {d.name}")
    return out


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def record_outcome(key: str, error: str | None) -> None:
    """Remember how the last restore went (None: it worked), for `iolab doctor`. Best effort."""
    root = states_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".tmp-outcome-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.write_text(json.dumps({"key": key, "ok": error is None, "error": error, "at": time.time()}))
        os.replace(tmp, root / OUTCOME_FILE)
    except OSError:
        pass


def status() -> dict[str, Any]:
    """Facts for `iolab doctor`: the states kept, their bytes, the bound (or why it is invalid),
    the last restore's outcome, the free space where states are written."""
    out: dict[str, Any] = {"directory": str(states_dir())}
    kept = states()
    out["count"], out["bytes"] = len(kept), sum(s.size for s in kept)
    try:
        out["bound"] = max_bytes()
    except InputError as exc:
        out["bound_problem"] = str(exc)
    try:
        out["last"] = json.loads((states_dir() / OUTCOME_FILE).read_text())
    except (OSError, ValueError):
        out["last"] = None
    probe = states_dir() if states_dir().exists() else paths.cache_dir()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        st = os.statvfs(probe)
        out["free"] = st.f_bavail * st.f_frsize
    except OSError:
        out["free"] = None
    return out
