"""What a freshly booted (or restored) built-in guest is told to do before the trials: find the
test disk, make and mount its file system, set its network address.

Each step is a short shell script run through the guest agent (any `Executor` placed in
the guest); values reach the script as positional arguments, never pasted into its text.
A step that fails raises VmError with the command's output.
"""

from __future__ import annotations

from collections.abc import Callable

from iolab.core.exec import ExecRequest, ExecResult, Executor
from iolab.vm.cmdline import GUEST_NET
from iolab.vm.disk import DISK_SERIAL, GUEST_DEVICE
from iolab.vm.errors import VmError

GUEST_MOUNT = "/mnt/iolab"
DEVICE_WAIT_S = 30.0
DEVICE_POLL_S = 0.03  # a restored guest's disk arrives within a few tenths of a second: poll finely
MKFS_TIMEOUT_S = 300.0
NET_TIMEOUT_S = 60.0


def wait_for_disk(executor: Executor, bus: str, size: int, diagnose: Callable[[], str] = lambda: "",
                  hotplugged: bool = False) -> str:
    """The guest's name for the test disk, once its driver has probed it (SCSI scans
    asynchronously, a hot-plugged disk arrives through an ACPI event); refused unless it has
    exactly `size` bytes.

    The disk is found by its serial (`iolab-test`: /sys/block/*/serial for virtio-blk,
    device/serial for nvme, the SCSI serial page device/vpd_pg80 for virtio-scsi, ide and ahci),
    so the guest learns the name its kernel gave the disk rather than iolab assuming one; the
    name each bus gives a sole disk (disk.GUEST_DEVICE) is taken only if no serial shows after
    2 s (a guest kernel without those attributes). A hot-plugged disk not seen after 5 s gets
    a PCI and SCSI rescan, in case the hot-plug event was lost."""
    # elapsed time from /proc/uptime in centiseconds (read, no fork): iterations slow down under load
    script = (
        'want=$1; dev=$2; limit=$3; rescan=$4; pause=$5; by_name=$6; rescan_at=$7; rescanned=0\n'
        'read u _ < /proc/uptime; t0=${u%.*}${u#*.}; t=0\n'
        'while [ $t -lt "$limit" ]; do\n'
        '  for b in /sys/block/*; do\n'
        '    for f in "$b/serial" "$b/device/serial" "$b/device/vpd_pg80"; do\n'
        '      [ -r "$f" ] || continue\n'
        '      s=$(tr -cd "A-Za-z0-9._-" < "$f")\n'
        '      case "$s" in *"$want") echo "${b##*/}"; cat "$b/size"; exit 0;; esac\n'
        '    done\n'
        '  done\n'
        '  if [ $t -ge "$by_name" ] && [ -e "/sys/block/$dev/size" ]; then\n'
        '    echo "$dev"; cat "/sys/block/$dev/size"; exit 0\n'
        '  fi\n'
        '  if [ "$rescan" = 1 ] && [ $rescanned = 0 ] && [ $t -ge "$rescan_at" ]; then\n'
        '    rescanned=1; echo 1 > /sys/bus/pci/rescan 2>/dev/null\n'
        '    for h in /sys/class/scsi_host/host*/scan; do [ -e "$h" ] && echo "- - -" > "$h"; done\n'
        '  fi\n'
        '  sleep "$pause"; read u _ < /proc/uptime; t=$(( ${u%.*}${u#*.} - t0 ))\n'
        'done\n'
        'exit 1\n')
    cs = lambda seconds: str(int(seconds * 100))  # noqa: E731
    res = executor.run(ExecRequest(["sh", "-c", script, "sh", DISK_SERIAL, GUEST_DEVICE[bus], cs(DEVICE_WAIT_S),
                                    "1" if hotplugged else "0", str(DEVICE_POLL_S), cs(2.0), cs(5.0)],
                                   timeout_s=DEVICE_WAIT_S + 30))
    if res.returncode != 0:
        listing = executor.run(ExecRequest(["ls", "/sys/block"], timeout_s=10)).stdout.split()
        raise VmError(f"the test disk (serial {DISK_SERIAL}, bus={bus}) did not appear in the guest"
                      f"{' after hot-plug and a rescan' if hotplugged else ''}; guest block devices: "
                      f"{listing}\n{diagnose()}")
    dev, sectors_text = res.stdout.split()[:2]
    sectors = int(sectors_text)
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
