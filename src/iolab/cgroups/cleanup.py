"""Undoing cgroup and scheduler changes: the ledger's cleaners and a sweep by name.

Imported by `iolab clean` (through the ledger) so the cleaners exist even in a process
that never created a group. sweep() finds `iolab-*` groups under every blkio/v2 root when
no ledger survived (e.g. the state dir was wiped), skipping groups a live iolab process owns.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from iolab.cgroups import fs, scheduler
from iolab.core import paths
from iolab.core.resources import Resource, _alive, register_cleaner

PREFIX = "iolab-"


def clean_cgroup(res: Resource) -> None:
    """kind "cgroup": rmtree a group (tasks moved to info["dest"]) or restore a file's value."""
    action = res.info.get("action", "rmtree")
    if action == "rmtree":
        dest = Path(res.info["dest"]) if res.info.get("dest") else None
        fs.remove_tree(Path(res.ident), dest=dest, kill=bool(res.info.get("kill", False)))
    elif action == "write":
        path = Path(res.ident)
        if path.exists():
            fs.write_value(path, res.info["value"])
    else:
        raise ValueError(f"unknown cgroup action {action!r}")


def clean_scheduler(res: Resource) -> None:
    """kind "scheduler": put back the scheduler or the tunables recorded in info."""
    scheduler.undo(res.info)


register_cleaner("cgroup", clean_cgroup)
register_cleaner("scheduler", clean_scheduler)


def roots() -> list[Path]:
    """Every hierarchy iolab may create groups in: the v1 blkio mount and the cgroup2 mount."""
    from iolab.cgroups.detect import mounts

    m = mounts()
    return [p for p in (m.v1_blkio, m.v2) if p is not None]


def leftovers(search: list[Path] | None = None) -> list[Path]:
    """`iolab-*` groups directly under each root that no live iolab process has in its ledger."""
    live = _live_ledger_groups()
    found = []
    for root in search if search is not None else roots():
        if root.is_dir():
            found += [p for p in sorted(root.glob(f"{PREFIX}*"))
                      if p.is_dir() and str(p) not in live]
    return found


def sweep(search: list[Path] | None = None, dry_run: bool = False) -> tuple[list[str], list[str]]:
    """Remove leftover iolab groups (tasks moved to the root); returns (removed, errors)."""
    removed, errors = [], []
    for group in leftovers(search):
        if dry_run:
            removed.append(str(group))
            continue
        try:
            fs.remove_tree(group, dest=group.parent)
            removed.append(str(group))
        except OSError as exc:
            errors.append(f"{group}: {exc}")
    return removed, errors


def _live_ledger_groups() -> set[str]:
    """cgroup paths recorded by iolab processes that are still running."""
    d = paths.ledger_dir()
    out: set[str] = set()
    if not d.is_dir():
        return out
    for f in d.glob("*.json"):
        if not (f.stem.isdigit() and _alive(int(f.stem))):
            continue
        try:
            items: list[dict[str, Any]] = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        out |= {r["ident"] for r in items if r.get("kind") == "cgroup"}
    return out
