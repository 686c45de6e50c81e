"""Driving fio: render job text from validated values, run it, read its JSON.

fio is the I/O engine for all disk I/O in iolab. This module is the only place that
knows fio's command line and JSON layout; workloads build on it.
"""

from __future__ import annotations

import json
import re
import shutil
from typing import Any

from iolab.core import children
from iolab.core.errors import RefusedError, TrialFailed
from iolab.core.exec import MAX_OUTPUT, ExecRequest, ExecResult, Executor
from iolab.core.metrics import Metric
from iolab.fio import sandbox as fio_sandbox

RESULT_FILE = "fio-result.json"
JOB_FILE = "job.fio"


def fio_version() -> str | None:
    exe = shutil.which("fio")
    if not exe:
        return None
    out = children.run([exe, "--version"], capture_output=True, text=True, timeout=10)
    return out.stdout.strip() or None


def render_job(global_opts: dict[str, Any], jobs: list[tuple[str, dict[str, Any]]]) -> str:
    """Job text from typed values. Every option must be in the job-file sandbox's allowlist and
    every value pass its kind's character set (fio_sandbox.check_rendered_option), so nothing a
    user typed can inject a new option or line, and iolab's own jobs obey the same rules."""
    lines = ["[global]"] + [_line(k, v) for k, v in global_opts.items() if v is not None]
    for name, opts in jobs:
        _check_token(name)
        lines += ["", f"[{name}]"] + [_line(k, v) for k, v in opts.items() if v is not None]
    return "\n".join(lines) + "\n"


def _line(key: str, value: Any) -> str:
    _check_token(key)
    text = "1" if value is True else "0" if value is False else str(value)
    fio_sandbox.check_rendered_option(key, text)
    return f"{key}={text}"


def _check_token(token: str) -> None:
    if not re.match(r"^[A-Za-z0-9_.-]+$", token):
        raise RefusedError(f"invalid fio job or option name {token!r}")


def run_fio(executor: Executor, job_text: str, timeout_s: float, cgroup_procs: list[str] | None = None,
            devices: list[str] | None = None) -> tuple[dict[str, Any], ExecResult]:
    """Run a job; returns (parsed json+, exec result). Raises TrialFailed with fio's own words.
    `devices`: block devices the job names besides the target's (each named with --destroy-data)."""
    req = ExecRequest(
        argv=["fio", "--output-format=json+", f"--output={RESULT_FILE}", JOB_FILE],
        timeout_s=timeout_s, files={JOB_FILE: job_text}, collect=[RESULT_FILE],
        cgroup_procs=cgroup_procs or [], devices=devices or [],
    )
    res = executor.run(req)
    return parse_result(res), res


def parse_result(res: ExecResult) -> dict[str, Any]:
    if res.output_exceeded:
        raise TrialFailed(f"fio wrote more than {MAX_OUTPUT >> 20} MiB to its standard output or error and was "
                          "killed (a job with filename=- writes its data there)")
    if res.timed_out:
        raise TrialFailed(f"fio did not finish within {res.wall_s:.0f} s and was killed")
    text = res.collected.get(RESULT_FILE, "")
    if res.returncode != 0:
        raise TrialFailed(f"fio exited with status {res.returncode}: {res.tail()}")
    # fio may print notes before the JSON object
    start = text.find("{")
    try:
        data = json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError as exc:
        raise TrialFailed(f"fio output is not JSON ({exc}): {res.tail()}") from None
    if not data or not data.get("jobs"):
        raise TrialFailed(f"fio printed no job results: {res.tail()}")
    for job in data["jobs"]:
        if job.get("error"):
            raise TrialFailed(f"fio job {job.get('jobname')} failed with error {job['error']}: {res.tail()}")
    return data


MIB = float(1 << 20)
PERCENTILES = {"p50": "50.000000", "p95": "95.000000", "p99": "99.000000", "p99_9": "99.900000"}


