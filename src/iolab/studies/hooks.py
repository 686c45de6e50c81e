"""What a built-in study's hook may ask of the runner, and what it may answer.

A study may check or prepare a target once it is set up and before its trials run
(`before_group`: a sanity gate, a prefill no probe may count). The hook gets a
`GroupContext`, which offers exactly this and nothing more of the runner:

  configs          the configurations about to run on this target (read only)
  placement        the prepared target, as a workload sees it
  run_workload()   run a one-off workload on it (the result is returned, never stored)
  set_extra()      store one run-level measurement (`extra.<key>` of the results document)
  message()        print one line in the run's progress

and returns a `GroupDecision` (or None: run everything). The runner acts on the decision:
every skipped configuration gets a trial record saying so, with the reason, so a skip is
as visible in the results and the report as a failure; the hook never touches the runner's
state, its store or its reporter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from iolab.core.model import Config
from iolab.targets.base import Placement
from iolab.workloads.base import Workload, WorkloadResult

# extra keys the runner writes itself: a hook may not overwrite them
RESERVED_EXTRA = frozenset({"problems", "children"})


@dataclass(frozen=True)
class GroupDecision:
    """A hook's answer: configurations (by id) not to run on this target, and why."""

    skip: tuple[str, ...] = ()
    reason: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.skip, str) or not all(isinstance(c, str) for c in self.skip):
            raise TypeError(f"GroupDecision.skip is a sequence of configuration ids, got {self.skip!r}")
        object.__setattr__(self, "skip", tuple(self.skip))
        if self.skip and not self.reason.strip():
            raise ValueError("a GroupDecision that skips configurations must say why (reason)")


class GroupContext:
    """The narrow interface a study hook gets for one prepared target (see the module docstring).

    It holds the configurations, the placement and two callables, nothing else: no runner,
    no configuration state, no store. `__slots__` keeps it from growing attributes."""

    __slots__ = ("_configs", "_placement", "_set_extra", "_message")

    def __init__(self, configs: Sequence[Config], placement: Placement,
                 set_extra: Callable[[str, Any], None], message: Callable[[str], None]):
        self._configs = tuple(configs)
        self._placement = placement
        self._set_extra = set_extra
        self._message = message

    @property
    def configs(self) -> tuple[Config, ...]:
        """The configurations about to run on this target."""
        return self._configs

    @property
    def placement(self) -> Placement:
        """The prepared target, as a workload sees it."""
        return self._placement

    def run_workload(self, workload: Workload, timeout_s: float) -> WorkloadResult:
        """Run `workload` once on this target; nothing is stored, no probe runs."""
        return workload.run(self._placement, timeout_s)

    def set_extra(self, key: str, value: Any) -> None:
        """Store a run-level measurement as `extra[key]` of the results document."""
        if not isinstance(key, str) or not key or key in RESERVED_EXTRA:
            raise ValueError(f"a study hook cannot set extra {key!r} (reserved: {', '.join(sorted(RESERVED_EXTRA))})")
        self._set_extra(key, value)

    def message(self, text: str) -> None:
        """One line in the run's progress output."""
        self._message(str(text))


# What a study module exports as `before_group`.
GroupHook = Callable[[GroupContext], GroupDecision | None]


def configs_to_skip(decision: GroupDecision | None, configs: Sequence[Config]) -> list[Config]:
    """The configurations a decision skips; ValueError for an id that is not one of `configs`
    (a hook naming something else is the hook's bug, failed like any other hook error)."""
    if decision is None:
        return []
    if not isinstance(decision, GroupDecision):
        raise TypeError(f"a study hook returns a GroupDecision or None, not {type(decision).__name__}")
    ids = {c.id for c in configs}
    unknown = [c for c in decision.skip if c not in ids]
    if unknown:
        raise ValueError(f"the hook skips configurations that are not on this target: {', '.join(unknown)}")
    return [c for c in configs if c.id in decision.skip]
