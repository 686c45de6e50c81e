"""Undoing cgroup and scheduler changes: their resource kinds, each with its cleaner and its sweep.

Imported by `iolab clean` (through the ledger) so the cleaners exist even in a process
that never created a group. sweep() finds `iolab-*` groups under every blkio/v2 root when
no ledger survived (e.g. the state dir was wiped, or the owner used another data dir),
skipping groups a live iolab process owns (by the owner tag in the name, core.owner).
"""

from __future__ import annotations

from pathlib import Path

from iolab.cgroups import fs, processes, queue_claims, scheduler, trial
from iolab.cgroups.detect import mounts
from iolab.core import owner as owners
from iolab.core.cleaners import register_thawer
from iolab.core.resources import (
    ORDER_CLAIMS,
    ORDER_GROUPS,
    Resource,
    ResourceKind,
    live_items,
    register_kind,
)

PREFIX = "iolab-"


def clean_cgroup(res: Resource) -> None:
    """kind "cgroup": rmtree a group (tasks moved to info["dest"]), end and remove a trial
    cgroup (every process in it killed, cgroups.trial), or restore a file's value."""
    action = res.info.get("action", "rmtree")
    if action == "kill":
        processes.destroy([Path(d) for d in res.info.get("dirs") or [res.ident]])
    elif action == "rmtree":
        dest = Path(res.info["dest"]) if res.info.get("dest") else None
        fs.remove_tree(Path(res.ident), dest=dest, kill=bool(res.info.get("kill", False)))
    elif action == "write":
        path = Path(res.ident)
        if path.exists():
            fs.write_value(path, res.info["value"])
    else:
        raise ValueError(f"unknown cgroup action {action!r}")


def clean_scheduler(res: Resource) -> None:
    """kind "scheduler": release the claim (or, for old ledgers, put back what they recorded)."""
    scheduler.undo(res)


def roots() -> list[Path]:
    """Every hierarchy iolab may create groups in: the v1 blkio mount, the cgroup2 mount, and
    the v1 cpuacct, freezer, pids and memory mounts (trial cgroups and their bounds)."""
    m = mounts()
    found = [p for p in (m.v1_blkio, m.v2, m.v1_cpuacct, m.v1_freezer, m.v1_pids, m.v1_memory) if p is not None]
    return list(dict.fromkeys(found))


def leftovers(search: list[Path] | None = None) -> list[Path]:
    """`iolab-*` groups directly under each root whose owner is dead.

    Only tagged groups (`iolab-o<pid>.<start>-...`, core.owner) are candidates, and they are
    left while their owner lives, whatever its data dir. An untagged `iolab-*` group (iolab
    before 0.2, or a test's own name) says nothing about who uses it, and cgroups are
    machine-wide: the sweep never takes one (its owner's ledger still can, through `iolab clean`).
    """
    live = {r.ident for r in live_items() if r.kind == "cgroup"}
    found = []
    for root in search if search is not None else roots():
        if not root.is_dir():
            continue
        for p in sorted(root.glob(f"{PREFIX}*")):
            if not p.is_dir() or str(p) in live:
                continue
            o = owners.owner_of_name(p.name)
            if o is not None and not o.alive():
                found.append(p)
    return found


def sweep(search: list[Path] | None = None, dry_run: bool = False) -> tuple[list[str], list[str]]:
    """Remove leftover iolab groups; returns (removed, errors). The processes of a trial
    cgroup (or of a process's own leaf) are killed, as their owner would have; tasks of
    any other group (weighted groups) are moved to the root."""
    removed, errors = [], []
    for group in leftovers(search):
        if dry_run:
            removed.append(str(group))
            continue
        try:
            if _holds_processes_of_its_owner(group.name):
                processes.destroy([group])
            else:
                fs.remove_tree(group, dest=group.parent)
            removed.append(str(group))
        except (OSError, RuntimeError) as exc:
            errors.append(f"{group}: {exc}")
    return removed, errors


def _holds_processes_of_its_owner(name: str) -> bool:
    """A trial cgroup `iolab-<token>-trial-…` or a process's leaf `iolab-<token>-spawn-…`."""
    rest = name.split("-", 2)[2] if name.count("-") >= 2 else ""
    return rest.startswith((f"{trial.TRIAL_LABEL}-", f"{trial.SPAWN_LABEL}-"))


def thaw_dead_owners_group_of(pid: int) -> None:
    """Thaw the frozen cgroups `pid` sits in, where they belong to a dead owner: a SIGKILLed task
    of a frozen group dies only once thawed, and an owner killed between freezing its trial
    cgroup and thawing it (processes._frozen_kill) leaves the group frozen for good. Only groups
    under a top-level `iolab-o<pid>.<start>-…` group whose owner is dead are touched."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return
    m = mounts()
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        if controllers == "freezer" and m.v1_freezer is not None:
            root, state, thawed = m.v1_freezer, "freezer.state", "THAWED"
        elif controllers == "" and m.v2 is not None:
            root, state, thawed = m.v2, "cgroup.freeze", "0"
        else:
            continue
        parts = [x for x in rel.split("/") if x]
        if not parts or not parts[0].startswith(PREFIX):
            continue
        o = owners.owner_of_name(parts[0])
        if o is None or o.alive():
            continue
        for depth in range(len(parts), 0, -1):  # leaf first: a frozen parent thaws last
            f = root.joinpath(*parts[:depth]) / state
            try:
                if f.exists() and fs.read_value(f) not in (thawed, "THAWING"):
                    fs.write_value(f, thawed)
            except OSError:
                pass  # removed meanwhile, or not a freezer level: the wait says if it is stuck


register_kind(ResourceKind("cgroup", ORDER_GROUPS, clean_cgroup, lambda scope: sweep()))
register_thawer(thaw_dead_owners_group_of)
# claims of dead owners dropped while the devices are attached: a detach makes their records stale
register_kind(ResourceKind("scheduler", ORDER_CLAIMS, clean_scheduler, lambda scope: queue_claims.sweep()))