_SIDE = "{side:read|write}"
# What job_metrics / summed_metrics produce. Rates are means over a fixed time (time_based);
# a workload whose job runs a fixed amount of work switches them to "harmonic".
RATE_METRICS = ("iops", "bw_mib_s", f"{_SIDE}_iops", f"{_SIDE}_bw_mib_s")
FIO_METRICS: tuple[Metric, ...] = (
    Metric("iops", "IOPS", "higher", "I/Os per second, reads and writes together"),
    Metric("bw_mib_s", "MiB/s", "higher", "bandwidth, reads and writes together (2^20 bytes/s)"),
    Metric(f"{_SIDE}_iops", "IOPS", "higher", "I/Os per second of one direction"),
    Metric(f"{_SIDE}_bw_mib_s", "MiB/s", "higher", "bandwidth of one direction (2^20 bytes/s)"),
    Metric(f"{_SIDE}_bytes", "bytes", "neither", "bytes transferred in one direction"),
    Metric(f"{_SIDE}_ios", "I/Os", "neither", "I/Os completed in one direction"),
    Metric(f"{_SIDE}_lat_mean_us", "µs", "lower", "mean total latency (submission + completion) of one direction"),
    Metric(f"{_SIDE}_clat_{{pct:p50|p95|p99|p99_9}}_us", "µs", "lower",
           "completion-latency percentile of one direction (fio's clat percentiles)"),
    Metric("runtime_s", "s", "neither", "fio's job runtime (set by the job when time_based)"),
    Metric("fio_usr_cpu_pct", "%", "neither", "fio's user CPU as a percentage of its runtime"),
    Metric("fio_sys_cpu_pct", "%", "neither", "fio's system CPU as a percentage of its runtime"),
    Metric("syncs", "calls", "neither", "fsync/fdatasync calls fio issued"),
    Metric("sync_lat_mean_us", "µs", "lower", "mean latency of fio's fsync/fdatasync calls"),
)


SHORT_RUN_MS = 100  # below this, fio's whole-millisecond runtime moves a rate by more than 1 %


def resolution(data: dict[str, Any]) -> dict[str, float]:
    """The error bound fio puts on each metric (same unit as the metric): fio divides by a runtime
    it counts in whole milliseconds (truncated), so a rate r over a pass of t ms may be off by up
    to r/t (summed over jobs like the rates); a latency percentile is the middle of a histogram
    bucket (bucket_half_width_ns). Repetitions that agree to the last digit then show no spread
    an interval could see; the analysis widens intervals by this (docs/statistics.md,
    "Resolution")."""
    out: dict[str, float] = {}
    weights: dict[str, float] = {}
    for job in data["jobs"]:
        out["runtime_s"] = 0.001  # job_runtime: whole milliseconds
        for d in ("read", "write"):
            side = job.get(d) or {}
            ms = side.get("runtime") or 0
            if not side.get("total_ios") or ms <= 0:
                continue
            for key, step in ((f"{d}_iops", side["iops"] / ms), (f"{d}_bw_mib_s", side["bw_bytes"] / MIB / ms),
                              ("iops", side["iops"] / ms), ("bw_mib_s", side["bw_bytes"] / MIB / ms)):
                out[key] = out.get(key, 0.0) + step
            # percentiles: IO-weighted over jobs like the values (summed_metrics), so their errors are too
            pct = (side.get("clat_ns") or {}).get("percentile") or {}
            for name, key in PERCENTILES.items():
                if key in pct:
                    metric, w = f"{d}_clat_{name}_us", float(side["total_ios"])
                    out[metric] = out.get(metric, 0.0) + w * bucket_half_width_ns(pct[key]) / 1000.0
                    weights[metric] = weights.get(metric, 0.0) + w
    for metric, w in weights.items():
        out[metric] /= w
    return out


PLAT_BITS = 6  # fio's stat.h FIO_IO_U_PLAT_BITS: 2^6 = 64 buckets per power of two


