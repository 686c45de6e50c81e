"""What does driving a fleet through iolab cost? The same job on three fio servers (network
namespaces on this machine, each with its own loop device), by bare `fio --client` and
through `iolab run` with a fleet target, in interleaved pairs.

Bare: one `fio --client` for all three hosts, each its own job (the job iolab renders for that
host), aggregate IOPS = the sum of the hosts' IOPS (what a user of bare fio adds up). iolab:
a one-trial study with the same workload on a `fleet` target; its aggregate is over the common
window (docs/fleet.md), with rate logs on. Pairs alternate which side runs first, so drift of
the machine cancels within a pair; they continue until the ratio's 95 % CI is within ±2 %
(at least 5 pairs, at most --max-pairs, within --budget seconds).

    bench/run fleet [--max-pairs N] [--runtime S] [--budget S]

Last lines: `fleet overhead ratio=<iolab aggregate IOPS / bare aggregate IOPS> [lo, hi] n=N`
(goal >= 0.98) and `start spread ms=<median over iolab's trials>`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from figures import Busy, ratio_figure, stop_on_signals, stopping, until_narrow  # noqa: E402
from tests.fleet.netns_hosts import NsHost, ns_fleet  # noqa: E402

from iolab.core.exec import HostExecutor  # noqa: E402
from iolab.targets.base import Placement  # noqa: E402
from iolab.workloads.fio import FioParams, FioWorkload  # noqa: E402

IOLAB = REPO / ".venv" / "bin" / "iolab"
SIZE = "32M"


def workload(runtime: float) -> dict[str, object]:
    return {"kind": "fio", "rw": "randread", "bs": 4096, "size": SIZE, "iodepth": 16, "ioengine": "libaio",
            "direct": True, "runtime": runtime, "ramp_time": 1}


class _NoExec(HostExecutor):
    """job_text() needs a placement; rendering runs nothing."""

    def __init__(self) -> None:  # noqa: D107
        self.workdir = Path("/nonexistent")


def host_job(runtime: float, host: NsHost) -> str:
    return FioWorkload(FioParams.model_validate(workload(runtime))).job_text(
        Placement(executor=_NoExec(), path=host.device, is_block_device=True))


def bare(hosts: list[NsHost], runtime: float, workdir: Path) -> float:
    """Aggregate IOPS of one bare `fio --client` run: the sum of the hosts' own results."""
    argv = ["fio", "--output-format=json"]
    for h in hosts:
        job = workdir / f"bare-{h.name}.fio"
        job.write_text(host_job(runtime, h))
        argv += [f"--client=ip:{h.address},{h.port}", str(job)]
    r = subprocess.run(argv, capture_output=True, text=True, cwd=workdir, timeout=runtime * 10 + 60)
    if r.returncode != 0:
        raise SystemExit(f"bare fio --client failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-800:]}")
    data = json.loads(r.stdout[r.stdout.find("{"):])
    per_host = [e["read"]["iops"] for e in data["client_stats"] if e.get("jobname") != "All clients"]
    if len(per_host) != len(hosts):
        raise SystemExit(f"bare fio --client returned {len(per_host)} host results for {len(hosts)} hosts")
    return float(sum(per_host))


def spec_text(hosts: list[NsHost], runtime: float) -> str:
    lines = ['[study]\nname = "fleet-overhead"\nrepetitions = 1\nmax_repetitions = 1\n\n[workload]']
    lines += [f"{k} = {json.dumps(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else v}"
              for k, v in workload(runtime).items()]
    lines.append('\n[target]\nkind = "fleet"')
    for h in hosts:
        lines.append(f'[[target.hosts]]\nname = "{h.name}"\naddress = "{h.address}"\nport = {h.port}\n'
                     f'device = "{h.device}"\nsame_machine = true')
    return "\n".join(lines) + "\n"


