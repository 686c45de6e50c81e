"""What does running fio through iolab cost? The same fio job, bare and through `iolab run`.

Two different costs, measured apart:

* **in-trial interference** (does iolab slow fio down while it runs? probes, the executor,
  other threads): fio's own IOPS through iolab over fio's IOPS bare, on two paths:
  - I/O path: 4k random reads, libaio, iodepth 16, direct I/O on a scratch loop device
    (a pre-filled image in /dev/shm or under /var/tmp, attached with direct I/O): iolab's
    `device` target;
  - CPU path: the same job on fio's `null` engine (no I/O: fio's submission loop alone is
    timed, so any CPU iolab takes from fio shows);
* **the confinement alone** (core/confine.py: every trial's fio runs inside bubblewrap): the
  I/O path's job, bare fio against the same fio inside the confinement a `device` target gives
  its trials (`--path confine`, in the default `all`), nothing else differing;
* **fixed per-trial cost** (seconds a one-trial `iolab run` adds around fio: start-up,
  validation, target set-up and teardown, probes, the store, the report): wall time of
  `iolab run` minus wall time of the bare fio, per round, split at the trial's own start/end.

The iolab side is a one-trial study whose rendered job is byte-for-byte the bare job (both
come from iolab's renderer; checked against the job iolab stores in the trial's manifest).

**Bracketed rounds and an A/A control, side by side.** A virtual machine's CPU speed drifts
by 10-25 % over seconds (other tenants of the host; measured on the CI machines even with
two fio runs at once on its two vCPUs), so a bare run and an iolab run seconds apart differ
by that much whatever iolab does. Each step therefore runs two rounds of three fio runs:
a *test* round `bare, iolab, bare` and a *control* round `bare, bare, bare`, in alternating
order. A round's ratio is the middle run over the geometric mean of the two around it
(linear drift cancels). The control's ratio is what this machine gives when nothing differs:
its interval is the noise floor, printed beside the test's, so an interference figure is
never read closer than the machine can resolve. Steps continue until the test's 95 % CI is
within ±2 % (at least 5, at most --max-pairs, within --budget seconds per path); otherwise
the output says it could not, the width it reached, and the control's width beside it.

    bench/run overhead [--path io|cpu|confine|both|all] [--max-pairs N] [--runtime S] [--target 0.02] [--keep]

Output lines: `overhead fixed=<s> [lo, hi] s n=N (...)`, then per path the control
`overhead control=<r> [lo, hi] n=N (CPU path: bare/bare)`, the paired figure `overhead paired=<r>
[lo, hi] n=N` (each step's test round over its own control round: the design's own bias, e.g.
a middle run that is faster for being second, cancels, and so does drift slower than a step),
and `overhead ratio=<r> [lo, hi] n=N (CPU path)`; the I/O path's ratio is the last line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from figures import Busy, Figure, mean_figure, ratio_figure, stop_on_signals, stopping, until_narrow

from iolab.core.confine import Confinement
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
    control: list[float] = field(default_factory=list)
    fixed_s: list[float] = field(default_factory=list)
    in_trial_s: list[float] = field(default_factory=list)
    busy: Busy = field(default_factory=Busy)
    side: str = "read"
    confinement: Confinement | None = None  # set: the middle run is bare fio inside it, not iolab


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


def bare(job_text: str, workdir: Path, side: str, confinement: Confinement | None = None) -> tuple[float, float]:
    """(IOPS, wall seconds) of fio run directly (inside `confinement`, if given)."""
    job = workdir / "bare.fio"
    job.write_text(job_text)
    argv = ["fio", "--output-format=json", str(job)]
    if confinement is not None:
        argv = confinement.with_writable(str(workdir)).argv(argv, cwd=str(workdir))
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, cwd=workdir)
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
    print(f"{p.label}: job ({args.runtime:g} s, ramp 1 s); steps of a test round (bare, iolab, bare) and a "
          "control round (bare, bare, bare):", flush=True)
    print("  " + job_text.strip().replace("\n", "\n  "), flush=True)

    def run_one(which: str) -> tuple[float, ...]:
        p.busy.start()
        try:
            if which == "bare":
                return bare(job_text, scratch, p.side)
            if p.confinement is not None:
                return (*bare(job_text, scratch, p.side, p.confinement), 0.0)
            return through_iolab(spec, env, job_text, destroy)
        finally:
            p.busy.stop()

    def bracketed(middle: str) -> tuple[float, tuple[float, ...], list[tuple[float, ...]]]:
        """bare, `middle`, bare: the middle's IOPS over the geometric mean of the two around it."""
        first, mid, last = run_one("bare"), run_one(middle), run_one("bare")
        return mid[0] / math.sqrt(first[0] * last[0]), mid, [first, last]

    def pair(i: int) -> None:
        rounds = ("test", "control") if i % 2 == 0 else ("control", "test")
        for kind in rounds:
            if kind == "test":
                r, (i_iops, i_wall, i_trial), brackets = bracketed("iolab")
                b_wall = sum(b[1] for b in brackets) / 2
                p.ratios.append(r)
                p.fixed_s.append(i_wall - b_wall)
                p.in_trial_s.append(i_trial - b_wall)
                what = "confined" if p.confinement is not None else "iolab"
                test_line = (f"{what} {i_iops:10.0f} IOPS {i_wall:5.2f} s (trial {i_trial:5.2f} s) between bare "
                             f"{brackets[0][0]:.0f} and {brackets[1][0]:.0f} | ratio {r:.3f}")
            else:
                c, _, _ = bracketed("bare")
                p.control.append(c)
        stolen = max(p.busy.steal_shares[-6:])
        print(f"step {i + 1} ({rounds[0]} first): {test_line} | control bare/bare {p.control[-1]:.3f} | machine "
              f"busy {min(p.busy.shares[-6:]):.0%}..{max(p.busy.shares[-6:]):.0%}, stolen up to {stolen:.1%}",
              flush=True)

    return until_narrow(pair, lambda: ratio_figure("overhead ratio", p.ratios, args.target,
                                                   stopping(args.max_pairs)),
                        max_n=args.max_pairs, budget_s=args.budget)


