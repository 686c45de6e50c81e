"""What does running fio through iolab cost? The same fio job, bare and through `iolab run`.

Two different costs, measured apart:

* **in-trial interference** (does iolab slow fio down while it runs? probes, the executor,
  other threads): fio's own IOPS through iolab over fio's IOPS bare, per pair, on two paths:
  - I/O path: 4k random reads, libaio, iodepth 16, direct I/O on a scratch loop device
    (a pre-filled image under /var/tmp, attached with direct I/O): iolab's `device` target;
  - CPU path: the same job on fio's `null` engine (no I/O: fio's submission loop alone is
    timed, so any CPU iolab takes from fio shows);
* **fixed per-trial cost** (seconds a one-trial `iolab run` adds around fio: start-up,
  validation, target set-up and teardown, probes, the store, the report): wall time of
  `iolab run` minus wall time of the bare fio, per pair, split at the trial's own start/end.

The iolab side is a one-trial study whose rendered job is byte-for-byte the bare job (both
come from iolab's renderer; checked against the job iolab stores in the trial's manifest).
Pairs alternate which side runs first (bare, iolab | iolab, bare | ...), so drift of the
machine cancels within a pair. Pairs continue until the 95 % CI of the ratio is within
±2 % (at least 5, at most --max-pairs, within --budget seconds per path); otherwise the
output says it could not and the width it reached.

    bench/run overhead [--path io|cpu|both] [--max-pairs N] [--runtime S] [--target 0.02] [--keep]

Output lines: `overhead fixed=<s> [lo, hi] s n=N (...)`, then one `overhead ratio=<r> [lo, hi]
n=N (CPU path)` and, last, `overhead ratio=<r> [lo, hi] n=N (I/O path)`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from figures import Busy, Figure, mean_figure, ratio_figure, until_narrow, stop_on_signals

from iolab.core.exec import HostExecutor
from iolab.targets.base import Placement
from iolab.workloads.fio import FioParams, FioWorkload

REPO = Path(__file__).resolve().parents[1]
IOLAB = REPO / ".venv" / "bin" / "iolab"
SIZE = 256 << 20


@dataclass
class Path_:
    """One measured path: its workload, its target, and what the pairs gave."""

    label: str
    slug: str
    workload: dict[str, Any]
    target: dict[str, Any]
    placement: Placement
    ratios: list[float] = field(default_factory=list)
    fixed_s: list[float] = field(default_factory=list)
    in_trial_s: list[float] = field(default_factory=list)
    busy: Busy = field(default_factory=Busy)
    side: str = "read"


def workload_table(runtime: float, engine: str) -> dict[str, Any]:
    """The [workload] of the iolab study; the bare job is rendered from the very same values."""
    return {"kind": "fio", "rw": "randread", "bs": 4096, "size": SIZE, "iodepth": 16, "ioengine": engine,
            "direct": True, "runtime": runtime, "ramp_time": 1, "prefill": False}


def prefill(path: Path) -> None:
    """Write every byte once (non-zero data), so reads reach the disk and never read holes."""
    block = os.urandom(1 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        for _ in range(SIZE // len(block)):
            os.write(fd, block)
        os.fsync(fd)
    finally:
        os.close(fd)


def bare(job_text: str, workdir: Path, side: str) -> tuple[float, float]:
    """(IOPS, wall seconds) of fio run directly."""
    job = workdir / "bare.fio"
    job.write_text(job_text)
    t0 = time.monotonic()
    r = subprocess.run(["fio", "--output-format=json", str(job)], capture_output=True, text=True, cwd=workdir)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit(f"bare fio failed ({r.returncode}): {r.stderr.strip()[-800:]}")
    data = json.loads(r.stdout[r.stdout.find("{"):])
    return float(sum(j[side]["iops"] for j in data["jobs"])), wall


def through_iolab(spec: Path, env: dict[str, str], expected_job: str, destroy: list[str]
                  ) -> tuple[float, float, float]:
    """(IOPS, wall seconds of `iolab run`, seconds of its one trial)."""
    argv = [str(IOLAB), "run", str(spec), *[a for d in destroy for a in ("--destroy-data", d)]]
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit(f"iolab run failed ({r.returncode}):\n{r.stderr.strip()[-1500:]}")
    r = subprocess.run([str(IOLAB), "report", "latest", "--format", "json"], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"iolab report failed ({r.returncode}):\n{r.stderr.strip()[-1500:]}")
    trials = json.loads(r.stdout)["trials"]
    if len(trials) != 1 or trials[0]["status"] != "ok":
        raise SystemExit(f"expected one ok trial, got {[(t['status'], t['error']) for t in trials]}")
    if trials[0]["manifest"]["job"] != expected_job:
        raise SystemExit("iolab ran a different job than the bare run:\n" + trials[0]["manifest"]["job"])
    return float(trials[0]["metrics"]["iops"]), wall, trials[0]["ended"] - trials[0]["started"]


def spec_text(p: Path_) -> str:
    return ('[study]\nname = "overhead"\nrepetitions = 1\nmax_repetitions = 1\n\n[target]\n'
            + "".join(f"{k} = {_toml(v)}\n" for k, v in p.target.items()) + "\n[workload]\n"
            + "".join(f"{k} = {_toml(v)}\n" for k, v in p.workload.items()))


def measure(p: Path_, scratch: Path, env: dict[str, str], args: argparse.Namespace, destroy: list[str]) -> Figure:
    job_text = FioWorkload(FioParams(**p.workload)).job_text(p.placement)
    spec = scratch / f"overhead-{p.slug}.toml"
    spec.write_text(spec_text(p))
    print(f"{p.label}: job ({args.runtime:g} s, ramp 1 s), bare and through iolab, alternating:", flush=True)
    print("  " + job_text.strip().replace("\n", "\n  "), flush=True)

    def pair(i: int) -> None:
        got: dict[str, tuple[float, ...]] = {}
        order = ("bare", "iolab") if i % 2 == 0 else ("iolab", "bare")
        for which in order:
            p.busy.start()
            got[which] = bare(job_text, scratch, p.side) if which == "bare" else \
                through_iolab(spec, env, job_text, destroy)
            p.busy.stop()
        (b_iops, b_wall), (i_iops, i_wall, i_trial) = got["bare"], got["iolab"]
        p.ratios.append(i_iops / b_iops)
        p.fixed_s.append(i_wall - b_wall)
        p.in_trial_s.append(i_trial - b_wall)
        print(f"pair {i + 1} ({order[0]} first): bare {b_iops:10.0f} IOPS {b_wall:5.2f} s | iolab {i_iops:10.0f} "
              f"IOPS {i_wall:5.2f} s (trial {i_trial:5.2f} s) | ratio {p.ratios[-1]:.3f} | machine busy "
              f"{p.busy.shares[-2]:.0%}/{p.busy.shares[-1]:.0%}, stolen {p.busy.steal_shares[-2]:.1%}/"
              f"{p.busy.steal_shares[-1]:.1%}", flush=True)

    return until_narrow(pair, lambda: ratio_figure("overhead ratio", p.ratios, args.target),
                        max_n=args.max_pairs, budget_s=args.budget)


def main() -> None:
    stop_on_signals()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--path", choices=("io", "cpu", "both"), default="both", help="which path(s) to measure")
    ap.add_argument("--max-pairs", type=int, default=int(os.environ.get("IOLAB_BENCH_PAIRS", 40)),
                    help="at most this many bare/iolab pairs per path (default 40; at least 5)")
    ap.add_argument("--target", type=float, default=0.02, help="relative 95%% CI half-width to reach (0.02)")
    ap.add_argument("--budget", type=float, default=600, help="seconds per path before giving up (600)")
    ap.add_argument("--runtime", type=float, default=3.0, help="fio runtime in seconds (default 3)")
    ap.add_argument("--backing", choices=("ram", "disk"), default="ram",
                    help="the I/O path's loop device image: in /dev/shm (default: the device's own noise, "
                         "other people's disk I/O, stays out of a figure about iolab) or under /var/tmp")
    ap.add_argument("--keep", action="store_true", help="keep the scratch dir and iolab data (for a look)")
    args = ap.parse_args()
    if args.max_pairs < 5:
        ap.error("--max-pairs must be at least 5")
    for tool in ("fio", "losetup"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed")
    if not IOLAB.exists():
        raise SystemExit(f"{IOLAB} missing: install iolab into .venv first")

    Path("/var/tmp").mkdir(exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="iolab-bench-", dir="/var/tmp"))
    cleanup = [scratch]
    loop = None
    try:
        env = dict(os.environ, IOLAB_DATA=str(scratch / "data"), IOLAB_SCRATCH=str(scratch / "iolab-scratch"))
        files = scratch / "files"
        files.mkdir()
        no_exec = _NoExec()
        paths: list[Path_] = []
        destroy: list[str] = []
        if args.path in ("cpu", "both"):
            paths.append(Path_("CPU path", "cpu", workload_table(args.runtime, "null"),
                               {"kind": "host", "directory": str(files)},
                               Placement(executor=no_exec, directory=str(files))))
        if args.path in ("io", "both"):
            image_dir = Path(tempfile.mkdtemp(prefix="iolab-bench-", dir="/dev/shm")) if args.backing == "ram" \
                else scratch
            cleanup.append(image_dir)
            image = image_dir / "device.img"
            print(f"prefilling a 256 MiB image in {image_dir} and attaching it as a loop device ...", flush=True)
            prefill(image)
            loop = subprocess.run(["losetup", "--find", "--show", "--direct-io=on", str(image)], check=True,
                                  capture_output=True, text=True).stdout.strip()
            destroy.append(loop)
            paths.append(Path_("I/O path", "io", workload_table(args.runtime, "libaio"), {"kind": "device", "device": loop},
                               Placement(executor=no_exec, path=loop, is_block_device=True)))
        figures = [(p, measure(p, scratch, env, args, destroy)) for p in paths]

        fixed = mean_figure("overhead fixed", [s for p in paths for s in p.fixed_s], "s")
        inside = mean_figure("in the trial", [s for p in paths for s in p.in_trial_s], "s")
        print()
        for p, f in figures:
            why = (f"the machine's CPUs were {p.busy.mean():.0%} busy on average during the runs, the measured "
                   f"fio included; load "
                   f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs: other work; run it on a quiet machine")
            print(f"{p.label}: per-pair ratios {min(p.ratios):.3f} .. {max(p.ratios):.3f}; {f.verdict(why)}")
        print(f"fixed cost: {inside.value:.2f} s of it inside the trial (probes, executor, parsing: "
              f"{inside.line()}), the rest around it (start-up, target, store, report)")
        print(fixed.line("per one-trial run: iolab run wall time - bare fio wall time"))
        for p, f in figures:
            print(f.line(p.label))
    finally:
        if loop:
            subprocess.run(["losetup", "-d", loop], check=False)
        if args.keep:
            print(f"kept {' '.join(map(str, cleanup))}", file=sys.stderr)
        else:
            for d in cleanup:
                shutil.rmtree(d, ignore_errors=True)


class _NoExec(HostExecutor):
    """job_text() needs a placement; rendering runs nothing, so no work dir is made."""

    def __init__(self) -> None:  # noqa: D107  (deliberately no super().__init__: no mkdtemp)
        self.workdir = Path("/nonexistent")


def _toml(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    return str(v)


if __name__ == "__main__":
    main()