def through_iolab(spec: Path, env: dict[str, str]) -> tuple[float, float]:
    """(aggregate IOPS, start spread ms) of a one-trial `iolab run` on the fleet."""
    r = subprocess.run([str(IOLAB), "run", str(spec)], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"iolab run failed ({r.returncode}):\n{r.stderr.strip()[-1500:]}")
    r = subprocess.run([str(IOLAB), "report", "latest", "--format", "json"], capture_output=True, text=True, env=env)
    trials = json.loads(r.stdout)["trials"]
    if len(trials) != 1 or trials[0]["status"] != "ok":
        raise SystemExit(f"expected one ok trial, got {[(t['status'], t['error']) for t in trials]}")
    m = trials[0]["metrics"]
    return float(m["iops"]), float(m.get("fleet_start_spread_ms", float("nan")))


def main() -> None:
    stop_on_signals()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-pairs", type=int, default=30, help="at most this many pairs (default 30; at least 5)")
    ap.add_argument("--runtime", type=float, default=3.0, help="fio runtime in seconds (default 3)")
    ap.add_argument("--target", type=float, default=0.02, help="relative 95%% CI half-width to reach (0.02)")
    ap.add_argument("--budget", type=float, default=600, help="seconds before giving up (600)")
    args = ap.parse_args()
    if args.max_pairs < 5:
        ap.error("--max-pairs must be at least 5")
    for tool in ("fio", "ip", "ss", "losetup"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed")
    if os.geteuid() != 0:
        raise SystemExit("bench/run fleet needs root (network namespaces, loop devices)")
    scratch = Path(tempfile.mkdtemp(prefix="iolab-bench-fleet-", dir="/var/tmp"))
    try:
        env = dict(os.environ, IOLAB_DATA=str(scratch / "data"), IOLAB_SCRATCH=str(scratch / "iolab-scratch"))
        with ns_fleet(scratch / "hosts", 3) as hosts:
            spec = scratch / "fleet.toml"
            spec.write_text(spec_text(hosts, args.runtime))
            print(f"3 namespace hosts ({', '.join(f'{h.name} {h.address} {h.device}' for h in hosts)}); job per host:")
            print("  " + host_job(args.runtime, hosts[0]).strip().replace("\n", "\n  "), flush=True)
            ratios: list[float] = []
            spreads: list[float] = []
            busy = Busy()

            def pair(i: int) -> None:
                order = ("bare", "iolab") if i % 2 == 0 else ("iolab", "bare")
                got: dict[str, float] = {}
                t0 = time.monotonic()
                for which in order:
                    busy.start()
                    if which == "bare":
                        got["bare"] = bare(hosts, args.runtime, scratch)
                    else:
                        got["iolab"], spread = through_iolab(spec, env)
                        spreads.append(spread)
                    busy.stop()
                ratios.append(got["iolab"] / got["bare"])
                print(f"pair {i + 1} ({order[0]} first): bare {got['bare']:9.0f} IOPS | iolab {got['iolab']:9.0f} "
                      f"IOPS (start spread {spreads[-1]:.0f} ms) | ratio {ratios[-1]:.3f} | machine busy "
                      f"{busy.shares[-2]:.0%}/{busy.shares[-1]:.0%} | {time.monotonic() - t0:.1f} s", flush=True)

            fig = until_narrow(pair, lambda: ratio_figure("fleet overhead ratio", ratios, args.target,
                                                          stopping(args.max_pairs)),
                               max_n=args.max_pairs, budget_s=args.budget)
        print()
        print(f"per-pair ratios {min(ratios):.3f} .. {max(ratios):.3f}; " + fig.verdict(
            f"the machine's CPUs were {busy.mean():.0%} busy on average; run it on a quiet machine"))
        print(fig.line("iolab aggregate IOPS over the common window / bare fio --client sum of hosts; goal >= 0.98"))
        print(f"start spread ms={statistics.median(spreads):.1f} (median over {len(spreads)} iolab trials, "
              f"max {max(spreads):.1f})")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
