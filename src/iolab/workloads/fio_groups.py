"""Workload `fio-groups`: N fio processes, one per weighted cgroup, released together.

Per trial: create N groups whose weights cycle through the pattern and are shuffled (so a
weight is never tied to creation or start order), start one fio per group placed in its
group before exec, hold them all at a gate and release them at once (staggered starts
bias ratios toward 1, docs/cgroups.md), sample the kernel's per-group counters through
the run, cut the warm-up by steady-state detection, and compute sharing metrics from the
kernel counters (the ground truth), checked against fio's own totals. Optionally a real
application (RocksDB db_bench) runs in its own weighted group, alone or beside the groups.
"""

from __future__ import annotations

import math
import os
import random
import select
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from iolab.cgroups import fs as cgfs
from iolab.cgroups.base import Group
from iolab.cgroups.counters import IoCounters
from iolab.cgroups.sampler import Sampler, Series
from iolab.core.errors import TrialFailed
from iolab.core.exec import ExecRequest, ExecResult, Running
from iolab.core.units import parse_duration, parse_size
from iolab.targets.base import Placement
from iolab.targets.cgroup_set import create_groups, remove_groups, session_of
from iolab.workloads import fio_engine
from iolab.workloads.base import Workload, WorkloadParams, WorkloadResult

CLASSES = (100, 200, 400, 800)
STEADY_DRIFT = 0.10  # a class share may drift by at most 10 % of itself over the window
CPU_BOUND = 0.90  # machine CPU busy fraction (of all cores) above which the generator cannot keep up
TENANT_GROUP = "tenant"
GATE_SCRIPT = 'printf . > "$1"; shift; read _ < "$0"; exec "$@"'