def bucket_half_width_ns(value_ns: float) -> float:
    """The error bound of a latency percentile fio reports (in ns): fio keeps completion latencies in a
    log-linear histogram (stat.h, FIO_IO_U_PLAT_BITS = 6: 64 buckets between each power of two and
    the next, so a bucket is 1/64 to 1/128 of its value wide) and prints a percentile as the middle
    of its bucket (stat.c, plat_idx_to_val: base + (k + 0.5) << error_bits). The true percentile is
    within half a bucket: 2^(msb − 7) ns, up to 0.78 % of the value. Values below 128 ns are
    their own bucket (exact)."""
    v = int(value_ns)
    if v < (1 << (PLAT_BITS + 1)):
        return 0.0
    error_bits = v.bit_length() - 1 - PLAT_BITS
    return float(1 << error_bits) / 2.0


def short_run_flags(data: dict[str, Any]) -> list[str]:
    """`short_run` when a direction's timed pass was so short that fio's millisecond clock alone
    moves its rate by more than 1 %."""
    shortest: dict[str, int] = {}
    for job in data["jobs"]:
        for d in ("read", "write"):
            side = job.get(d) or {}
            if side.get("total_ios"):
                ms = int(side.get("runtime") or 0)
                shortest[d] = min(shortest.get(d, ms), ms)
    return [f"short_run: fio's {d} pass took {ms} ms and fio counts whole milliseconds, so rounding alone moves "
            f"the rate by up to {1 / ms:.1%}" if ms else
            f"short_run: fio's {d} pass took under 1 ms: too short for fio's millisecond clock to time at all"
            for d, ms in sorted(shortest.items()) if ms < SHORT_RUN_MS]


def job_metrics(job: dict[str, Any]) -> dict[str, float]:
    """Flat metrics of one fio job (or a group_reporting aggregate)."""
    out: dict[str, float] = {}
    total_iops = total_bw = 0.0
    for d in ("read", "write"):
        side = job.get(d) or {}
        if not side.get("total_ios"):
            continue
        total_iops += side["iops"]
        total_bw += side["bw_bytes"]
        out[f"{d}_iops"] = side["iops"]
        out[f"{d}_bw_mib_s"] = side["bw_bytes"] / MIB
        out[f"{d}_bytes"] = float(side["io_bytes"])
        out[f"{d}_ios"] = float(side["total_ios"])
        lat = side.get("lat_ns") or {}
        if lat.get("N"):
            out[f"{d}_lat_mean_us"] = lat["mean"] / 1000.0
        pct = (side.get("clat_ns") or {}).get("percentile") or {}
        for name, key in PERCENTILES.items():
            if key in pct:
                out[f"{d}_clat_{name}_us"] = pct[key] / 1000.0
    out["iops"] = total_iops
    out["bw_mib_s"] = total_bw / MIB
    out["runtime_s"] = job.get("job_runtime", 0) / 1000.0
    out["fio_usr_cpu_pct"] = float(job.get("usr_cpu", 0.0))
    out["fio_sys_cpu_pct"] = float(job.get("sys_cpu", 0.0))
    sync = job.get("sync") or {}
    if sync.get("total_ios"):
        out["syncs"] = float(sync["total_ios"])
        out["sync_lat_mean_us"] = (sync.get("lat_ns") or {}).get("mean", 0.0) / 1000.0
    return out


def summed_metrics(data: dict[str, Any]) -> dict[str, float]:
    """Metrics over all jobs of a run: rates and counts add, latencies are IO-weighted."""
    jobs = data["jobs"]
    if len(jobs) == 1:
        return job_metrics(jobs[0])
    per = [job_metrics(j) for j in jobs]
    out: dict[str, float] = {}
    for key in {k for m in per for k in m}:
        vals = [m[key] for m in per if key in m]
        if "lat" in key or key.endswith("_us"):
            side = key.split("_", 1)[0]
            weights = [m.get(f"{side}_ios", 1.0) for m in per if key in m]
            out[key] = sum(v * w for v, w in zip(vals, weights, strict=True)) / max(sum(weights), 1.0)
        elif key == "runtime_s":
            out[key] = max(vals)
        else:
            out[key] = sum(vals)
    return out
