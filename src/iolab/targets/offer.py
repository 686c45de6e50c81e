"""What a target offers a workload, what a workload needs, and the one function that decides.

Like fio's I/O engines, which declare what they need in their `ioengine_ops` flags and let
fio's core decide, a workload never asks which kind of target it got. Every target computes
one `TargetOffer` from its validated parameters (before anything exists: spec validation
and --dry-run call it for every cell of the matrix), every workload one `Needs` from its
own, and `refusal()` compares them. A pair that cannot run is refused before the run with
a sentence naming what the workload needs, why, what the target offers instead and, in the
target's own keys, what would change that (`TargetOffer.remedies`).

A new target is then one module (its `offer()` says what it gives), and every workload that
can run there does, with no edit of any workload.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from iolab.core.sizing import mib

# Where a workload's processes run: this machine, a guest iolab booted, or fio servers elsewhere.
Where = Literal["host", "guest", "fleet"]
# What the workload does its I/O on: a directory it makes its own files in, one given file
# (the `cgroups` target's pre-filled data file, a fleet host's file), or a raw block device.
Storage = Literal["directory", "file", "block_device"]
# Any storage at all (a workload that makes its file in a directory or uses the file or device given).
ANY_STORAGE: frozenset[Storage] = frozenset({"directory", "file", "block_device"})
# Narrow services a target may give besides storage (each described in CAPABILITIES).
Capability = Literal["weighted_groups", "network", "network_peer"]

WHERE: dict[str, str] = {"host": "on the host", "guest": "in a guest", "fleet": "on a fleet of fio servers"}
STORAGE: dict[str, str] = {"directory": "a directory on a filesystem", "file": "a file to do its I/O on",
                           "block_device": "a raw block device"}
CAPABILITIES: dict[str, str] = {
    "weighted_groups": "weighted cgroups on its device (targets/base.py WeightedGroups)",
    "network": "a network path to the host (on the host itself: loopback)",
    "network_peer": "a second machine on that network (on the host itself: loopback)",
}
# What every target on this machine offers: network services through loopback.
HOST_CAPABILITIES: frozenset[Capability] = frozenset({"network", "network_peer"})


@dataclass(frozen=True)
class TargetOffer:
    """What one configured target gives a workload, known before it is set up.

    kind:         the target kind (for messages only: workloads never read it)
    settings:     the target's keys that decide this offer, as a user wrote them
                  ("filesystem = 'none', size = 64m"), quoted in refusals
    where:        where the workload's processes run
    storage:      what it can do I/O on (empty: nothing of its own)
    filesystem:   the filesystem of `directory` storage, if known ("ext4")
    directory:    the directory's path when known before setup (a host directory the user
                  names); None when setup makes it
    capacity:     bytes the workload may fill, as far as known before setup: a filesystem's room
                  (a fresh ext4's usable share, a directory's free space now), or a raw device's
                  size (shown, not checked: fio and the helpers stop at a device's end); None: unknown
    inodes:       files the workload may create there, if known
    memory:       bytes of memory the workload's machine has, when the target decides it (a
                  guest's); None: the host's own, not the target's to give
    apps:         programs the workload's machine carries ("fio", "ycsb", "iolab_varmail",
                  "sysbench"); None: whatever is installed where it runs (the host, a guest of
                  the user's own) -- a missing one is then the workload's run-time error
    capabilities: narrow services besides storage (CAPABILITIES)
    writable:     what a trial may write, for the confinement of trial processes: the paths a
                  trial's host processes may write, as far as known before setup (the user's
                  directory or device; the scratch directory under which setup makes images,
                  mounts and loop devices). After setup, `Placement.writable` is exact. Empty
                  when the workload writes nothing on this host (a guest's disk, a fleet's hosts).
    remedies:     how this target would offer what it lacks, in its own keys, by need
                  ("storage:directory", "capacity", "memory", "app:ycsb", "app" for any
                  program, "capability:network"); "{need}" is replaced by the amount needed
                  (e.g. "1792M") and "{app}" by the program's name
    """

    kind: str
    settings: str
    where: Where
    storage: frozenset[Storage]
    filesystem: str | None = None
    directory: str | None = None
    capacity: int | None = None
    inodes: int | None = None
    memory: int | None = None
    apps: frozenset[str] | None = None
    capabilities: frozenset[Capability] = frozenset()
    writable: tuple[str, ...] = ()
    remedies: Mapping[str, str] = field(default_factory=dict)

    def carries(self, app: str) -> bool:
        return self.apps is None or app in self.apps

    def summary(self) -> str:
        """One line for --dry-run: what a workload gets here."""
        store = " or ".join(STORAGE[s] for s in sorted(self.storage)) or "no storage of its own"
        if self.filesystem and "directory" in self.storage:
            store = store.replace("a filesystem", self.filesystem)
        parts = [f"runs workloads {WHERE[self.where]}", f"offers {store}"]
        if self.capacity is not None:
            parts.append(f"about {mib(self.capacity)} for data")
        if self.memory is not None:
            parts.append(f"{mib(self.memory)} of memory")
        if self.apps is not None:
            parts.append(f"carries {', '.join(sorted(self.apps)) or 'no program'}")
        special = self.capabilities - (HOST_CAPABILITIES if self.where == "host" else frozenset())
        if special:
            parts.append(", ".join(sorted(special)))
        if self.writable:
            parts.append(f"a trial may write {', '.join(self.writable)}")
        return "; ".join(parts)


@dataclass(frozen=True)
class Needs:
    """What one configured workload needs of its target; the defaults ask for nothing but a
    machine to run on (the host or a guest: never a fleet, which runs only fio's own jobs).

    storage:  any ONE of these will do (empty: the workload needs no storage)
    capacity: bytes it writes into a filesystem, checked where the target offers a directory
    inodes:   files it creates there
    why:      what the workload does with each need, by the keys of TargetOffer.remedies
              ("where", "storage", "capacity", "inodes", "memory", "app:<name>",
              "capability:<name>"), quoted in the refusal
    check:    a decision no field above can express (an imported job file's names resolved
              inside a host directory the user named): the reason it cannot run, or None
    """

    where: frozenset[Where] = frozenset({"host", "guest"})
    storage: frozenset[Storage] = frozenset()
    capacity: int = 0
    inodes: int = 0
    memory: int = 0
    apps: frozenset[str] = frozenset()
    capabilities: frozenset[Capability] = frozenset()
    why: Mapping[str, str] = field(default_factory=dict)
    check: Callable[[TargetOffer], str | None] | None = None


@dataclass(frozen=True)
class MachineCheck:
    """One line of `iolab doctor` a target kind contributes: a facility or program it needs."""

    name: str
    state: Literal["ok", "warn", "missing", "fail"]
    detail: str


def refusal(needs: Needs, offer: TargetOffer) -> str | None:
    """None when the workload can run on the target, else every unmet need in one sentence
    ("; " between them). A workload that cannot run where the target runs workloads is told
    only that: what it would need there is beside the point."""
    if offer.where not in needs.where:
        return _line(needs, offer, "where", f"it runs only {_or(WHERE[w] for w in WHERE if w in needs.where)}",
                     f"this target runs workloads {WHERE[offer.where]}")
    out: list[str] = []
    if needs.storage and not needs.storage & offer.storage:
        wanted = sorted(needs.storage)
        has = _or(STORAGE[s] for s in sorted(offer.storage)) or "no storage of its own"
        remedy_key = next((f"storage:{s}" for s in wanted if f"storage:{s}" in offer.remedies), "storage")
        out.append(_line(needs, offer, "storage", f"it needs {_or(STORAGE[s] for s in wanted)}",
                         f"this target offers {has}", remedy_key))
    files = "directory" in offer.storage  # room is a filesystem's: on a raw device the tools stop at its end
    if needs.capacity and files and offer.capacity is not None and needs.capacity > offer.capacity:
        out.append(_line(needs, offer, "capacity", f"it needs {mib(needs.capacity)} of space",
                         f"this target has about {mib(offer.capacity)}", amount=needs.capacity))
    if needs.inodes and files and offer.inodes is not None and needs.inodes > offer.inodes:
        out.append(_line(needs, offer, "inodes", f"it needs {needs.inodes} files",
                         f"this target has about {offer.inodes} inodes"))
    if needs.memory and offer.memory is not None and needs.memory > offer.memory:
        out.append(_line(needs, offer, "memory", f"it needs {mib(needs.memory)} of memory",
                         f"this target gives it {mib(offer.memory)}", amount=needs.memory))
    for app in sorted(needs.apps):
        if not offer.carries(app):
            key = f"app:{app}"
            out.append(_line(needs, offer, key, f"it needs {app}", "this target does not carry it",
                             key if key in offer.remedies else "app", app=app))
    for cap in sorted(needs.capabilities - offer.capabilities):
        key = f"capability:{cap}"
        out.append(_line(needs, offer, key, f"it needs {CAPABILITIES[cap]}", "this target does not offer it"))
    if needs.check is not None and not out:
        own = needs.check(offer)
        if own:
            out.append(own)
    return "; ".join(out) or None


def _line(needs: Needs, offer: TargetOffer, key: str, need: str, has: str, remedy_key: str | None = None,
          amount: int | None = None, app: str = "") -> str:
    why = needs.why.get(key)
    text = f"{need} ({why}): {has}" if why else f"{need}: {has}"
    remedy = offer.remedies.get(remedy_key or key)
    if remedy:
        shown = f"{math.ceil(amount / (1 << 20))}M" if amount is not None else ""
        text += "; " + remedy.replace("{need}", shown).replace("{app}", app)
    return text


def _or(words: Iterable[str]) -> str:
    items = list(words)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " or " + items[-1]
