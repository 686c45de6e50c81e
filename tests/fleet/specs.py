"""Spec text for fleet tests: the fleet target over namespace hosts, a short fio job."""

from __future__ import annotations

from tests.core.helpers import fio_workload, study_table
from tests.fleet.netns_hosts import NsHost


def fleet_target(hosts: list[NsHost], same_machine: bool = True, **over: str) -> str:
    text = '[target]\nkind = "fleet"\n'
    for h in hosts:
        text += (f'[[target.hosts]]\nname = "{h.name}"\naddress = "{over.get(h.name + "_address", h.address)}"\n'
                 f'port = {h.port}\ndevice = "{h.device}"\nsame_machine = {"true" if same_machine else "false"}\n')
    return text


def fleet_spec(hosts: list[NsHost], runtime: float = 1.0, reps: int = 2, **over: str) -> str:
    return (study_table("fleet", repetitions=reps, max_repetitions=reps)
            + fio_workload(runtime=runtime, size="32M") + fleet_target(hosts, **over))
