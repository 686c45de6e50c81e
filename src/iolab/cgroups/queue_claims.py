"""Scheduler and tunable changes shared by several runs: one machine-wide, locked record per device.

Two iolab runs may use the same disk (a `device` or `cgroups` target on one real device).
If each restored "its" original scheduler when it ended, the first to end would pull the
scheduler from under the other. So every change is a *claim* in a record under
`$IOLAB_RUN/queues/<dev>.json` (default /run/iolab), read and written under an flock:

    {"device": "loop3", "queue": "/sys/block/loop3/queue", "instance": "26",
     "original": {"scheduler": "none", "iosched": {}},
     "claims": {"<ledger entry id>": {"owner": "o1234.567890", "scheduler": "bfq", "iosched": {}}}}

* The first claim snapshots the device as iolab found it (`original`: the scheduler and
  every tunable of it). Later claims keep that snapshot.
* A claim asking for a value another *live* owner holds differently is refused: two runs
  measuring one disk under different schedulers would both measure nonsense.
* Releasing a claim restores the original only when no live claim is left; claims of
  dead owners (pid and start time, core.owner) count as released.
* `instance` is the device's diskseq (a new one for every attach), so a record about a
  loop device number that was since detached and reused is dropped, never "restored".

Each claim is also a ledger entry (kind "scheduler"), written pending before the claim,
so a crash at any instant leaves either no claim or one whose owner is dead.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from iolab.cgroups import fs
from iolab.cgroups.device import BlockDev
from iolab.core import owner as owners
from iolab.core import paths
from iolab.core.errors import RefusedError


def records_dir() -> Path:
    return paths.run_dir() / "queues"


def claim(dev: BlockDev, rid: str, *, scheduler: str | None = None,
          iosched: dict[str, str] | None = None) -> None:
    """Record claim `rid` of this process and apply its values (scheduler first, then tunables)."""
    iosched = {k: str(v) for k, v in (iosched or {}).items()}
    me = owners.me().token
    with _locked(dev.name) as rec_path:
        rec = _load(rec_path, dev.queue)
        if rec is None:
            rec = {"device": dev.name, "queue": str(dev.queue), "instance": _instance(dev.queue),
                   "original": {"scheduler": _current(dev.queue), "iosched": _tunables(dev.queue)},
                   "claims": {}}
        others = {r: c for r, c in _live_claims(rec).items() if c["owner"] != me}
        _check_conflicts(dev, others, scheduler, iosched)
        rec["claims"][rid] = {"owner": me, "scheduler": scheduler, "iosched": iosched}
        _save(rec_path, rec)
        if scheduler is not None and _current(dev.queue) != scheduler:
            fs.write_value(dev.queue / "scheduler", scheduler)
            if _current(dev.queue) != scheduler:
                raise RuntimeError(f"{dev.name}: scheduler still {_current(dev.queue)!r} after selecting {scheduler!r}")
        for key, value in iosched.items():
            fs.write_value(dev.iosched / key, value)
            got = fs.read_value(dev.iosched / key)
            if got != value:
                raise RuntimeError(f"{dev.name}: {key} reads {got!r} after writing {value!r}")


def release(queue: Path, rid: str) -> bool:
    """Drop claim `rid`; restore the original if no live claim is left. True if it restored."""
    name = queue.parent.name
    with _locked(name) as rec_path:
        rec = _load(rec_path, queue)
        if rec is None:
            return False
        rec["claims"].pop(rid, None)
        return _settle(rec_path, rec, queue)


def sweep() -> tuple[list[str], list[str]]:
    """For `iolab clean --all`: drop every dead owner's claims; restore devices nobody holds now."""
    restored: list[str] = []
    errors: list[str] = []
    d = records_dir()
    for f in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            with _locked(f.stem) as rec_path:
                raw = _read(rec_path)
                if raw is None:
                    continue
                queue = Path(raw.get("queue", ""))
                rec = _load(rec_path, queue)
                if rec is not None and _settle(rec_path, rec, queue):
                    restored.append(f"scheduler {rec['device']} (back to {rec['original']['scheduler']})")
        except (OSError, ValueError, RuntimeError) as exc:
            errors.append(f"scheduler record {f}: {exc}")
    return restored, errors


