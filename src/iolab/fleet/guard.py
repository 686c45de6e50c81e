"""The data-safety guard for a fleet host's device, and `--destroy-data HOST:DEVICE`.

A host that shares this machine's devices (FleetHost.local) is judged by the same guard as
the `device` target (core.diskguard: partitions, signatures, mounts, holders, swap). A
device on another machine cannot be examined from here, so it is refused unless the user
names it with `--destroy-data HOST:DEVICE`. Any other `--destroy-data` value goes to
core.diskguard unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from iolab.core import diskguard
from iolab.core.errors import RefusedError
from iolab.fleet.hosts import FleetHost

_HOST_DEVICE = re.compile(r"([A-Za-z0-9_.]{1,64}):(/.+)")
_ALLOWED: set[tuple[str, str]] = set()


def allow_destroy(values: Iterable[str]) -> None:
    """Split `HOST:DEVICE` values (kept here) from plain devices (core.diskguard)."""
    plain = []
    for v in values:
        m = _HOST_DEVICE.fullmatch(v)
        if m:
            _ALLOWED.add((m.group(1), m.group(2)))
        else:
            plain.append(v)
    diskguard.allow_destroy(plain)


def allowed(host: FleetHost) -> bool:
    return (host.name, host.path) in _ALLOWED


def check_host(host: FleetHost) -> None:
    """RefusedError when the host's device may hold data and was not named in --destroy-data."""
    if host.device is None:
        return
    flag = f"--destroy-data {host.name}:{host.device}"
    if not host.local:
        if not allowed(host):
            raise RefusedError(
                f"refusing to use {host.device} on host {host.label()}: a device on another machine "
                f"cannot be examined from here, and writing to it destroys its data. If that is really "
                f"what you want, pass {flag}")
        return
    try:
        node = diskguard.block_device(host.device)
    except ValueError as exc:
        raise RefusedError(f"refusing to use {host.device} on host {host.label()}: it {exc}") from None
    signs = diskguard.data_signs(node)
    if signs and not allowed(host):
        raise RefusedError(
            f"refusing to use {host.device} on host {host.label()}: it {'; it '.join(signs)}. Its data "
            f"would be destroyed. If that is really what you want, pass {flag}")
