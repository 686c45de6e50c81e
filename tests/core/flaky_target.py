"""A host-directory target whose set-up fails on the attempts a test names, for the runner's
set-up retry: each failure happens inside the real HostDirTarget.setup (after its scratch
directory is made and ledgered), as a transient error (OSError, like a loop device another run
grabbed) or a final one (CapabilityMissing), so teardown and the ledger run for real."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from iolab.core.errors import CapabilityMissing
from iolab.targets.base import Placement, TargetParams
from iolab.targets.hostdir import HostDirParams, HostDirTarget

KIND = "flaky-host"
REF = "tests.core.flaky_target:FlakyHostTarget"


class FlakyHostParams(HostDirParams):
    kind: Literal["flaky-host"] = "flaky-host"  # type: ignore[assignment]
    fail_setups: list[int] = Field(default_factory=list, description="set-up attempts (from 0) that fail")
    final: bool = Field(False, description="fail with CapabilityMissing (never retried) instead of OSError")


class FlakyHostTarget(HostDirTarget):
    kind: ClassVar[str] = KIND
    Params: ClassVar[type[TargetParams]] = FlakyHostParams
    params: FlakyHostParams
    setups: ClassVar[int] = 0  # over the whole run: the runner keeps one instance per target

    def setup(self) -> Placement:
        placement = super().setup()
        attempt, type(self).setups = type(self).setups, type(self).setups + 1
        if attempt in self.params.fail_setups:
            if self.params.final:
                raise CapabilityMissing(f"flaky-host: set-up {attempt} lacks a capability")
            raise OSError(f"flaky-host: set-up {attempt} hit a transient error")
        return placement
