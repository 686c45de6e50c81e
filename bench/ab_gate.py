"""`iolab ab` as a CI gate on this machine, for real: A = B tries must all say "no regression";
B with a CPU hog beside its blocks only must be a regression with exit 1.

The study is tests/cli/test_ab_cli.py's tiny CPU-bound one (sysbench cpu, 1 thread, 1 s on the
host), 8 blocks (one look). Every try is a separate `iolab ab` process with its own seed, in a
private results store and data directory under /tmp that is removed at the end.

    bench/run ab-gate [--tries 20] [--load-tries 5] [--pinned] [--load-max-blocks 16] [--shared-load]

--pinned runs every try under `taskset -c 0` (workload and hog on one CPU, as the suite's test
does); without it the hog competes on the whole, shared machine. Last lines:
`ab-gate a=b no-regression=<k>/<n> exit-codes=<...> minutes=<m>` and
`ab-gate load-beside-b regression=<k>/<n> ratio=<median B/A> exit-codes=<...>`.
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
from pathlib import Path

SPEC = """
[study]
name = "ab-gate"

[target]
kind = "host"

[workload]
kind = "sysbench-cpu"
threads = 1
time = 1
"""


SHARED = SPEC.replace('name = "ab-gate"', 'name = "ab-gate"\nworkload_session = "shared"')


def one(iolab: Path, spec: Path, data: Path, seed: int, load: str | None, pinned: bool,
        max_blocks: int = 8) -> tuple[int, float | None]:
    argv = [*(["taskset", "-c", "0"] if pinned else []), str(iolab), "ab", str(spec), "--blocks", "8", "--max-blocks",
            str(max_blocks), "--seed", str(seed), "--json", *(["--load-b", load] if load else [])]
    env = {**os.environ, "IOLAB_DATA": str(data)}
    r = subprocess.run(argv, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=1800)
    try:
        rows = json.loads(r.stdout)["rows"]
        ratio = rows[0]["ratio"] if rows else None
    except (json.JSONDecodeError, KeyError, IndexError):
        ratio = None
    return r.returncode, ratio


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tries", type=int, default=20)
    ap.add_argument("--load-tries", type=int, default=5)
    ap.add_argument("--pinned", action="store_true")
    ap.add_argument("--load-max-blocks", type=int, default=16, help="the budget of the load tries (looks 8, 12, 16)")
    ap.add_argument("--skip-a-equals-b", action="store_true")
    ap.add_argument("--shared-load", action="store_true",
                    help="the load tries keep the workloads (and so the hog) in iolab's session: one autogroup")
    args = ap.parse_args()
    iolab = Path(sys.executable).with_name("iolab")
    with tempfile.TemporaryDirectory(prefix="iolab-ab-gate-") as tmp:
        spec = Path(tmp) / "spec.toml"
        spec.write_text(SPEC)
        shared = Path(tmp) / "shared.toml"  # the hog beside B in the workloads' session (autogroup)
        shared.write_text(SHARED if args.shared_load else SPEC)
        data = Path(tmp) / "data"
        t0 = time.monotonic()
        codes, ratios = [], []
        for i in range(0 if args.skip_a_equals_b else args.tries):
            code, ratio = one(iolab, spec, data, 1000 + i, None, args.pinned)
            codes.append(code)
            ratios.append(ratio)
            print(f"a=b try {i + 1}/{args.tries}: exit {code}, B/A {ratio}", flush=True)
        ok = sum(c == 0 for c in codes)
        if codes:
            print(f"ab-gate a=b no-regression={ok}/{args.tries} exit-codes={codes} "
                  f"minutes={(time.monotonic() - t0) / 60:.1f}{' pinned' if args.pinned else ''}", flush=True)
        if shutil.which("stress-ng") is None:
            print("ab-gate load-beside-b skipped: stress-ng not installed")
            return
        codes, ratios = [], []
        for i in range(args.load_tries):
            code, ratio = one(iolab, shared, data, 2000 + i, "stress-ng --cpu 1", args.pinned, args.load_max_blocks)
            codes.append(code)
            ratios.append(ratio)
            print(f"load try {i + 1}/{args.load_tries}: exit {code}, B/A {ratio}", flush=True)
        found = sorted(r for r in ratios if r is not None)
        median = found[len(found) // 2] if found else None
        print(f"ab-gate load-beside-b regression={sum(c == 1 for c in codes)}/{args.load_tries} ratio={median} "
              f"exit-codes={codes}{' pinned' if args.pinned else ''}{' shared session' if args.shared_load else ''}",
              flush=True)


if __name__ == "__main__":
    main()
