"""Per-group I/O counters from the kernel, the ground truth beside fio's own totals.

v1 prints one "MAJ:MIN Op N" line per operation (blkio.*io_serviced / io_service_bytes);
v2 prints one "MAJ:MIN key=value ..." line per device (io.stat). Both are filtered to the
target disk so I/O of other devices charged to the same group never leaks in.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class IoCounters:
    """Cumulative completed I/Os and bytes of one group on one device."""

    rios: int = 0
    wios: int = 0
    rbytes: int = 0
    wbytes: int = 0
    dios: int = 0
    dbytes: int = 0

    @property
    def ios(self) -> int:
        return self.rios + self.wios + self.dios

    def __sub__(self, other: IoCounters) -> IoCounters:
        return IoCounters(*(a - b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def astuple(c: IoCounters) -> tuple[int, ...]:
    return (c.rios, c.wios, c.rbytes, c.wbytes, c.dios, c.dbytes)


def parse_rwstat(text: str, majmin: str) -> dict[str, int]:
    """v1 blkg_rwstat: {"read": N, "write": N, ...} for `majmin`; {} if the device is absent."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == majmin:
            out[parts[1].lower()] = int(parts[2])
    return out


def from_v1(serviced: str, service_bytes: str, majmin: str) -> IoCounters | None:
    """Counters from the two v1 files, or None when the device has no lines (not accounted)."""
    ios = parse_rwstat(serviced, majmin)
    nbytes = parse_rwstat(service_bytes, majmin)
    if not ios and not nbytes:
        return None
    return IoCounters(rios=ios.get("read", 0), wios=ios.get("write", 0),
                      rbytes=nbytes.get("read", 0), wbytes=nbytes.get("write", 0),
                      dios=ios.get("discard", 0), dbytes=nbytes.get("discard", 0))


def from_v2(io_stat: str, majmin: str) -> IoCounters:
    """Counters from v2 io.stat; zeros when the group has not done I/O on the device yet."""
    for line in io_stat.splitlines():
        parts = line.split()
        if not parts or parts[0] != majmin:
            continue
        kv = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        return IoCounters(**{k: int(kv.get(k, 0)) for k in ("rios", "wios", "rbytes", "wbytes", "dios", "dbytes")})
    return IoCounters()