class FioGroupsParams(WorkloadParams):
    kind: Literal["fio-groups"] = "fio-groups"
    groups: int = Field(4, ge=0, le=1024, description="N weighted groups, one fio process each (0: tenant alone)")
    weights: list[int] = Field(default_factory=lambda: list(CLASSES), description="pattern, cycled to N")
    shuffle: bool = Field(True, description="shuffle the weight assignment per trial (recorded)")
    rw: Literal["randread", "read", "rw", "randrw"] = "randread"
    bs: int = 4096
    iodepth: int = Field(32, ge=1, le=4096)
    ioengine: Literal["libaio", "io_uring"] = "libaio"
    direct: bool = True
    rwmixread: int = Field(50, ge=0, le=100)
    runtime: float = Field(10.0, gt=0, le=86400, description="seconds each fio runs")
    warmup: float = Field(1.0, ge=0, description="at least this much is cut after all groups run")
    sample_interval: float = Field(0.5, gt=0.05, le=10)
    start_allowance: float = Field(0.08, ge=0, le=5, description="seconds per group added to fio's runtime: "
                                   "N processes start slowly on few CPUs, the window stays ~runtime")
    tenant: Literal["off", "alone", "beside"] = Field("off", description="db_bench in its own group")
    tenant_weight: int = Field(400, ge=1, le=10000)

    @field_validator("bs", mode="before")
    @classmethod
    def _size(cls, v: Any) -> int:
        return parse_size(v)

    @field_validator("runtime", "warmup", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> Any:
        return parse_duration(v)

    @model_validator(mode="after")
    def _consistent(self) -> "FioGroupsParams":
        if not self.weights or any(w < 1 or w > 10000 for w in self.weights):
            raise ValueError(f"weights must be 1..10000, got {self.weights}")
        if self.groups == 0 and self.tenant != "alone":
            raise ValueError("groups = 0 only makes sense with tenant = \"alone\"")
        if self.tenant == "alone" and self.groups:
            raise ValueError("tenant = \"alone\" runs without groups: set groups = 0")
        if self.bs < 512 or self.bs % 512:
            raise ValueError(f"bs must be a multiple of 512, got {self.bs}")
        if self.warmup >= self.runtime:
            raise ValueError(f"warmup ({self.warmup} s) must be shorter than runtime ({self.runtime} s)")
        return self


def assign_weights(pattern: Sequence[int], n: int, seed: int | None, shuffle: bool = True) -> list[int]:
    """The pattern cycled to n groups, shuffled with `seed` (so the assignment can be rerun)."""
    weights = [pattern[i % len(pattern)] for i in range(n)]
    if shuffle:
        random.Random(seed).shuffle(weights)
    return weights


# -- the gate: every process joins its group, reports ready, then all exec fio at once -----
class Gate:
    """Two FIFOs: each process writes one byte to `ready`, then blocks reading a line of `go`.

    The parent holds both open read-write, so no open() blocks; writing N newlines to
    `go` releases all N at once (the shell's `read` consumes exactly one line each).
    No polling, so 128 waiting processes cost no CPU."""

    def __init__(self, directory: Path, tag: str):
        self.go = directory / f"gate-{tag}.go"
        self.ready = directory / f"gate-{tag}.ready"
        for p in (self.go, self.ready):
            p.unlink(missing_ok=True)
            os.mkfifo(p, 0o600)
        self.go_fd = os.open(self.go, os.O_RDWR)
        self.ready_fd = os.open(self.ready, os.O_RDWR | os.O_NONBLOCK)

    def argv(self, cmd: list[str]) -> list[str]:
        return ["sh", "-c", GATE_SCRIPT, str(self.go), str(self.ready), *cmd]

    def wait_ready(self, n: int, running: list[Running], timeout_s: float) -> None:
        got, deadline = 0, time.monotonic() + timeout_s
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TrialFailed(f"only {got} of {n} load processes reached the start gate in {timeout_s:.0f} s")
            r, _, _ = select.select([self.ready_fd], [], [], min(left, 0.5))
            if r:
                got += len(os.read(self.ready_fd, 4096))

    def release(self, n: int) -> float:
        os.write(self.go_fd, b"\n" * n)
        return time.monotonic()

    def close(self) -> None:
        for fd in (self.go_fd, self.ready_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        for p in (self.go, self.ready):
            p.unlink(missing_ok=True)


# -- CPU accounting beside the counters ---------------------------------------------------
def machine_times() -> tuple[int, int]:
    """(total, idle+iowait) jiffies from /proc/stat."""
    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:]]
    return sum(vals), vals[3] + (vals[4] if len(vals) > 4 else 0)


def pid_ticks(pid: int) -> int:
    """utime+stime+cutime+cstime of a process: its children's time moves here when reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return 0
    fields = text.rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15])


@dataclass
class CpuSample:
    machine_total: int
    machine_idle: int
    generator: dict[int, int] = field(default_factory=dict)  # pid -> ticks


class CountingReader:
    """The sampler's reader: group counters, plus machine and generator CPU at the same instant."""

    def __init__(self, session: Any, groups: list[Group]):
        self.session = session
        self.groups = groups
        self.cpu: list[CpuSample] = []

    def __call__(self) -> dict[str, IoCounters]:
        counters = {g.name: self.session.backend.read_counters(g) for g in self.groups}
        total, idle = machine_times()
        gen = {pid: pid_ticks(pid) for g in self.groups for pid in cgfs.pids(g.path)}
        self.cpu.append(CpuSample(total, idle, gen))
        return counters


def cpu_between(a: CpuSample, b: CpuSample, dt: float) -> tuple[float, float]:
    """(machine busy 0..1, generator busy 0..1 of the machine) between two samples."""
    total = max(b.machine_total - a.machine_total, 1)
    machine = 1.0 - (b.machine_idle - a.machine_idle) / total
    hz = os.sysconf("SC_CLK_TCK")
    gen_ticks = sum(t - a.generator.get(pid, 0) for pid, t in b.generator.items())
    cores = os.cpu_count() or 1
    gen = gen_ticks / hz / max(dt, 1e-9) / cores
    return machine, min(max(gen, 0.0), 1.0)


