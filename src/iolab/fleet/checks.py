"""Checks before load: every host reachable, the same fio everywhere, clocks compared.

Reachability is a plain connect (TCP or unix socket) with a short timeout, so an unreachable
host is named at once instead of after fio's own retries. Each host then runs a tiny probe
job (ioengine=null) through its server: fio's probe reply names the server's fio version,
OS, architecture and host name, and the job's log, timestamped on the host's clock
(log_unix_epoch), gives the clock skew: the host's clock at the job's last sample minus
this machine's clock when the result came back. That is low by the result's delivery time
(tens of ms here; fio's job start after the request takes over a second, so the start is no
use), a bias hosts on similar networks share, so the skew *between* hosts is what counts.
"""

from __future__ import annotations

import re
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from iolab.core.errors import RefusedError
from iolab.core.exec import Executor
from iolab.fleet.aggregate import parse_log
from iolab.fleet.client import RESULT_FILE, run_clients
from iolab.fleet.hosts import FleetHost
from iolab.workloads import fio_engine

CONNECT_TIMEOUT_S = 3.0
PROBE_INTERVAL_MS = 20
PROBE_TRIES = 3
_PROBE_LINE = re.compile(r"hostname=(?P<hostname>[^,]*), be=\d+, (?P<bits>\d+)-bit, os=(?P<os>[^,]*), "
                         r"arch=(?P<arch>[^,]*), fio=(?P<fio>[^,\s]*)")


@dataclass(frozen=True)
class HostFacts:
    name: str
    fio: str | None
    os: str | None
    arch: str | None
    hostname: str | None
    skew_ms: float | None      # host clock minus this machine's (low by the result's delivery time)
    problem: str | None = None

    def manifest(self) -> dict[str, object]:
        return {"fio": self.fio, "os": self.os, "arch": self.arch, "hostname": self.hostname,
                "kernel": "not reported by fio's server", "clock_skew_ms": self.skew_ms}


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


def probe(executor: Executor, host: FleetHost, log_dir: Path) -> HostFacts:
    """fio's version etc. from its probe reply, and the clock skew from a 0.2 s null job.

    A probe whose rate log came back without a sample (seen once in ~900 runs on a machine
    with every core busy) is run again, up to PROBE_TRIES times: an unknown skew would leave
    the host's samples unaligned in the common window. Still none: skew None (the manifest
    says so; windowing takes 0)."""
    facts = _probe_once(executor, host, log_dir)
    for _ in range(PROBE_TRIES - 1):
        if facts.problem or facts.skew_ms is not None:
            break
        facts = _probe_once(executor, host, log_dir)
    return facts


def _probe_once(executor: Executor, host: FleetHost, log_dir: Path) -> HostFacts:
    prefix = str(log_dir / f"probe-{host.name}")
    job = fio_engine.render_job({"ioengine": "null", "size": 1 << 20, "bs": 4096, "rw": "read",
                                 "time_based": True, "runtime": "200ms", "log_unix_epoch": 1,
                                 "log_avg_msec": PROBE_INTERVAL_MS, "write_iops_log": prefix}, [("probe", {})])
    for old in log_dir.glob(f"probe-{host.name}_iops.*"):
        old.unlink()
    run = run_clients(executor, [host], {host.name: job}, timeout_s=30, output_format="normal")
    t_after = time.time() * 1000
    text = run.result.collected.get(RESULT_FILE, "") + "\n" + run.result.stdout + "\n" + run.result.stderr
    m = _PROBE_LINE.search(text)
    if m is None:
        bad = re.search(r"bad server cmd version \d+|[^\n]*version[^\n]*", text)
        why = bad.group(0).strip() if bad else (text.strip().splitlines() or ["no answer"])[-1]
        return HostFacts(host.name, None, None, None, None, None, problem=f"{host.label()}: {why}")
    samples = [s for p in sorted(log_dir.glob(f"probe-{host.name}_iops.*")) for s in parse_log(p.read_text())]
    skew = max(s.t_ms for s in samples) - t_after if samples else None
    return HostFacts(host.name, m["fio"], m["os"], m["arch"], m["hostname"], skew)


def check(executor: Executor, hosts: list[FleetHost], log_dir: Path) -> dict[str, HostFacts]:
    """All checks before load; RefusedError naming every host that fails one."""
    gone = unreachable(hosts)
    if gone:
        raise RefusedError("fleet hosts not reachable (is `fio --server` running there, or "
                           "`iolab fleet serve`?):\n  " + "\n  ".join(gone[n] for n in sorted(gone)))
    facts = {h.name: probe(executor, h, log_dir) for h in hosts}
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
