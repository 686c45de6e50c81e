"""One controller set up on one disk for one run: scheduler, tunables, parent, groups.

This is the piece a study uses. setup() does the steps in the order that makes each
one undoable (ledger first), teardown() undoes them in reverse and also runs on any
exception inside a `with` block, so no group and no scheduler change outlives the run.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from iolab.cgroups import registry, scheduler
from iolab.cgroups.base import Backend, Group
from iolab.cgroups.counters import IoCounters
from iolab.cgroups.registry import open_backend
from iolab.core import owner as owners
from iolab.core.resources import Ledger, Resource


class CgroupSession:
    """Weighted groups on `device` under backend `name` ("bfq", "none", "v2-iocost", ...)."""

    def __init__(self, name: str, device: str, ledger: Ledger, runid: str | None = None,
                 tunables: dict[str, Any] | None = None, backend: Backend | None = None):
        self.backend = backend or open_backend(name, device, ledger)
        self.ledger = ledger
        # the parent group is iolab-<runid>: the owner's tag in it tells a sweep whose it is
        self.runid = runid or f"{owners.me().token}-{uuid.uuid4().hex[:6]}"
        self.tunables = {**self.backend.tunables, **(tunables or {})}
        self._sched: list[Resource] = []
        self.setup_s = 0.0

    @property
    def groups(self) -> list[Group]:
        return list(self.backend.groups.values())

    def setup(self, weights: Sequence[int | None], names: Sequence[str] | None = None) -> list[Group]:
        """Select the scheduler, apply tunables, create the parent and one group per weight."""
        t0 = time.monotonic()
        names = list(names) if names is not None else [f"g{i:03d}" for i in range(len(weights))]
        if len(names) != len(weights):
            raise ValueError("names and weights differ in length")
        for w in weights:  # refuse before changing anything
            if w is not None:
                self.backend.validate_weight(w)
        self.prepare_device()
        self.backend.create_parent(self.runid)
        out = [self.backend.create_group(n, w) for n, w in zip(names, weights, strict=True)]
        self.setup_s = time.monotonic() - t0
        return out

    def prepare_device(self) -> None:
        """Scheduler first, then its tunables (they belong to the scheduler instance)."""
        dev, want = self.backend.dev, self.backend.scheduler
        if want is not None:
            res = scheduler.select(dev, want, self.ledger)
            if res:
                self._sched.append(res)
        if self.tunables and scheduler.current(dev) != "none":
            tuned = scheduler.set_tunables(dev, self.tunables, self.ledger)
            if tuned:
                self._sched.append(tuned)

    def procs_files(self) -> dict[str, str]:
        """Group name -> cgroup.procs path, for ExecRequest.cgroup_procs."""
        return {g.name: self.backend.procs_file(g) for g in self.groups}

    def counters(self) -> dict[str, IoCounters]:
        return {g.name: self.backend.read_counters(g) for g in self.groups}

    def teardown(self) -> list[str]:
        """Remove the groups, then restore tunables and scheduler; errors returned, not raised."""
        errors = self.backend.remove()
        for res in reversed(self._sched):
            try:
                self.ledger.release(res)
            except Exception as exc:
                errors.append(f"{res.kind} {res.ident}: {exc}")
        self._sched.clear()
        return errors

    def manifest(self) -> dict[str, Any]:
        """Backend, weights as read back, device queue facts and detection, JSON-able."""
        return {"cgroups": self.backend.describe(),
                "device": scheduler.queue_facts(self.backend.dev),
                "tunables_set": dict(self.tunables), "setup_s": round(self.setup_s, 3),
                "detect": registry.describe()}

    def __enter__(self) -> CgroupSession:
        return self

    def __exit__(self, *exc: object) -> None:
        errors = self.teardown()
        if errors and exc[0] is None:
            raise RuntimeError("cgroup teardown failed: " + "; ".join(errors))
