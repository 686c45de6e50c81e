"""The metrics a fio job on a fleet produces beyond a single host's (core/metrics.py).

Unprefixed fio metrics (`iops`, `read_clat_p99_us`, ...) are the fleet's aggregate over
the window in which every host ran; `host:<name>:<fio metric>` is one host's own result.
"""

from __future__ import annotations

from dataclasses import replace

from iolab.core.metrics import Metric
from iolab.fio.engine import FIO_METRICS

HOST_PREFIX = "host:{host:label}:"

FLEET_METRICS: tuple[Metric, ...] = tuple(
    replace(m, name=HOST_PREFIX + m.name, description=f"one host's own result: {m.description}")
    for m in FIO_METRICS
) + (
    Metric(HOST_PREFIX + "start_offset_ms", "ms", "neither",
           "when this host's job started after the first host's (clock skew corrected)"),
    Metric("fleet_hosts", "hosts", "neither", "hosts the trial was sent to"),
    Metric("fleet_hosts_ok", "hosts", "higher", "hosts whose result came back; the aggregate covers these"),
    Metric("fleet_start_spread_ms", "ms", "lower", "last host's job start minus the first's"),
    Metric("fleet_window_s", "s", "neither", "length of the window in which every host ran (the aggregate's)"),
)


def host_metric(host: str, name: str) -> str:
    return f"host:{host}:{name}"
