"""A fleet: the same fio job on many hosts at once, through fio's own client/server mode.

Each host runs `fio --server` (`iolab fleet serve`, docs/fleet.md); iolab runs one
`fio --client` per host here, all released at one instant, each as an unprivileged user in
its own work directory, each with its own deadline (fleet/client.py). Before any load
(preflight): every host's device or file passes the data-safety guard (fleet/guard.py),
every host is reachable and runs the same fio as this machine, and the clock skew of each
host on another clock is measured (fleet/checks.py, fleet/skew.py); the preflight says so
before it connects, also for --dry-run. A trial's metrics are the aggregate over the window
in which every host ran (fleet/aggregate.py) plus each host's own (`host:<name>:<metric>`);
a host that fails is that host's failure, recorded with its reason, and the aggregate says
how many hosts it covers (`fleet_hosts_ok`).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from iolab.cgroups.executor import HostExecutor
from iolab.core import paths
from iolab.core.errors import RefusedError, TrialFailed
from iolab.core.resources import Ledger, Resource
from iolab.fio import engine as fio_engine
from iolab.fleet import checks, guard
from iolab.fleet import skew as skews
from iolab.fleet.accounts import CLIENT_USER
from iolab.fleet.aggregate import aggregate, host_starts
from iolab.fleet.client import LOG_PREFIX, run_clients
from iolab.fleet.hosts import FleetHost, unique
from iolab.fleet.metrics import host_metric
from iolab.targets.base import FleetRun, Placement, Target, TargetOffer, TargetParams
from iolab.targets.offer import Storage

MAX_HOSTS = 256


class FleetParams(TargetParams):
    kind: Literal["fleet"] = "fleet"
    hosts: list[FleetHost] = Field(min_length=1, max_length=MAX_HOSTS)
    log_interval_ms: int = Field(0, ge=0, le=10_000, description="rate log interval; 0: from the job's runtime")
    clock_skew_every_s: float = Field(skews.REMEASURE_S, ge=1, le=86_400, allow_inf_nan=False,
                                      description="measure the clock skew of hosts on another clock again after "
                                                  "this long (before the next trial)")

    @field_validator("hosts")
    @classmethod
    def _unique(cls, v: list[FleetHost]) -> list[FleetHost]:
        return unique(v)


class FleetTarget(Target):
    kind: ClassVar[str] = "fleet"
    Params: ClassVar[type[TargetParams]] = FleetParams
    params: FleetParams

    def __init__(self, params: TargetParams, ledger: Ledger):
        super().__init__(params, ledger)
        self.executor: HostExecutor | None = None
        self.facts: dict[str, checks.HostFacts] = {}
        self.skews: dict[str, skews.Skew] = {}
        self.absent: list[FleetHost] = []    # local hosts whose file iolab creates (and removes)
        self.made: list[Resource] = []

    @classmethod
    def offer(cls, params: TargetParams) -> TargetOffer:
        """fio's own jobs on every host, each on that host's device or file; nothing written here."""
        assert isinstance(params, FleetParams)
        storage: set[Storage] = {"block_device" if h.device else "file" for h in params.hosts}
        return TargetOffer(kind=cls.kind, settings=f"{len(params.hosts)} host(s)", where="fleet",
                           storage=frozenset(storage), apps=frozenset({"fio"}))

    def describe(self) -> list[str]:
        hosts = self.params.hosts
        lines = [f"fleet of {len(hosts)} host(s), one fio --client per host run here as the unprivileged user "
                 f"{CLIENT_USER} (each in a work directory of its own, confined: it can write only that "
                 "directory and sees no home, /tmp, /var/tmp, /var/lib or iolab data); before any load (also "
                 "for --dry-run) iolab connects to every host: reachable, same fio, clock skew (0.2 s ioengine=null "
                 "probe jobs)"]
        for h in hosts:
            if h.device:
                what = (f"OVERWRITES the block device {h.device} (refused if it holds data, or if the host is "
                        f"another machine, unless --destroy-data {h.name}:{h.device})")
            else:
                what = (f"writes the file {h.filename} (refused if it exists, unless --destroy-data "
                        f"{h.name}:{h.filename}; " + ("removed afterwards)" if h.local else
                                                     "examined by the host's own fio server first; left there)"))
            lines.append(f"host {h.label()}: {what}")
        return lines

    def preflight(self) -> None:
        hosts = list(self.params.hosts)
        refusals, remote_files = [], []
        for h in hosts:
            try:
                if guard.check_host(h):
                    remote_files.append(h)
            except RefusedError as exc:
                refusals.append(str(exc))
        if refusals:
            raise RefusedError("\n".join(refusals))
        print(f"fleet: connecting to {len(hosts)} host(s) to check them before any load: "
              + ", ".join(f"{h.name} {h.address if h.is_unix else f'{h.address}:{h.port}'}" for h in hosts),
              file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix="iolab-fleet-probe-") as tmp:
            if remote_files and not checks.unreachable(remote_files):  # (unreachable: check() says so)
                refusals = guard.check_remote(checks.runner(Path(tmp), output_format="json"), remote_files)
                if refusals:
                    raise RefusedError("\n".join(refusals))
            self.facts = checks.check(checks.runner(Path(tmp)), hosts)
        self.skews = {n: f.skew for n, f in self.facts.items()}
        self.absent = [h for h in hosts if h.local and h.filename and not guard.allowed(h)]

    def setup(self) -> Placement:
        if not self.facts:
            self.preflight()
        for h in self.absent:  # the file iolab's job creates on a host sharing this machine: removed after
            guard.check_host(h)  # still absent (not made since the preflight by someone else)
            with self.ledger.creating("file", h.path) as res:
                pass
            self.made.append(res)
        self.executor = HostExecutor(paths.scratch_dir(), self.ledger)
        known = [s.ms for s in self.skews.values() if s.ms is not None]
        manifest: dict[str, Any] = {
            "target": "fleet",
            "client_user": CLIENT_USER,
            "hosts": {h.name: {"address": h.address, "port": None if h.is_unix else h.port, "device": h.device,
                               "filename": h.filename, "same_clock": h.local, **self.facts[h.name].manifest()}
                      for h in self.params.hosts if h.name in self.facts},
            "clock_skew_spread_ms": max(known) - min(known) if known else None,
        }
        return Placement(executor=self.executor, path=None, manifest=manifest, fio_fleet=_Fleet(self))

    def teardown(self) -> None:
        if self.executor:
            self.executor.close()
            self.executor = None
        while self.made:
            self.ledger.release(self.made.pop())


class _Fleet:
    """The FioFleet capability of a prepared fleet (targets/base.py)."""

    def __init__(self, target: FleetTarget):
        self.target = target

    def _interval_ms(self, job: str) -> int:
        if self.target.params.log_interval_ms:
            return self.target.params.log_interval_ms
        runtime = next((ln.split("=", 1)[1] for ln in job.splitlines() if ln.startswith("runtime=")), None)
        seconds = float(runtime.rstrip("s")) if runtime else 10.0
        return int(min(1000, max(50, seconds * 1000 / 20)))

    def _remeasure(self, hosts: list[FleetHost]) -> None:
        """Hosts on another clock whose skew is older than skew.REMEASURE_S (or proven stale by the
        last trial) are probed again, before this trial's load."""
        t = self.target
        stale = [h for h in hosts if h.name in t.skews and t.skews[h.name].stale(t.params.clock_skew_every_s)]
        if stale and t.executor is not None:
            t.skews.update(checks.measure_skew(checks.runner(t.executor.workdir, t.ledger), stale))

    def run_fio(self, render: Callable[[Placement], str], timeout_s: float,
                prefill_size: int | None) -> FleetRun:
        t = self.target
        assert t.executor is not None, "setup() first"
        hosts = list(t.params.hosts)
        base = Placement(executor=t.executor)
        failed: dict[str, str] = {}
        if prefill_size:
            files = [h for h in hosts if h.filename]
            if files:
                jobs = {h.name: fio_engine.render_job(
                    {"filename": h.filename, "size": prefill_size, "bs": 1 << 20, "rw": "write",
                     "ioengine": "psync", "direct": False, "end_fsync": True, "fallocate": "none"},
                    [("prefill", {})]) for h in files}
                pre = run_clients(t.executor.workdir, t.ledger, files, jobs, timeout_s)
                failed.update({n: f"prefill: {why}" for n, why in pre.failed.items()})
        live = [h for h in hosts if h.name not in failed]
        self._remeasure(live)
        jobs = {}
        interval = 1000
        for h in live:
            job = render(replace(base, path=h.path, is_block_device=h.device is not None))
            interval = self._interval_ms(job)
            extra = fio_engine.render_job({"log_avg_msec": interval, "log_unix_epoch": 1,
                                           "write_iops_log": LOG_PREFIX, "write_bw_log": LOG_PREFIX,
                                           "write_hist_log": LOG_PREFIX, "log_hist_msec": interval}, [])
            jobs[h.name] = job.replace("[global]\n", extra, 1)
        run = None
        if live:
            run = run_clients(t.executor.workdir, t.ledger, live, jobs, timeout_s, logs=True,
                              skews={n: s.ms or 0.0 for n, s in t.skews.items()})
            failed.update(run.failed)
        ok = run.ok if run else []
        if not ok:
            raise TrialFailed("every fleet host failed: " + "; ".join(f"{n}: {w}" for n, w in failed.items()))
        assert run is not None
        placed = skews.for_trial({d.name: t.skews[d.name] for d in ok if d.name in t.skews},
                                 {d.name: run.hosts[d.name].log_bound_ms for d in ok}, interval)
        for done in ok:
            done.skew_ms = placed.used.get(done.name, 0.0)
        measured = {d.name: t.skews[d.name].manifest() for d in ok if d.name in t.skews}
        for name in placed.remeasure:  # proven stale: probed again before the next trial
            t.skews[name] = replace(t.skews[name], measured_at=0.0)
        metrics, flags = aggregate(ok, interval)
        flags += placed.flags
        for done in ok:
            for k, v in fio_engine.job_metrics(done.stats).items():
                metrics[host_metric(done.name, k)] = v
        for name, offset in host_starts(ok, interval).items():
            metrics[host_metric(name, "start_offset_ms")] = offset
        metrics["fleet_hosts"] = float(len(hosts))
        metrics["fleet_hosts_ok"] = float(len(ok))
        if failed:
            flags.append(f"fleet_partial: the aggregate covers {len(ok)} of {len(hosts)} hosts; failed: "
                         + "; ".join(f"{n}: {w}" for n, w in sorted(failed.items())))
        job_text = "\n".join(f"# host {n}\n{j}" for n, j in jobs.items())
        facts: dict[str, Any] = {
            "fleet_failed_hosts": failed, "fleet_log_interval_ms": interval,
            "fleet_clock_skew_ms": placed.used,
            "fleet_clock_skew": measured,
            "fleet_clock_skew_log_bound_ms": {d.name: run.hosts[d.name].log_bound_ms for d in ok},
        }
        said = {n: r.said for n, r in run.hosts.items() if r.said}
        if said:
            facts["fleet_host_messages"] = said
        return FleetRun(metrics, run.raw, job_text, flags, facts)