# -- analysis of one trial (pure) -----------------------------------------------------------
def active_window(series: Series, names: Sequence[str]) -> tuple[int, int]:
    """Sample indexes [a, b] during which every group was running (first I/O done, last not yet)."""
    first, last = [], []
    for g in names:
        ios = [c[g].ios for c in series.counters]
        changed = [k for k in range(1, len(ios)) if ios[k] > ios[k - 1]]
        if not changed:
            raise TrialFailed(f"group {g} did no I/O at all on the device (not charged to its cgroup?)")
        first.append(changed[0])
        last.append(changed[-1] - 1)
    return max(first), min(last)


def class_of(weights: dict[str, int]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for g, w in weights.items():
        out.setdefault(w, []).append(g)
    return out


def class_shares(series: Series, weights: dict[str, int], i: int, j: int) -> list[dict[int, float]]:
    """Per interval k in (i, j]: each weight class's share of the groups' completed I/Os."""
    classes = class_of(weights)
    out = []
    for k in range(i + 1, j + 1):
        d = series.delta(k - 1, k)
        tot = sum(d[g].ios for g in weights) or 1
        out.append({w: sum(d[g].ios for g in gs) / tot for w, gs in classes.items()})
    return out


def drift(series: Series, weights: dict[str, int], i: int, j: int) -> float:
    """Largest least-squares change of a class share over [i, j], relative to that share."""
    shares = class_shares(series, weights, i, j)
    ts = [(series.t[k] + series.t[k - 1]) / 2 for k in range(i + 1, j + 1)]
    if len(ts) < 3:
        return math.inf
    tm = sum(ts) / len(ts)
    sxx = sum((t - tm) ** 2 for t in ts) or 1e-12
    worst = 0.0
    for w in shares[0]:
        ys = [s[w] for s in shares]
        ym = sum(ys) / len(ys)
        slope = sum((t - tm) * (y - ym) for t, y in zip(ts, ys)) / sxx
        if ym > 0:
            worst = max(worst, abs(slope) * (ts[-1] - ts[0]) / ym)
    return worst


def steady_window(series: Series, weights: dict[str, int], warmup_s: float) -> tuple[int, int, float, bool]:
    """(i, j, drift, steady): the earliest start, at least `warmup_s` after all groups run and at
    most halfway through, from which no class share drifts by more than STEADY_DRIFT."""
    a, b = active_window(series, list(weights))
    if b - a < 4:
        raise TrialFailed(f"the groups ran together for only {max(series.t[b] - series.t[a], 0):.1f} s; "
                          "raise runtime (many fio processes start slowly on few CPUs)")
    start = next((k for k in range(a, b) if series.t[k] - series.t[a] >= warmup_s), a)
    best = (start, math.inf)
    for k in range(start, a + (b - a) // 2 + 1):
        d = drift(series, weights, k, b)
        if d <= STEADY_DRIFT:
            return k, b, d, True
        if d < best[1]:
            best = (k, d)
    return best[0], b, best[1], False


def sharing_metrics(ios: dict[str, float], weights: dict[str, int], seconds: float) -> dict[str, float]:
    """Weight adherence of one window: per-class IOPS and ratios, worst log2 share error,
    minimum fraction of entitlement, Jain's index on weight-normalised throughput."""
    total = sum(ios[g] for g in weights)
    wsum = sum(weights.values())
    m: dict[str, float] = {"aggregate_iops": total / seconds}
    norm = {g: (ios[g] / total) / (w / wsum) if total else 0.0 for g, w in weights.items()}
    m["max_abs_log2_error"] = max(abs(math.log2(x)) if x > 0 else 10.0 for x in norm.values())
    m["min_share"] = min(norm.values())
    sq = sum(x * x for x in norm.values())
    m["jain"] = sum(norm.values()) ** 2 / (len(norm) * sq) if sq else 0.0
    classes = class_of(weights)
    per_group = {w: sum(ios[g] for g in gs) / len(gs) / seconds for w, gs in classes.items()}
    for w, v in per_group.items():
        m[f"class_iops_{w}"] = v
    base = min(classes)
    for w, v in per_group.items():
        m[f"ratio_{w}"] = v / per_group[base] if per_group[base] else math.inf
    cls_err = [abs(math.log2((sum(ios[g] for g in gs) / total) / (w * len(gs) / wsum)))
               for w, gs in classes.items() if total and sum(ios[g] for g in gs)]
    m["class_max_abs_log2_error"] = max(cls_err) if cls_err else 10.0
    m["min_group_ios"] = min(ios[g] for g in weights)
    return m


def share_series(series: Series, weights: dict[str, int], i: int, j: int, a: int, b: int) -> dict[str, Any]:
    """Compact per-class share over time (all intervals while all groups ran) for the report."""
    shares = class_shares(series, weights, a, b)
    return {"t": [round((series.t[k] + series.t[k - 1]) / 2, 2) for k in range(a + 1, b + 1)],
            "share": {str(w): [round(s[w], 4) for s in shares] for w in sorted(class_of(weights))},
            "ideal": {str(w): round(w * len(gs) / sum(weights.values()), 4)
                      for w, gs in sorted(class_of(weights).items())},
            "window": [round(series.t[i], 2), round(series.t[j], 2)]}


# -- the workload ----------------------------------------------------------------------------
class FioGroupsWorkload(Workload):
    kind: ClassVar[str] = "fio-groups"
    Params: ClassVar[type[WorkloadParams]] = FioGroupsParams
    main_metric: ClassVar[str] = "ratio_800"
    metrics: ClassVar[tuple[str, ...]] = (
        "ratio_200", "ratio_400", "ratio_800", "max_abs_log2_error", "class_max_abs_log2_error", "min_share",
        "jain", "aggregate_iops", "generator_cpu_busy", "machine_cpu_busy", "kernel_vs_fio", "window_s")
    params: FioGroupsParams

    def __init__(self, params: WorkloadParams):
        super().__init__(params)
        # adaptive stopping watches the tenant's own rate when there are no groups to compare
        self.main_metric = "tenant_ops_s" if self.params.tenant == "alone" else "ratio_800"

    def estimate_seconds(self) -> float:
        p = self.params
        start = (0.05 + p.start_allowance) * p.groups + 1  # fork, join, gate, fio start-up
        tenant = p.runtime + 2 if p.tenant != "off" else 0
        return (p.runtime + start if p.groups else 0) + tenant + 1

    def job_text(self, filename: str, name: str, runtime: float) -> str:
        p = self.params
        glob: dict[str, Any] = {
            "filename": filename, "rw": p.rw, "bs": p.bs, "iodepth": p.iodepth, "ioengine": p.ioengine,
            "direct": p.direct, "time_based": True, "runtime": f"{runtime:g}s", "ramp_time": "0s",
            "randrepeat": False, "norandommap": p.rw.startswith("rand") or None,
            "rwmixread": p.rwmixread if p.rw in ("rw", "randrw") else None,
            "percentile_list": "50:95:99:99.9",
        }
        return fio_engine.render_job(glob, [(name, {})])

    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        if self.params.tenant != "off":
            from iolab.workloads import db_bench

            return db_bench.run_with_tenant(self, placement, timeout_s)
        out = run_groups(self, placement, timeout_s)
        return out.result


@dataclass
class GroupsOutcome:
    result: WorkloadResult
    weights: dict[str, int]
    series: Series | None = None
    shares: dict[str, Any] | None = None


def run_groups(wl: FioGroupsWorkload, placement: Placement, timeout_s: float, *,
               extra: dict[str, tuple[list[str], int]] | None = None,
               on_release: Any = None) -> GroupsOutcome:
    """One trial: groups, gated fio processes, sampling, metrics; groups always removed.

    `extra` adds processes that start at the same gate in their own group:
    {name: (argv, weight)}; `on_release(executor)` runs once everything is released
    (the tenant uses both). Their results are in outcome.result.raw["extra"]."""
    p = wl.params
    session = session_of(placement)
    seed = random.SystemRandom().randrange(1 << 31)
    tag = f"t{seed % 100000:05d}"
    weights_list = assign_weights(p.weights, p.groups, seed, p.shuffle)
    trial_info: dict[str, Any] = {"seed": seed, "shuffled": p.shuffle}
    placement.manifest["trial"] = trial_info  # this trial's assignment rides in the trial manifest
    placement.manifest.pop("share_series", None)
    t0 = time.monotonic()
    groups = create_groups(session, weights_list, tag)
    extra_groups: dict[str, Group] = {}
    trial_info["groups_create_s"] = time.monotonic() - t0
    executor = placement.executor
    workdir = Path(getattr(executor, "workdir", "/tmp"))
    gate = None
    running: dict[str, Running] = {}
    try:
        for name, (_argv, w) in (extra or {}).items():
            extra_groups[name] = session.backend.create_group(f"{tag}-{name}", w)
        weights = {g.name: g.weight or 0 for g in groups}
        trial_info["weights"] = weights
        trial_info["extra_weights"] = {n: g.weight for n, g in extra_groups.items()}
        filename = placement.path or ""
        fio_runtime = p.runtime + p.start_allowance * len(groups)
        gate = Gate(workdir, tag)
        jobs = {g.name: wl.job_text(filename, g.name.replace(f"{tag}-", ""), fio_runtime) for g in groups}
        for g in groups:
            running[g.name] = executor.spawn(_fio_request(gate, g.name, jobs[g.name], session, g, timeout_s))
        for name, (argv, _w) in (extra or {}).items():
            g = extra_groups[name]
            running[name] = executor.spawn(ExecRequest(argv=gate.argv(argv), timeout_s=timeout_s,
                                                       cgroup_procs=[session.backend.procs_file(g)]))
        gate.wait_ready(len(running), list(running.values()), timeout_s=30 + 0.2 * len(running))
        reader = CountingReader(session, groups + list(extra_groups.values()))
        sampler = Sampler(reader, interval_s=p.sample_interval)
        sampler.start()
        try:
            released = gate.release(len(running))
            if on_release:
                on_release(executor)
            results = {name: r.wait() for name, r in running.items()}
        finally:
            series = sampler.stop()
        trial_info["release_to_end_s"] = time.monotonic() - released
        running.clear()
        outcome = _metrics(wl, groups, weights, jobs, results, series, reader, extra_groups,
                           nr_requests(session), session.backend.scheduler == "bfq")
        placement.manifest["share_series"] = outcome.shares
        outcome.result.metrics["groups_create_s"] = trial_info["groups_create_s"]
        outcome.result.raw = {"fio": {g: _fio_json(results[g]) for g in weights}, "series": series.to_dict(),
                              "extra": {n: {"stdout": results[n].stdout[-20000:], "returncode": results[n].returncode,
                                            "wall_s": results[n].wall_s} for n in extra_groups},
                              "assignment": weights}
        return outcome
    finally:
        # Cleanup must never replace an exception in flight (Ctrl-C arrives as KeyboardInterrupt).
        unwinding = sys.exc_info()[0] is not None
        for r in running.values():
            _reap(r)
        if gate:
            gate.close()
        t1 = time.monotonic()
        errors = remove_groups(session, groups + list(extra_groups.values()))
        trial_info["groups_remove_s"] = time.monotonic() - t1
        if errors and not unwinding:
            raise TrialFailed("could not remove the trial's groups: " + "; ".join(errors))


def _reap(r: Running) -> None:
    """Kill and reap a load process; one already reaped (wait interrupted after wait4) is fine."""
    try:
        r.kill()
        r.wait()
    except OSError:
        pass


def _fio_request(gate: Gate, name: str, job: str, session: Any, group: Group, timeout_s: float) -> ExecRequest:
    job_file, out_file = f"{name}.fio", f"{name}.json"
    return ExecRequest(argv=gate.argv(["fio", "--output-format=json", f"--output={out_file}", job_file]),
                       timeout_s=timeout_s, files={job_file: job}, collect=[out_file],
                       cgroup_procs=[session.backend.procs_file(group)])


def _fio_json(res: ExecResult) -> dict[str, Any]:
    """fio's JSON for one group (its output file is named in collect)."""
    text = next(iter(res.collected.values()), "")
    fixed = ExecResult(res.argv, res.returncode, res.stdout, res.stderr, res.wall_s, res.cpu_user_s,
                       res.cpu_sys_s, res.timed_out, {fio_engine.RESULT_FILE: text})
    return fio_engine.parse_result(fixed)


def nr_requests(session: Any) -> int | None:
    """The queue's request (scheduler tag) limit, read at trial time."""
    try:
        return int((session.backend.dev.queue / "nr_requests").read_text())
    except (OSError, ValueError):
        return None


def _metrics(wl: FioGroupsWorkload, groups: list[Group], weights: dict[str, int], jobs: dict[str, str],
             results: dict[str, ExecResult], series: Series, reader: CountingReader,
             extra_groups: dict[str, Group], nr_req: int | None = None, bfq: bool = False) -> GroupsOutcome:
    p = wl.params
    fio = {g: fio_engine.job_metrics(_fio_json(results[g])["jobs"][0]) for g in weights}
    i, j, d, steady = steady_window(series, weights, p.warmup)
    a, b = active_window(series, list(weights))
    seconds = series.t[j] - series.t[i]
    window = series.delta(i, j)
    m = sharing_metrics({g: float(window[g].ios) for g in weights}, weights, seconds)
    machine, gen = cpu_between(reader.cpu[i], reader.cpu[j], seconds)
    whole = series.delta(0, -1)
    k_total = sum(whole[g].ios for g in weights)
    f_total = sum(fio[g].get("read_ios", 0) + fio[g].get("write_ios", 0) for g in weights)
    per_group = [abs(whole[g].ios / max(fio[g].get("read_ios", 0) + fio[g].get("write_ios", 0), 1) - 1)
                 for g in weights]
    cores = os.cpu_count() or 1
    lifetime = sum(r.cpu_user_s + r.cpu_sys_s for g, r in results.items() if g in weights)
    wall = max(r.wall_s for g, r in results.items() if g in weights)
    m.update({
        "groups": float(len(weights)), "window_s": seconds, "warmup_cut_s": series.t[i] - series.t[a],
        "start_spread_s": series.t[a] - series.t[0], "steady_drift": d,
        "generator_cpu_busy": gen, "machine_cpu_busy": machine,
        "generator_cpu_busy_lifetime": lifetime / max(wall, 1e-9) / cores,
        "kernel_vs_fio": k_total / f_total if f_total else math.nan,
        "kernel_vs_fio_worst_group": max(per_group),
        "fio_iops_total": sum(fio[g]["iops"] for g in weights),
        "read_bytes": sum(fio[g].get("read_bytes", 0.0) for g in weights),
        "write_bytes": sum(fio[g].get("write_bytes", 0.0) for g in weights),
        "iodepth_total": float(p.iodepth * len(weights)),
    })
    for side in ("read", "write"):
        p99 = [fio[g][f"{side}_clat_p99_us"] for g in weights if f"{side}_clat_p99_us" in fio[g]]
        if p99:
            m[f"{side}_clat_p99_us_worst_group"] = max(p99)
    for name, g in extra_groups.items():
        m[f"{name}_iops_kernel"] = window[g.name].ios / seconds if g.name in window else 0.0
    if nr_req:
        m["nr_requests"] = float(nr_req)
        m["tag_limit_min"] = float(min(tag_limits(weights, nr_req).values()))
    flags = _flags(m, steady, cores) + _tag_flags(m, weights, p.iodepth, nr_req, bfq)
    return GroupsOutcome(WorkloadResult(metrics=m, job_text=next(iter(jobs.values())), flags=flags),
                         weights, series, share_series(series, weights, i, j, a, b))


def _flags(m: dict[str, float], steady: bool, cores: int) -> list[str]:
    flags = []
    if m["machine_cpu_busy"] >= CPU_BOUND and m["generator_cpu_busy"] >= 0.5 * m["machine_cpu_busy"]:
        flags.append(f"generator_cpu_bound: the CPUs were {m['machine_cpu_busy']:.0%} busy in the window, "
                     f"fio {m['generator_cpu_busy']:.0%} of {cores} cores: the CPU scheduler, not the I/O "
                     "controller, may decide who submits")
    elif m["machine_cpu_busy"] >= CPU_BOUND:
        flags.append(f"cpu_saturated: the CPUs were {m['machine_cpu_busy']:.0%} busy in the window but fio used "
                     f"only {m['generator_cpu_busy']:.0%} of {cores} cores: other load (or the I/O path) took the CPUs")
    if not steady:
        flags.append(f"not_steady: class shares still drifted {m['steady_drift']:.0%} over the window")
    if abs(m["kernel_vs_fio"] - 1) > 0.05 or m["kernel_vs_fio_worst_group"] > 0.05:
        flags.append(f"kernel_fio_disagree: kernel counted {m['kernel_vs_fio']:.3f}x fio's I/Os "
                     f"(worst group off by {m['kernel_vs_fio_worst_group']:.1%})")
    if m["start_spread_s"] > 2:
        flags.append(f"slow_start: the {m['groups']:.0f} fio processes ran together only {m['start_spread_s']:.1f} s "
                     f"after release (generator CPU over its whole life: {m['generator_cpu_busy_lifetime']:.0%} of "
                     f"{cores} cores); the window starts after that")
    if m["min_group_ios"] < 100:
        flags.append(f"short_window: the smallest group completed only {m['min_group_ios']:.0f} I/Os in the window "
                     f"(counting noise ~{1 / math.sqrt(max(m['min_group_ios'], 1)):.0%})")
    return flags


def tag_limits(weights: dict[str, int], nr_req: int) -> dict[str, int]:
    """BFQ's per-group request limit under tag pressure (bfqq_request_over_limit, Linux >= 5.17):
    nr_requests x weight / sum of the active siblings' weights. A group holding that many
    requests gets its tag depth trimmed to 1."""
    wsum = sum(weights.values())
    return {g: max(int(round(nr_req * w / wsum)), 1) for g, w in weights.items()}


def _tag_flags(m: dict[str, float], weights: dict[str, int], iodepth: int, nr_req: int | None,
               bfq: bool) -> list[str]:
    """Flag tag pressure: all groups together want more requests than the queue has."""
    if not nr_req:
        return []
    flags = []
    if m["iodepth_total"] >= nr_req:
        flags.append(f"tag_pressure: iodepth x N = {m['iodepth_total']:.0f} >= nr_requests = {nr_req}: requests "
                     "wait for a scheduler tag before the scheduler sees them")
    limits = tag_limits(weights, nr_req)
    low = min(limits.values())
    if bfq and low <= iodepth and low < 16:
        trimmed = {w: limits[g] for g, w in sorted(weights.items(), key=lambda kv: kv[1]) if limits[g] <= iodepth}
        flags.append(f"tag_limited: BFQ limits each group to nr_requests x w / sum w requests and trims the tag "
                     f"depth of a group above it to 1; limits {trimmed} (weight: requests) are at or below iodepth "
                     f"{iodepth}, too few to stay backlogged through a service slot")
    return flags
