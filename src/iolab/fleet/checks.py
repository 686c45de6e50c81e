"""Checks before load: every host reachable, the same fio everywhere, clocks compared.

Reachability is a plain connect (TCP or unix socket) with a short timeout, so an unreachable
host is named at once instead of after fio's own retries. Each host then runs a tiny probe
job (ioengine=null, 0.2 s) through its server, with its own fio client like a trial
(fleet/client.py): fio's probe reply names the server's fio version, OS, architecture and
host name. A host on another clock runs skew.PROBES of them, each logging with the host's
clock, for the minimum-delay estimate of its clock skew (fleet/skew.py); a host on this
machine's clock needs none.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from iolab.core.errors import RefusedError
from iolab.core.resources import Ledger
from iolab.fio import engine as fio_engine
from iolab.fleet import skew as skews
from iolab.fleet.client import LOG_PREFIX, ClientRun, run_clients
from iolab.fleet.hosts import FleetHost

CONNECT_TIMEOUT_S = 3.0
PROBE_INTERVAL_MS = 20
_PROBE_LINE = re.compile(r"hostname=(?P<hostname>[^,\n]*), be=\d+, (?P<bits>\d+)-bit, os=(?P<os>[^,\n]*), "
                         r"arch=(?P<arch>[^,\n]*), fio=(?P<fio>[^,\s]*)")

Runner = Callable[[list[FleetHost], dict[str, str]], ClientRun]


@dataclass(frozen=True)
class HostFacts:
    name: str
    fio: str | None
    os: str | None
    arch: str | None
    hostname: str | None
    skew: skews.Skew
    problem: str | None = None

    @property
    def skew_ms(self) -> float | None:
        return self.skew.ms

    def manifest(self) -> dict[str, object]:
        return {"fio": self.fio, "os": self.os, "arch": self.arch, "hostname": self.hostname,
                "kernel": "not reported by fio's server", **self.skew.manifest()}


def unreachable(hosts: list[FleetHost]) -> dict[str, str]:
    """Host name -> why it cannot be reached (connect refused, timed out, no such socket)."""
    def one(h: FleetHost) -> tuple[str, str | None]:
        try:
            if h.is_unix:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sk:
                    sk.settimeout(CONNECT_TIMEOUT_S)
                    sk.connect(h.address)
            else:
                socket.create_connection((h.address, h.port), timeout=CONNECT_TIMEOUT_S).close()
            return h.name, None
        except OSError as exc:
            return h.name, f"{h.label()} is unreachable: {exc.strerror or exc}"
    with ThreadPoolExecutor(max_workers=min(len(hosts), 16) or 1) as pool:
        return {n: why for n, why in pool.map(one, hosts) if why}


def runner(base: Path, ledger: Ledger | None = None, output_format: str = "normal") -> Runner:
    """Probe jobs through each host's own client, in work dirs under `base`."""
    return lambda hosts, jobs: run_clients(base, ledger, hosts, jobs, timeout_s=60, output_format=output_format,
                                           logs=True)


def probe_job() -> str:
    return fio_engine.render_job({"ioengine": "null", "size": 1 << 20, "bs": 4096, "rw": "read",
                                  "time_based": True, "runtime": "200ms", "log_unix_epoch": 1,
                                  "log_avg_msec": PROBE_INTERVAL_MS, "write_iops_log": LOG_PREFIX},
                                 [("probe", {})])


def probe(run: Runner, hosts: list[FleetHost]) -> dict[str, HostFacts]:
    """fio's version etc. from one probe of every host; the skew of hosts on another clock from
    skew.PROBES probes each (all hosts at once, round after round)."""
    job = probe_job()
    first = run(hosts, {h.name: job for h in hosts})
    facts: dict[str, HostFacts] = {}
    for h in hosts:
        r = first.hosts[h.name]
        m = _PROBE_LINE.search(r.text)
        if m is None:
            bad = re.search(r"client/server version mismatch[^\n]*|bad server cmd version \d+", r.text)
            # the client's reasons already name the host
            why = f"{h.label()}: {bad.group(0)}" if bad else (r.why or f"{h.label()}: no answer to fio's probe")
            facts[h.name] = HostFacts(h.name, None, None, None, None, skews.Skew(None, "not probed"), problem=why)
            continue
        facts[h.name] = HostFacts(h.name, m["fio"], m["os"], m["arch"], m["hostname"],
                                  skews.same_clock() if h.local else skews.Skew(None, "measuring"))
    remote = [h for h in hosts if not h.local and facts[h.name].problem is None]
    measured = measure_skew(run, remote, {h.name: first.hosts[h.name].log_bound_ms for h in remote})
    for name, s in measured.items():
        f = facts[name]
        facts[name] = HostFacts(f.name, f.fio, f.os, f.arch, f.hostname, s)
    return facts


def measure_skew(run: Runner, hosts: list[FleetHost],
                 first: dict[str, float | None] | None = None) -> dict[str, skews.Skew]:
    """skew.PROBES lower bounds per host on another clock (`first`: bounds already in hand)."""
    if not hosts:
        return {}
    bounds: dict[str, list[float | None]] = {h.name: [] for h in hosts}
    if first:
        for name, b in first.items():
            bounds[name].append(b)
    job = probe_job()
    while min(len(b) for b in bounds.values()) < skews.PROBES:
        todo = [h for h in hosts if len(bounds[h.name]) < skews.PROBES]
        got = run(todo, {h.name: job for h in todo})
        for h in todo:
            bounds[h.name].append(got.hosts[h.name].log_bound_ms)
    return {n: skews.from_bounds(b) for n, b in bounds.items()}


def check(run: Runner, hosts: list[FleetHost]) -> dict[str, HostFacts]:
    """All checks before load; RefusedError naming every host that fails one."""
    gone = unreachable(hosts)
    if gone:
        raise RefusedError("fleet hosts not reachable (is `fio --server` running there, or "
                           "`iolab fleet serve`?):\n  " + "\n  ".join(gone[n] for n in sorted(gone)))
    facts = probe(run, hosts)
    problems = [f.problem for f in facts.values() if f.problem]
    if problems:
        raise RefusedError("fleet hosts did not answer fio's probe:\n  " + "\n  ".join(p for p in problems if p))
    versions = {f.fio for f in facts.values()}
    mine = fio_engine.fio_version()
    if len(versions) > 1 or (mine and versions != {mine}):
        lines = [f"{h.label()}: {facts[h.name].fio}" for h in hosts] + [f"this machine (fio --client): {mine}"]
        raise RefusedError("fio versions differ across the fleet (fio's client/server protocol needs the same "
                           "fio on every side):\n  " + "\n  ".join(lines))
    return facts
