"""Guest start to first I/O, restored against booted, side by side in one run: QEMU start until
the agent has finished a tiny fio read on the test disk, for a guest restored from the saved
state of its shape (vm/restore.py: the disk hot-plugged, the clock set) and for the same
guest booted from scratch (`boot = "cold"`). Each round starts one of each, in alternating
order (cold first in even rounds), so drift of the machine's load hits both alike; the ratio
of a round is restored / cold. Rounds go on until the ratio's 95 % CI is within ±--target
(at least 5 rounds, at most --max-rounds, within --budget seconds), the interval calibrated
for that stopping rule (figures.py). The saved state is made (or found) before the first
round and is not timed, like the guest image.

Last lines:
    vm-boot restored seconds=<mean> [lo, hi] s n=<rounds>
    vm-boot cold seconds=<mean> [lo, hi] s n=<rounds>
    vm-boot ratio restored/cold=<geometric mean> [lo, hi] n=<rounds>
Target (issue 28): restored <= 1.0 s under TCG.

    bench/run vm-boot [--max-rounds N] [--target 0.05] [--budget S] [--bus virtio-blk]
"""

from __future__ import annotations

import argparse
import time

from figures import Busy, add_round_arguments, print_side_by_side, ratio_figure, stop_on_signals, stopping, until_narrow

from iolab.core.exec import ExecRequest
from iolab.core.resources import Ledger
from iolab.targets.qemu_guest import QemuGuestParams, QemuGuestTarget
from iolab.vm import guest_image
from iolab.vm.hotplug import HOTPLUG_BUSES


def read_cmd(path: str) -> list[str]:
    return ["fio", "--name=first-io", f"--filename={path}", "--rw=read", "--bs=4k", "--size=64k",
            "--direct=1", "--output-format=json"]


def one_start(ledger: Ledger, boot: str, bus: str) -> tuple[float, float, str, str]:
    """(seconds from QEMU start to the end of the first read, of which to the agent's answer,
    accel, how it came up)."""
    target = QemuGuestTarget(QemuGuestParams.model_validate({"disk_size": "64M", "bus": bus, "boot": boot}), ledger)
    try:
        placement = target.setup()
        assert placement.path is not None
        res = placement.executor.run(ExecRequest(read_cmd(placement.path), timeout_s=60))
        done = time.monotonic()
        if res.returncode != 0:
            raise SystemExit(f"first read failed: {res.tail()}")
        vm = target.vm
        assert vm is not None and vm.started_at is not None and vm.boot_seconds is not None
        mode = placement.manifest["boot"]["mode"]
        if mode != ("booted" if boot == "cold" else "restored"):
            raise SystemExit(f"asked for boot={boot}, got a {mode} guest: {placement.manifest['boot']}")
        return done - vm.started_at, vm.boot_seconds, placement.manifest["accel"], mode
    finally:
        target.teardown()


def main() -> None:
    stop_on_signals()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_round_arguments(ap, max_rounds=15, target=0.05, budget=900)
    ap.add_argument("--bus", default="virtio-blk", choices=HOTPLUG_BUSES, help="the test disk's bus (virtio-blk)")
    args = ap.parse_args()
    if args.max_rounds < 5:
        ap.error("at least 5 rounds")
    t0 = time.monotonic()
    guest_image.build_guest()  # build (or find) the cached image outside the timed part
    ledger = Ledger()
    _, _, _, mode = one_start(ledger, "restore", args.bus)  # makes (or finds) the saved state, untimed
    print(f"guest image and saved state ready in {time.monotonic() - t0:.2f} s ({mode})", flush=True)
    times: dict[str, list[float]] = {"restore": [], "cold": []}
    ratios: list[float] = []
    busy = Busy()

    def round_(i: int) -> None:
        got: dict[str, tuple[float, float]] = {}
        for boot in (("cold", "restore") if i % 2 == 0 else ("restore", "cold")):
            busy.start()
            total, ready, accel, _ = one_start(ledger, boot, args.bus)
            busy.stop()
            got[boot] = (total, ready)
            times[boot].append(total)
        ratios.append(got["restore"][0] / got["cold"][0])
        print(f"round {i + 1}: accel={accel} cold first-io={got['cold'][0]:.2f}s (agent {got['cold'][1]:.2f}s) | "
              f"restored first-io={got['restore'][0]:.2f}s (agent {got['restore'][1]:.2f}s) | "
              f"ratio {ratios[-1]:.3f} (machine busy {busy.shares[-1]:.0%})", flush=True)

    looks = stopping(args.max_rounds)
    fig = until_narrow(round_, lambda: ratio_figure("vm-boot ratio restored/cold", ratios, args.target, looks),
                       max_n=args.max_rounds, budget_s=args.budget)
    print_side_by_side("vm-boot", [("restored", "restored", times["restore"]), ("cold", "cold", times["cold"])],
                       fig, busy, looks)

if __name__ == "__main__":
    main()
