"""A target module that brings two resource kinds of its own, as a new target does: registered
where they are made, with an order on the ledger's scale, and never named anywhere else. Its
cleaners and sweeps only note when they ran (and whether the other kinds' things still
existed then), so the test can see the order the ledger undoes things in."""

from __future__ import annotations

import os
from typing import ClassVar, Literal

from iolab.core.resources import (
    ORDER_FILES,
    ORDER_MOUNTS,
    Resource,
    ResourceKind,
    SweepScope,
    register_kind,
)
from iolab.targets.base import TargetOffer, TargetParams
from iolab.targets.hostdir import HostDirTarget

KIND = "kind-test"
REF = "tests.core.kind_target:KindTarget"
EARLY, LATE = "test-kind-early", "test-kind-late"
CALLS: list[tuple[str, str, bool]] = []  # (kind, what ran, whether the probe file existed then)
PROBE: list[str] = []  # the file whose existence each call notes (a `file` entry of the same ledger)


def _noted(kind: str, what: str) -> None:
    CALLS.append((kind, what, bool(PROBE) and os.path.exists(PROBE[0])))


def _sweep(kind: str, scope: SweepScope) -> tuple[list[str], list[str]]:
    _noted(kind, f"sweep {scope.scratch}")
    return [f"{kind} swept"], []


register_kind(ResourceKind(EARLY, ORDER_MOUNTS + 5, lambda res: _noted(EARLY, res.ident),
                           lambda scope: _sweep(EARLY, scope)))
register_kind(ResourceKind(LATE, ORDER_FILES + 20, lambda res: _noted(LATE, res.ident)))


class KindParams(TargetParams):
    kind: Literal["kind-test"] = "kind-test"


class KindTarget(HostDirTarget):
    kind: ClassVar[str] = KIND
    Params: ClassVar[type[TargetParams]] = KindParams

    @classmethod
    def offer(cls, params: TargetParams) -> TargetOffer:
        return TargetOffer(kind=KIND, settings="", where="host", storage=frozenset())


def entry(kind: str, ident: str) -> dict[str, object]:
    return {"kind": kind, "ident": ident, "info": {}, "rid": Resource(kind, ident).rid}
