"""QEMU's side of a virtio disk's queues, for the diagnosis of guest I/O that does not complete.

When a command in the guest times out with requests in flight, the guest alone cannot say
which layer holds them. QEMU can (QMP `x-query-virtio-queue-status`, QEMU 7.2 and later):
per queue, how many requests QEMU took (`last-avail-idx`) and still works on (`inuse`), how
many it completed (`used-idx`) and up to where it told the guest (`signalled-used`). How far
the guest posted is read from the ring itself, in guest memory (the avail ring's index, 2
bytes after `vring-avail`, through HMP `xp`): QEMU's `shadow-avail-idx` is only its last
look, and a request the guest posted without a notification never moved it. Read together
with the guest's in-flight count, that separates the three ways a request stalls:

* QEMU still holds it (`inuse` > 0): the host side (the image's storage, QEMU's I/O threads);
* the guest posted it and QEMU never took it (avail ahead of last-avail): a lost notification;
* QEMU completed everything it took (used = last-avail, inuse 0) yet the guest waits: the
  completion (its interrupt) was lost on the way into the guest.

Only the disk's own devices are read (the agent's virtio-serial is not the disk). An `x-`
command may change between QEMU versions: any failure reads as "not available", never as
an error of the trial.
"""

from __future__ import annotations

from typing import Any

from qemu.qmp.legacy import QEMUMonitorProtocol

from iolab.vm.disk import DISK_ID

NOT_DISK = ("virtio-serial",)  # the guest agent's channel


def queue_report(qmp: QEMUMonitorProtocol, device: str = DISK_ID) -> str:
    """One line per queue of the disk's virtio devices, each with what it shows; "" when QEMU
    has no such query or the disk is not virtio (NVMe, IDE, AHCI)."""
    def ask(name: str, **args: Any) -> Any:  # answers are JSON: lists and dicts
        return qmp.cmd(name, **args)

    try:
        devices = [d for d in ask("x-query-virtio")
                   if d.get("name") not in NOT_DISK and _is_disk(d.get("path", ""), device)]
        lines = []
        for d in devices:
            queues = int(ask("x-query-virtio-status", path=d["path"]).get("num-vqs", 1))
            for q in range(queues):
                st = ask("x-query-virtio-queue-status", path=d["path"], queue=q)
                lines.append(describe(d["name"], q, st, _guest_avail(qmp, st)))
        return "\n".join(line for line in lines if line)
    except Exception as exc:  # an x- command, a QEMU gone or busy: the diagnosis is best effort
        return f"QEMU's virtio queue status not available: {exc}"


def _is_disk(path: str, device: str) -> bool:
    """virtio-blk is the disk itself (…/testdisk/virtio-backend); virtio-scsi its controller
    (…/scsi0/virtio-backend), which carries the disk."""
    return f"/{device}/" in path or "/scsi" in path


def _guest_avail(qmp: QEMUMonitorProtocol, st: dict[str, Any]) -> int | None:
    """The avail ring's index as the guest last wrote it (a 16-bit word 2 bytes into the ring)."""
    try:
        out = qmp.cmd("human-monitor-command", **{"command-line": f"xp /1hx {int(st['vring-avail']) + 2:#x}"})
        return int(str(out).split(":")[1].split()[0], 16)
    except Exception:
        return None


def describe(name: str, queue: int, st: dict[str, Any], guest_avail: int | None = None) -> str:
    """One queue's counters and the layer they point at; "" for a queue never used. `guest_avail`:
    the ring's index in guest memory (None: QEMU's own last look, shadow-avail-idx, stands in)."""
    shadow, taken = int(st.get("shadow-avail-idx", 0)), int(st.get("last-avail-idx", 0))
    avail = shadow if guest_avail is None else guest_avail
    inuse, used = int(st.get("inuse", 0)), int(st.get("used-idx", 0))
    signalled = st.get("signalled-used") if st.get("signalled-used-valid") else None
    if avail == 0 and taken == 0 and used == 0:
        return ""
    look = "" if guest_avail is not None else " (QEMU's last look)"
    counts = (f"{name} queue {queue}: guest posted {avail}{look}, "
              f"QEMU took {taken}, works on {inuse}, completed {used}"
              + (f", signalled {signalled}" if signalled is not None else ""))
    if inuse > 0:
        why = f"QEMU still holds {inuse} request(s): the host side (the image's storage or QEMU's I/O) has not finished"
    elif (avail - taken) % 65536:
        why = f"{(avail - taken) % 65536} posted request(s) QEMU never took: a lost notification (kick)"
    else:
        why = ("QEMU completed every request the guest posted: if the guest still counts requests in flight, "
               "their completion (the interrupt) was lost on the way into the guest")
    return f"{counts} -> {why}"