def holders(name: str) -> list[str]:
    """Owner tokens with a live claim on device `name` (for messages and tests)."""
    raw = _read(records_dir() / f"{name}.json")
    return sorted({c["owner"] for c in _live_claims(raw).values()}) if raw else []


# ---------------------------------------------------------------- inside the lock

def _settle(rec_path: Path, rec: dict[str, Any], queue: Path) -> bool:
    rec["claims"] = _live_claims(rec)
    if rec["claims"]:
        _save(rec_path, rec)
        return False
    _restore(queue, rec["original"])
    rec_path.unlink(missing_ok=True)
    return True


def _restore(queue: Path, original: dict[str, Any]) -> None:
    if not (queue / "scheduler").exists():
        return  # the device is gone; nothing left to restore
    if _current(queue) != original["scheduler"]:
        fs.write_value(queue / "scheduler", original["scheduler"])
    if _current(queue) != original["scheduler"]:
        raise RuntimeError(f"{queue.parent.name}: could not restore scheduler {original['scheduler']!r}")
    problems = []
    for key, value in (original.get("iosched") or {}).items():
        p = queue / "iosched" / key
        try:
            if p.exists() and fs.read_value(p) != value:
                fs.write_value(p, value)
        except OSError as exc:
            problems.append(f"{key}: {exc}")
    if problems:
        raise RuntimeError(f"{queue.parent.name}: tunables not restored: {'; '.join(problems)}")


def _check_conflicts(dev: BlockDev, others: dict[str, dict[str, Any]], scheduler: str | None,
                     iosched: dict[str, str]) -> None:
    for c in others.values():
        held = c.get("scheduler")
        if scheduler is not None and held is not None and held != scheduler:
            raise RefusedError(f"{dev.name}: another iolab run ({_who(c['owner'])}) holds the scheduler at "
                               f"{held!r}; refusing to switch it to {scheduler!r} under that run")
        for key, value in iosched.items():
            theirs = (c.get("iosched") or {}).get(key)
            if theirs is not None and theirs != value:
                raise RefusedError(f"{dev.name}: another iolab run ({_who(c['owner'])}) holds {key}={theirs}; "
                                   f"refusing to set {key}={value} under that run")


def _who(token: str) -> str:
    o = owners.parse_token(token)
    return f"pid {o.pid}" if o else token


def _live_claims(rec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for rid, c in (rec.get("claims") or {}).items():
        o = owners.parse_token(str(c.get("owner", "")))
        if o is not None and o.alive():
            out[rid] = c
    return out


@contextmanager
def _locked(name: str) -> Iterator[Path]:
    if "/" in name or name.startswith("."):
        raise ValueError(f"bad device name {name!r}")
    d = records_dir()
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield d / f"{name}.json"
    finally:
        os.close(fd)  # closing drops the flock; a killed holder's lock goes with its process


def _read(rec_path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(rec_path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("original"), dict) else None


def _load(rec_path: Path, queue: Path) -> dict[str, Any] | None:
    """The record, or None; a record about another instance of the device number is dropped."""
    rec = _read(rec_path)
    if rec is None:
        return None
    if not (queue / "scheduler").exists() or rec.get("instance") != _instance(queue):
        rec_path.unlink(missing_ok=True)
        return None
    rec.setdefault("claims", {})
    return rec


def _save(rec_path: Path, rec: dict[str, Any]) -> None:
    tmp = rec_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec, indent=1, sort_keys=True))
    os.replace(tmp, rec_path)


def _instance(queue: Path) -> str:
    """diskseq (Linux >= 5.15) identifies one attach of a device; else its MAJ:MIN."""
    for f in (queue.parent / "diskseq", queue.parent / "dev"):
        try:
            return f.read_text().strip()
        except OSError:
            continue
    return ""


def _current(queue: Path) -> str:
    for s in (queue / "scheduler").read_text().split():
        if s.startswith("["):
            return s.strip("[]")
    return "none"


def _tunables(queue: Path) -> dict[str, str]:
    d = queue / "iosched"
    out = {}
    if d.is_dir():
        for p in sorted(d.iterdir()):
            try:
                if p.is_file() and os.access(p, os.W_OK):
                    out[p.name] = p.read_text().strip()
            except OSError:
                continue
    return out
