"""What does running fio through iolab cost? The same fio job, bare and through `iolab run`.

The job: 4k random reads, libaio, iodepth 16, direct I/O, 5 s (after a 1 s ramp) on a
256 MiB file pre-filled once in a scratch directory under /var/tmp. The iolab side is a
one-trial study on a host-directory target whose rendered job is byte-for-byte the bare
job (the bare job text is produced by iolab's own renderer, and checked against the job
text iolab stores in the trial's manifest). Runs are interleaved (bare, iolab | iolab,
bare | ...) so that drift of the machine cancels within each pair; the result is the
median over pairs of iolab IOPS / bare IOPS.

    bench/run overhead [--pairs N] [--runtime S] [--keep]

The last line is exactly `overhead ratio=<median iolab/bare IOPS, 3 decimals>`.
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
from pathlib import Path

from iolab.core.exec import HostExecutor
from iolab.targets.base import Placement
from iolab.workloads.fio import DATA_FILE, FioParams, FioWorkload

REPO = Path(__file__).resolve().parents[1]
IOLAB = REPO / ".venv" / "bin" / "iolab"
SIZE = 256 << 20


def workload_table(runtime: float) -> dict:
    """The [workload] of the iolab study; the bare job is rendered from the very same values."""
    return {"kind": "fio", "rw": "randread", "bs": 4096, "size": SIZE, "iodepth": 16, "ioengine": "libaio",
            "direct": True, "runtime": runtime, "ramp_time": 1, "prefill": False}


def prefill(path: Path) -> None:
    """Write every byte once (non-zero data), so reads reach the disk and never read holes."""
    block = os.urandom(1 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for _ in range(SIZE // len(block)):
            os.write(fd, block)
        os.fsync(fd)
    finally:
        os.close(fd)


def bare(job_text: str, workdir: Path) -> float:
    job = workdir / "bare.fio"
    job.write_text(job_text)
    r = subprocess.run(["fio", "--output-format=json", str(job)], capture_output=True, text=True, cwd=workdir)
    if r.returncode != 0:
        raise SystemExit(f"bare fio failed ({r.returncode}): {r.stderr.strip()[-800:]}")
    data = json.loads(r.stdout[r.stdout.find("{"):])
    return float(sum(j["read"]["iops"] for j in data["jobs"]))


def through_iolab(spec: Path, env: dict[str, str], expected_job: str) -> float:
    r = subprocess.run([str(IOLAB), "run", str(spec)], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"iolab run failed ({r.returncode}):\n{r.stderr.strip()[-1500:]}")
    r = subprocess.run([str(IOLAB), "report", "latest", "--format", "json"], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"iolab report failed ({r.returncode}):\n{r.stderr.strip()[-1500:]}")
    doc = json.loads(r.stdout)
    trials = doc["trials"]
    if len(trials) != 1 or trials[0]["status"] != "ok":
        raise SystemExit(f"expected one ok trial, got {[(t['status'], t['error']) for t in trials]}")
    if trials[0]["manifest"]["job"] != expected_job:
        raise SystemExit("iolab ran a different job than the bare run:\n" + trials[0]["manifest"]["job"])
    return float(trials[0]["metrics"]["iops"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=int(os.environ.get("IOLAB_BENCH_PAIRS", 7)),
                    help="bare/iolab pairs (at least 5; default 7)")
    ap.add_argument("--runtime", type=float, default=5.0, help="fio runtime in seconds (default 5)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch dir and iolab data (for a look)")
    args = ap.parse_args()
    if args.pairs < 5:
        ap.error("--pairs must be at least 5")
    for tool in ("fio",):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed")
    if not IOLAB.exists():
        raise SystemExit(f"{IOLAB} missing: install iolab into .venv first")

    Path("/var/tmp").mkdir(exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="iolab-bench-", dir="/var/tmp"))  # on disk: O_DIRECT, not tmpfs
    try:
        data_dir = scratch / "data"
        files = scratch / "files"
        files.mkdir()
        env = dict(os.environ, IOLAB_DATA=str(data_dir), IOLAB_SCRATCH=str(scratch / "iolab-scratch"))

        w = workload_table(args.runtime)
        job_text = FioWorkload(FioParams(**w)).job_text(Placement(executor=_NoExec(), directory=str(files)))
        spec = scratch / "overhead.toml"
        spec.write_text(
            '[study]\nname = "overhead"\nrepetitions = 1\nmax_repetitions = 1\n\n'
            f'[target]\nkind = "host"\ndirectory = "{files}"\n\n[workload]\n'
            + "".join(f"{k} = {_toml(v)}\n" for k, v in w.items()))

        print(f"prefilling a 256 MiB file in {files} ...", flush=True)
        prefill(files / DATA_FILE)
        print(f"job ({args.runtime:g} s, ramp 1 s), run bare and through iolab, interleaved:", flush=True)
        print("  " + job_text.strip().replace("\n", "\n  "), flush=True)

        ratios = []
        bare_all, iolab_all = [], []
        for i in range(args.pairs):
            order = ("bare", "iolab") if i % 2 == 0 else ("iolab", "bare")
            got = {}
            for which in order:
                got[which] = bare(job_text, scratch) if which == "bare" else through_iolab(spec, env, job_text)
            ratio = got["iolab"] / got["bare"]
            ratios.append(ratio)
            bare_all.append(got["bare"])
            iolab_all.append(got["iolab"])
            print(f"pair {i + 1}/{args.pairs} ({order[0]} first): bare {got['bare']:10.0f} IOPS   "
                  f"iolab {got['iolab']:10.0f} IOPS   ratio {ratio:.3f}", flush=True)

        med = statistics.median(ratios)
        print(f"bare IOPS median {statistics.median(bare_all):.0f}, iolab IOPS median {statistics.median(iolab_all):.0f}; "
              f"per-pair ratios min {min(ratios):.3f} max {max(ratios):.3f}")
        print(f"median ratio (iolab / bare) over {len(ratios)} pairs: {med:.3f}")
        print(f"overhead ratio={med:.3f}")
    finally:
        if args.keep:
            print(f"kept {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)


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
