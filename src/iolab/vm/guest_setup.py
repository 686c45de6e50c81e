"""What a freshly booted built-in guest is told to do before the trials: find the test
disk, make and mount its file system, set its network address.

Each step is a short shell script run through the guest agent (any `Executor` placed in
the guest); values reach the script as positional arguments, never pasted into its text.
A step that fails raises VmError with the command's output.
"""

from __future__ import annotations

from collections.abc import Callable

from iolab.core.exec import ExecRequest, ExecResult, Executor
from iolab.vm.cmdline import GUEST_NET
from iolab.vm.disk import GUEST_DEVICE
from iolab.vm.errors import VmError

GUEST_MOUNT = "/mnt/iolab"
DEVICE_WAIT_S = 30.0
MKFS_TIMEOUT_S = 300.0
NET_TIMEOUT_S = 60.0


def wait_for_disk(executor: Executor, bus: str, size: int, diagnose: Callable[[], str] = lambda: "") -> str:
    """The guest's name for the test disk on `bus`, once its driver has probed it (SCSI
    scans asynchronously); refused unless it has exactly `size` bytes."""
    dev = GUEST_DEVICE[bus]
    script = ('i=0; while [ ! -e "/sys/block/$1/size" ] && [ $i -lt "$2" ]; do sleep 0.1; i=$((i+1)); done; '
              'cat "/sys/block/$1/size"')
    res = executor.run(ExecRequest(["sh", "-c", script, "sh", dev, str(int(DEVICE_WAIT_S * 10))],
                                   timeout_s=DEVICE_WAIT_S + 10))
    if res.returncode != 0:
        listing = executor.run(ExecRequest(["ls", "/sys/block"], timeout_s=10)).stdout.split()
        raise VmError(f"the test disk did not appear as /dev/{dev} in the guest (bus={bus}); "
                      f"guest block devices: {listing}\n{diagnose()}")
    sectors = int(res.stdout.split()[0])
    if sectors * 512 != size:
        raise VmError(f"/dev/{dev} in the guest has {sectors * 512} bytes, expected {size}")
    return dev


def make_ext4(executor: Executor, dev: str, mount: str = GUEST_MOUNT) -> str:
    """ext4 on /dev/<dev>, initialised now (no lazy init writing behind the trials), mounted."""
    script = ('/usr/sbin/mke2fs -q -F -t ext4 -E lazy_itable_init=0,lazy_journal_init=0 "/dev/$1" && '
              'mkdir -p "$2" && mount -t ext4 "/dev/$1" "$2"')
    check(executor.run(ExecRequest(["sh", "-c", script, "sh", dev, mount], timeout_s=MKFS_TIMEOUT_S)),
          f"making ext4 on /dev/{dev} in the guest")
    return mount


def configure_network(executor: Executor) -> None:
    """Static address on slirp's fixed plan (no DHCP client needed, no wait)."""
    script = ('ip link set lo up && ip link set eth0 up && ip addr add "$1" dev eth0 && '
              'ip route add default via "$2"')
    check(executor.run(ExecRequest(["sh", "-c", script, "sh", GUEST_NET["guest"], GUEST_NET["gateway"]],
                                   timeout_s=NET_TIMEOUT_S)), "configuring the guest network")


def check(res: ExecResult, what: str) -> None:
    if res.returncode != 0:
        raise VmError(f"{what} failed (rc {res.returncode}): {res.tail()}")
