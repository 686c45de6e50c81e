"""Boot-to-first-I/O of the built-in guest: QEMU start until the agent has finished a tiny fio
read on the test disk. Boots until the 95 % CI of the mean boot time is within ±2 % (at
least 5, at most --max-boots, within --budget seconds), and prints it last as
`vm-boot seconds=<mean> [lo, hi] s n=<boots>`. Target: <= 10 s under TCG.

    bench/run vm-boot [--max-boots N] [--target 0.02] [--budget S]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from figures import Busy, mean_figure, stop_on_signals, stopping, until_narrow

from iolab.core.exec import ExecRequest
from iolab.core.resources import Ledger
from iolab.targets.qemu_guest import QemuGuestParams, QemuGuestTarget
from iolab.vm import guest_image

READ = ["fio", "--name=first-io", "--filename=/dev/vda", "--rw=read", "--bs=4k", "--size=64k",
        "--direct=1", "--output-format=json"]


def one_boot(ledger: Ledger) -> tuple[float, float, str]:
    """(seconds from QEMU start to the end of the first read, of which boot to agent hello, accel)."""
    target = QemuGuestTarget(QemuGuestParams.model_validate({"disk_size": "64M"}), ledger)
    try:
        placement = target.setup()
        res = placement.executor.run(ExecRequest(READ, timeout_s=60))
        done = time.monotonic()
        if res.returncode != 0:
            raise SystemExit(f"first read failed: {res.tail()}")
        vm = target.vm
        assert vm is not None and vm.started_at is not None and vm.boot_seconds is not None
        return done - vm.started_at, vm.boot_seconds, placement.manifest["accel"]
    finally:
        target.teardown()


def main() -> None:
    stop_on_signals()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("max_boots_pos", nargs="?", type=int, help=argparse.SUPPRESS)  # old form: vm_boot.py N
    ap.add_argument("--max-boots", type=int, default=15, help="at most this many boots (default 15; at least 5)")
    ap.add_argument("--target", type=float, default=0.02, help="relative 95%% CI half-width to reach (0.02)")
    ap.add_argument("--budget", type=float, default=600, help="seconds before giving up on the width (600)")
    args = ap.parse_args()
    max_boots = args.max_boots_pos or args.max_boots
    if max_boots < 5:
        ap.error("at least 5 boots")
    t0 = time.monotonic()
    guest_image.build_guest()  # build (or find) the cached image outside the timed part
    print(f"guest image ready in {time.monotonic() - t0:.2f} s", flush=True)
    ledger = Ledger()
    times: list[float] = []
    busy = Busy()

    def boot(i: int) -> None:
        busy.start()
        total, hello, accel = one_boot(ledger)
        busy.stop()
        times.append(total)
        print(f"run {i + 1}: accel={accel} agent-hello={hello:.2f}s first-io={total:.2f}s "
              f"(machine busy {busy.shares[-1]:.0%})", flush=True)

    fig = until_narrow(boot, lambda: mean_figure("vm-boot seconds", times, "s", args.target, stopping(max_boots)),
                       max_n=max_boots, budget_s=args.budget)
    why = (f"the machine's CPUs were {busy.mean():.0%} busy on average, load {os.getloadavg()[0]:.1f} on "
           f"{os.cpu_count()} CPUs")
    print(f"median {statistics.median(times):.2f} s, min {min(times):.2f} s, max {max(times):.2f} s; "
          f"{fig.verdict(why)}")
    print(fig.line())


if __name__ == "__main__":
    main()
