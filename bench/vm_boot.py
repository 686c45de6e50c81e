"""Boot-to-first-I/O of the built-in guest: QEMU start until the agent has finished a tiny
fio read on the test disk. Boots N times (default 5) and prints the median last, as
`vm-boot seconds=<median>`. Target: <= 10 s under TCG.

    .venv/bin/python bench/vm_boot.py [N]
"""

from __future__ import annotations

import statistics
import sys
import time

from iolab.core.exec import ExecRequest
from iolab.core.resources import Ledger
from iolab.targets.qemu_guest import QemuGuestParams, QemuGuestTarget
from iolab.vm import guest_image

READ = ["fio", "--name=first-io", "--filename=/dev/vda", "--rw=read", "--bs=4k", "--size=64k",
        "--direct=1", "--output-format=json"]


def one_boot(ledger: Ledger) -> tuple[float, float, str]:
    """(seconds from QEMU start to the end of the first read, of which boot to agent hello, accel)."""
    target = QemuGuestTarget(QemuGuestParams(disk_size="64M"), ledger)
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
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    t0 = time.monotonic()
    guest_image.build_guest()  # build (or find) the cached image outside the timed part
    print(f"guest image ready in {time.monotonic() - t0:.2f} s", flush=True)
    ledger = Ledger()
    times = []
    for i in range(1, runs + 1):
        total, hello, accel = one_boot(ledger)
        times.append(total)
        print(f"run {i}/{runs}: accel={accel} agent-hello={hello:.2f}s first-io={total:.2f}s", flush=True)
    print(f"vm-boot seconds={statistics.median(times):.2f}")


if __name__ == "__main__":
    main()
