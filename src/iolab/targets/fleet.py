"""A fleet: the same fio job on many hosts at once, through fio's own client/server mode.

Each host runs `fio --server` (`iolab fleet serve`, docs/fleet.md); iolab runs one
`fio --client` here with each host's job rendered for that host's own device or file. Before
any load (preflight): every host's device passes the data-safety guard (fleet/guard.py),
every host is reachable and runs the same fio as this machine, and each host's clock skew
is measured (fleet/checks.py). A trial's metrics are the aggregate over the window in which
every host ran (fleet/aggregate.py) plus each host's own (`host:<name>:<metric>`); a host
that fails is that host's failure, recorded with its reason, and the aggregate says how
many hosts it covers (`fleet_hosts_ok`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from iolab.core import paths
from iolab.core.errors import RefusedError, TrialFailed
from iolab.core.exec import HostExecutor
from iolab.core.resources import Ledger
from iolab.fleet import checks, guard
from iolab.fleet.aggregate import aggregate, host_starts
from iolab.fleet.client import run_clients
from iolab.fleet.hosts import FleetHost, unique
from iolab.fleet.metrics import host_metric
from iolab.targets.base import FleetRun, Placement, Target, TargetOffer, TargetParams
from iolab.targets.offer import Storage
from iolab.workloads import fio_engine

MAX_HOSTS = 256


class FleetParams(TargetParams):
    kind: Literal["fleet"] = "fleet"
    hosts: list[FleetHost] = Field(min_length=1, max_length=MAX_HOSTS)
    log_interval_ms: int = Field(0, ge=0, le=10_000, description="rate log interval; 0: from the job's runtime")

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

    @classmethod
    def offer(cls, params: TargetParams) -> TargetOffer:
        """fio's own jobs on every host, each on that host's device or file; nothing written here."""
        assert isinstance(params, FleetParams)
        storage: set[Storage] = {"block_device" if h.device else "file" for h in params.hosts}
        return TargetOffer(kind=cls.kind, settings=f"{len(params.hosts)} host(s)", where="fleet",
                           storage=frozenset(storage), apps=frozenset({"fio"}))

    def describe(self) -> list[str]:
        lines = [f"fleet of {len(self.params.hosts)} host(s), driven by fio --client from here "
                 "(each checked before load: reachable, same fio, clock skew; a probe job with ioengine=null)"]
        for h in self.params.hosts:
            what = (f"OVERWRITES the block device {h.device} (refused if it holds data, unless "
                    f"--destroy-data {h.name}:{h.device})") if h.device else f"writes the file {h.filename}"
            lines.append(f"host {h.label()}: {what}")
        return lines

    def preflight(self) -> None:
        refusals = []
        for h in self.params.hosts:
            try:
                guard.check_host(h)
            except RefusedError as exc:
                refusals.append(str(exc))
        if refusals:
            raise RefusedError("\n".join(refusals))
        with tempfile.TemporaryDirectory(prefix="iolab-fleet-probe-") as tmp:
            probe_exec = HostExecutor(Path(tmp))
            try:
                self.facts = checks.check(probe_exec, list(self.params.hosts), Path(tmp))
            finally:
                probe_exec.close()

    def setup(self) -> Placement:
        if not self.facts:
            self.preflight()
        self.executor = HostExecutor(paths.scratch_dir(), self.ledger)
        (self.executor.workdir / "logs").mkdir()
        skews = [f.skew_ms for f in self.facts.values() if f.skew_ms is not None]
        manifest: dict[str, Any] = {
            "target": "fleet",
            "hosts": {h.name: {"address": h.address, "port": None if h.is_unix else h.port, "device": h.device,
                               "filename": h.filename, **self.facts[h.name].manifest()}
                      for h in self.params.hosts if h.name in self.facts},
            "clock_skew_spread_ms": max(skews) - min(skews) if skews else None,
        }
        return Placement(executor=self.executor, path=None, manifest=manifest, fio_fleet=_Fleet(self))

    def teardown(self) -> None:
        if self.executor:
            self.executor.close()
            self.executor = None


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
                pre = run_clients(t.executor, files, jobs, timeout_s)
                failed.update({n: f"prefill: {why}" for n, why in pre.failed.items()})
        live = [h for h in hosts if h.name not in failed]
        log_dir = t.executor.workdir / "logs"
        for old in log_dir.iterdir():
            old.unlink()
        jobs = {}
        interval = 1000
        for h in live:
            job = render(replace(base, path=h.path, is_block_device=h.device is not None))
            interval = self._interval_ms(job)
            extra = fio_engine.render_job({"log_avg_msec": interval, "log_unix_epoch": 1,
                                           "write_iops_log": str(log_dir / h.name),
                                           "write_bw_log": str(log_dir / h.name),
                                           "write_hist_log": str(log_dir / h.name), "log_hist_msec": interval},
                                          [])
            jobs[h.name] = job.replace("[global]\n", extra, 1)
        skews = {n: f.skew_ms or 0.0 for n, f in t.facts.items()}
        run = run_clients(t.executor, live, jobs, timeout_s, log_dir=log_dir, skews=skews) if live else None
        if run is not None:
            failed.update(run.failed)
        ok = run.ok if run else []
        if not ok:
            raise TrialFailed("every fleet host failed: " + "; ".join(f"{n}: {w}" for n, w in failed.items()))
        metrics, flags = aggregate(ok, interval)
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
        facts = {"fleet_failed_hosts": failed, "fleet_log_interval_ms": interval}
        return FleetRun(metrics, run.raw if run else None, job_text, flags, facts)