def main() -> None:
    stop_on_signals()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--path", choices=("io", "cpu", "confine", "both", "all"), default="all",
                    help="which path(s) to measure: both = cpu and io through iolab; all = both and the "
                         "confinement alone (default)")
    ap.add_argument("--max-pairs", type=int, default=int(os.environ.get("IOLAB_BENCH_PAIRS", 30)),
                    help="at most this many steps per path, each a test and a control round (default 30; at "
                         "least 5); the intervals keep 95 %% over every look from 5 to this")
    ap.add_argument("--target", type=float, default=0.02, help="relative 95%% CI half-width to reach (0.02)")
    ap.add_argument("--budget", type=float, default=600, help="seconds per path before giving up (600)")
    ap.add_argument("--runtime", type=float, default=2.0,
                    help="fio runtime in seconds (default 2: runs close in time drift less apart)")
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
        if args.path in ("cpu", "both", "all"):
            paths.append(Path_("CPU path", "cpu", workload_table(args.runtime, "null"),
                               {"kind": "host", "directory": str(files)},
                               Placement(executor=no_exec, directory=str(files))))
        if args.path in ("io", "both", "confine", "all"):
            image_dir = Path(tempfile.mkdtemp(prefix="iolab-bench-", dir="/dev/shm")) if args.backing == "ram" \
                else scratch
            cleanup.append(image_dir)
            image = image_dir / "device.img"
            print(f"prefilling a 256 MiB image in {image_dir} and attaching it as a loop device ...", flush=True)
            prefill(image)
            loop = subprocess.run(["losetup", "--find", "--show", "--direct-io=on", str(image)], check=True,
                                  capture_output=True, text=True).stdout.strip()
            destroy.append(loop)
            if args.path in ("io", "both", "all"):
                paths.append(Path_("I/O path", "io", workload_table(args.runtime, "libaio"),
                                   {"kind": "device", "device": loop},
                                   Placement(executor=no_exec, path=loop, is_block_device=True)))
            if args.path in ("confine", "all"):  # first, so the I/O path's ratio stays the last line
                paths.insert(0, Path_("confinement", "confine", workload_table(args.runtime, "libaio"),
                                      {"kind": "device", "device": loop},
                                      Placement(executor=no_exec, path=loop, is_block_device=True),
                                      confinement=Confinement(devices=(loop,))))
        figures = [(p, measure(p, scratch, env, args, destroy)) for p in paths]

        looks = stopping(args.max_pairs)  # every figure's n was chosen by the same stopping rule
        through = [p for p in paths if p.confinement is None]  # the confinement path has no iolab run
        print()
        controls = {p.slug: ratio_figure("overhead control", p.control, args.target, looks) for p, _ in figures}
        for p, f in figures:
            c = controls[p.slug]
            why = (f"bare against bare gives {c.line()} here: the machine's own run-to-run noise is "
                   f"±{c.rel_half_width:.1%}" if not c.reached else
                   f"the machine's CPUs were {p.busy.mean():.0%} busy on average, the measured fio included; "
                   f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
            print(f"{p.label}: per-round ratios {min(p.ratios):.3f} .. {max(p.ratios):.3f}, bare/bare "
                  f"{min(p.control):.3f} .. {max(p.control):.3f}; {f.verdict(why)}")
            print(f"{p.label}: {_resolution(f, c)}")
        if through:
            fixed = mean_figure("overhead fixed", [s for p in through for s in p.fixed_s], "s", looks=looks)
            inside = mean_figure("in the trial", [s for p in through for s in p.in_trial_s], "s", looks=looks)
            print(f"fixed cost: {inside.value:.2f} s of it inside the trial (probes, executor, parsing: "
                  f"{inside.line()}), the rest around it (start-up, target, store, report)")
            print(fixed.line("per one-trial run: iolab run wall time - bare fio wall time"))
        for p, f in figures:
            print(controls[p.slug].line(f"{p.label}: bare/bare"))
            paired = ratio_figure("overhead paired", [t / c for t, c in zip(p.ratios, p.control, strict=False)],
                                  args.target, looks)
            print(paired.line(f"{p.label}: each step's test round over its control round"))
            print(f.line(p.label))
    finally:
        if loop:
            subprocess.run(["losetup", "-d", loop], check=False)
        if args.keep:
            print(f"kept {' '.join(map(str, cleanup))}", file=sys.stderr)
        else:
            for d in cleanup:
                shutil.rmtree(d, ignore_errors=True)


def _resolution(test: Figure, control: Figure) -> str:
    """What the test figure can say, read against the control's interval (the noise floor)."""
    inside = test.lo <= 1.0 <= test.hi
    if test.reached:
        return (f"fio through iolab runs at {test.value:.1%} of bare speed (95% CI ±{test.rel_half_width:.1%}"
                + ("; 1.0 is inside it: no interference shown)" if inside else ")"))
    if control.hi - control.lo >= 0.7 * (test.hi - test.lo):
        return (f"the interval is as wide as bare against bare (±{control.rel_half_width:.1%}): the machine's own "
                "noise, not iolab, limits the figure" + ("; 1.0 is inside it" if inside else
                                                          f"; the ratio still differs from 1 ({test.line()})"))
    return f"wider than bare against bare (±{control.rel_half_width:.1%}): iolab's runs vary more than bare ones"


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
