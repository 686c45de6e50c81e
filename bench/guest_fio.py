"""A restored guest's start to first I/O with the static guest fio against Debian's fio, side by
side in one run: the measurement behind native/guest_fio.py. Each round starts one restored
guest of each (virtio-blk, the same shape as `bench/run vm-boot`), in alternating order, so
drift of the machine's load hits both alike; the ratio of a round is static / debian. The
Debian variant runs with a cache that shares everything with the real one except the static
build (`$IOLAB_CACHE/guest-fio`), so its guest image carries Debian's fio with its libraries,
exactly as on a machine without the build. Both images and their saved states are made (or
found) before the first round and are not timed.

Last lines:
    guest-fio static seconds=<mean> [lo, hi] s n=<rounds>
    guest-fio debian seconds=<mean> [lo, hi] s n=<rounds>
    guest-fio ratio static/debian=<geometric mean> [lo, hi] n=<rounds>

    bench/run guest-fio [--max-rounds N] [--target 0.05] [--budget S]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from figures import Busy, add_round_arguments, print_side_by_side, ratio_figure, stop_on_signals, stopping, until_narrow
from vm_boot import one_start

from iolab.core.paths import cache_dir
from iolab.core.resources import Ledger
from iolab.native import guest_fio
from iolab.vm import guest_image

BUILDS = ("static-minimal", "debian")


def shadow_cache(real: Path, into: Path) -> Path:
    """A cache with every entry of `real` but the static fio build: images and saved states are
    shared (content-addressed), the guest's fio falls back to Debian's."""
    for entry in real.iterdir():
        if entry.name != "guest-fio":
            (into / entry.name).symlink_to(entry)
    return into


def start(ledger: Ledger, caches: dict[str, Path], build: str) -> tuple[float, float]:
    os.environ["IOLAB_CACHE"] = str(caches[build])
    got = guest_fio.for_guest()
    if got.build != build:
        raise SystemExit(f"asked for the {build} fio, the guest would carry {got.build}: {got.why}")
    total, ready, _, _ = one_start(ledger, "restore", "virtio-blk")
    return total, ready


def main() -> None:
    stop_on_signals()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_round_arguments(ap, max_rounds=15, target=0.05, budget=900)
    args = ap.parse_args()
    if args.max_rounds < 5:
        ap.error("at least 5 rounds")
    real = cache_dir()
    try:
        guest_fio.installed()
    except guest_fio.CapabilityMissing as exc:
        raise SystemExit(f"nothing to compare: {exc}") from None
    with tempfile.TemporaryDirectory(prefix="iolab-bench-guest-fio-") as tmp:
        caches = {"static-minimal": real, "debian": shadow_cache(real, Path(tmp))}
        t0 = time.monotonic()
        ledger = Ledger()
        for build in BUILDS:  # images and saved states, untimed
            os.environ["IOLAB_CACHE"] = str(caches[build])
            guest_image.build_guest()
            start(ledger, caches, build)
        print(f"both guest images and saved states ready in {time.monotonic() - t0:.2f} s", flush=True)
        times: dict[str, list[float]] = {b: [] for b in BUILDS}
        ratios: list[float] = []
        busy = Busy()

        def round_(i: int) -> None:
            got: dict[str, tuple[float, float]] = {}
            for build in (BUILDS if i % 2 == 0 else BUILDS[::-1]):
                busy.start()
                got[build] = start(ledger, caches, build)
                busy.stop()
                times[build].append(got[build][0])
            ratios.append(got["static-minimal"][0] / got["debian"][0])
            print(f"round {i + 1}: static first-io={got['static-minimal'][0]:.2f}s (agent "
                  f"{got['static-minimal'][1]:.2f}s) | debian first-io={got['debian'][0]:.2f}s (agent "
                  f"{got['debian'][1]:.2f}s) | ratio {ratios[-1]:.3f} (machine busy {busy.shares[-1]:.0%})",
                  flush=True)

        looks = stopping(args.max_rounds)
        fig = until_narrow(round_, lambda: ratio_figure("guest-fio ratio static/debian", ratios, args.target, looks),
                           max_n=args.max_rounds, budget_s=args.budget)
        os.environ["IOLAB_CACHE"] = str(real)
    print_side_by_side("guest-fio", [(b, b.split("-")[0], times[b]) for b in BUILDS], fig, busy, looks)

if __name__ == "__main__":
    main()
