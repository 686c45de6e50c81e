"""One fio-groups trial: groups, gated fio processes, sampling, metrics; groups always removed.

Per trial: create N groups whose weights cycle through the pattern and are shuffled (so a
weight is never tied to creation or start order), start one fio per group placed in its
group before exec, hold them all at the gate and release them at once, sample the
kernel's per-group counters through the run, cut the warm-up by steady-state detection,
and compute the sharing metrics from the kernel counters (the ground truth), checked
against fio's own totals. What the trial learnt about itself (seed, assignment, timings,
share over time) is its own manifest entry (WorkloadResult.manifest), never the target's.
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iolab.cgroups.base import Group
from iolab.cgroups.sampler import Sampler, Series
from iolab.core.errors import TrialFailed
from iolab.core.exec import ExecRequest, ExecResult, Running
from iolab.fio import engine as fio_engine
from iolab.targets.base import Placement
from iolab.workloads.base import WorkloadResult
from iolab.workloads.groups.cpu import CountingReader, cpu_between
from iolab.workloads.groups.flags import tag_flags, tag_limits, trial_flags
from iolab.workloads.groups.gate import Gate
from iolab.workloads.groups.params import FioGroupsParams, assign_weights
from iolab.workloads.groups.steady import (
    active_window,
    share_series,
    sharing_metrics,
    steady_window,
)

# Extra processes released at the same gate, each in a group of its own: {name: (argv, weight)}.
Extras = dict[str, tuple[list[str], int]]


@dataclass
class GroupsOutcome:
    result: WorkloadResult
    weights: dict[str, int]
    series: Series | None = None
    extra_results: dict[str, ExecResult] = field(default_factory=dict)  # each extra process's own result


def job_text(p: FioGroupsParams, filename: str, name: str, runtime: float) -> str:
    """The fio job one group runs."""
    glob: dict[str, Any] = {
        "filename": filename, "rw": p.rw, "bs": p.bs, "iodepth": p.iodepth, "ioengine": p.ioengine,
        "direct": p.direct, "time_based": True, "runtime": f"{runtime:g}s", "ramp_time": "0s",
        "randrepeat": False, "norandommap": p.rw.startswith("rand") or None,
        "rwmixread": p.rwmixread if p.rw in ("rw", "randrw") else None,
        "percentile_list": "50:95:99:99.9",
    }
    return fio_engine.render_job(glob, [(name, {})])


def run_groups(p: FioGroupsParams, placement: Placement, timeout_s: float, *,
               extra: Extras | None = None, extra_start_s: float = 0.0) -> GroupsOutcome:
    """One trial. `extra` adds processes that start at the same gate in their own group (the
    tenant); their results are outcome.extra_results (a tail in outcome.result.raw["extra"]), and
    the groups' window is cut to where the extras did I/O too (beside means beside). The trial's
    manifest entries: "trial" (seed, assignment, timings) and "share_series" (per-class share
    over time). `extra_start_s`: seconds an extra needs after release before its own timed run
    begins (a JVM's start), added to the groups' runtime so that run ends while they still run."""
    wg = placement.require_weighted_groups()
    trial_cgroup = placement.trial_cgroup
    if trial_cgroup is None:
        raise TrialFailed("fio-groups runs inside a trial (its CPU is read from the trial cgroup)")
    seed = random.SystemRandom().randrange(1 << 31)
    tag = f"t{seed % 100000:05d}"
    weights_list = assign_weights(p.weights, p.groups, seed, p.shuffle)
    trial_info: dict[str, Any] = {"seed": seed, "shuffled": p.shuffle}
    t0 = time.monotonic()
    groups = wg.create_groups(weights_list, tag)
    extra_groups: dict[str, Group] = {}
    trial_info["groups_create_s"] = time.monotonic() - t0
    executor = placement.executor
    workdir = Path(getattr(executor, "workdir", "/tmp"))
    gate = None
    running: dict[str, Running] = {}
    try:
        for name, (_argv, w) in (extra or {}).items():
            extra_groups[name] = wg.create_group(f"{tag}-{name}", w)
        weights = {g.name: g.weight or 0 for g in groups}
        trial_info["weights"] = weights
        trial_info["extra_weights"] = {n: g.weight for n, g in extra_groups.items()}
        filename = placement.path or ""
        fio_runtime = p.runtime + p.start_allowance * len(groups) + (extra_start_s if extra else 0.0)
        gate = Gate(workdir, tag)
        jobs = {g.name: job_text(p, filename, g.name.replace(f"{tag}-", ""), fio_runtime) for g in groups}
        for g in groups:
            running[g.name] = executor.spawn(_fio_request(gate, g.name, jobs[g.name], wg.procs_file(g), timeout_s))
        for name, (argv, _w) in (extra or {}).items():
            running[name] = executor.spawn(ExecRequest(argv=gate.argv(argv), timeout_s=timeout_s,
                                                       cgroup_procs=[wg.procs_file(extra_groups[name])]))
        gate.wait_ready(len(running), timeout_s=30 + 0.2 * len(running))
        reader = CountingReader(wg, groups + list(extra_groups.values()), trial_cgroup.cpu_seconds)
        sampler = Sampler(reader, interval_s=p.sample_interval)
        sampler.start()
        try:
            released = gate.release(len(running))
            results = {name: r.wait() for name, r in running.items()}
        finally:
            series = sampler.stop()
        trial_info["release_to_end_s"] = time.monotonic() - released
        running.clear()
        outcome = _metrics(p, weights, jobs, results, series, reader, extra_groups, wg.nr_requests(),
                           wg.scheduler == "bfq")
        outcome.extra_results = {n: results[n] for n in extra_groups}
        outcome.result.metrics["groups_create_s"] = trial_info["groups_create_s"]
        outcome.result.manifest["trial"] = trial_info  # groups_remove_s is added below, once removed
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
        errors = wg.remove_groups(groups + list(extra_groups.values()))
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


def _fio_request(gate: Gate, name: str, job: str, procs_file: str, timeout_s: float) -> ExecRequest:
    job_file, out_file = f"{name}.fio", f"{name}.json"
    return ExecRequest(argv=gate.argv(["fio", "--output-format=json", f"--output={out_file}", job_file]),
                       timeout_s=timeout_s, files={job_file: job}, collect=[out_file], cgroup_procs=[procs_file])


def _fio_json(res: ExecResult) -> dict[str, Any]:
    """fio's JSON for one group (its output file is named in collect)."""
    text = next(iter(res.collected.values()), "")
    fixed = ExecResult(res.argv, res.returncode, res.stdout, res.stderr, res.wall_s, res.cpu_user_s,
                       res.cpu_sys_s, res.timed_out, {fio_engine.RESULT_FILE: text})
    return fio_engine.parse_result(fixed)


def _metrics(p: FioGroupsParams, weights: dict[str, int], jobs: dict[str, str],
             results: dict[str, ExecResult], series: Series, reader: CountingReader,
             extra_groups: dict[str, Group], nr_req: int | None = None, bfq: bool = False) -> GroupsOutcome:
    fio = {g: fio_engine.job_metrics(_fio_json(results[g])["jobs"][0]) for g in weights}
    # beside: the window lies where the extras did I/O too (the shares change when the tenant stops)
    within = active_window(series, [g.name for g in extra_groups.values()]) if extra_groups else None
    i, j, d, steady = steady_window(series, weights, p.warmup, within)
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
    flags = trial_flags(m, steady, cores) + tag_flags(m, weights, p.iodepth, nr_req, bfq)
    result = WorkloadResult(metrics=m, job_text=next(iter(jobs.values())), flags=flags,
                            manifest={"share_series": share_series(series, weights, i, j, a, b)})
    return GroupsOutcome(result, weights, series)
