"""Attaching the test disk to a running (restored, still paused) guest through QMP, and which
buses allow it.

A restored guest was saved without a disk; its trial's disk is added with the same objects
and devices a boot would put on the command line (`cmdline.blockdev_json`, `disk_devices`),
as QMP `object-add` / `blockdev-add` / `device_add`, so booted and restored guests get the
same disk. What QEMU 7.2 allows on `-machine pc` (i440fx, ACPI PCI hot-plug; tried on it):

| bus | hot-plug | how the guest sees it |
|---|---|---|
| virtio-blk | yes: a PCI device | ACPI hot-plug event, virtio_blk probes it |
| nvme | yes: a PCI device | ACPI hot-plug event, nvme probes it |
| virtio-scsi | yes: the controller (PCI), then scsi-hd on its bus | the controller's probe scans its bus |
| ide | no: `ide-hd` on the PIIX IDE bus ("Bus 'ide.0' does not support hotplugging") | — |
| ahci | no: the controller can be added, but not `ide-hd` on its ports (an IDE bus) | — |

On q35 the same devices would need a free `pcie-root-port` each (PCIe native hot-plug);
iolab's guests are `-machine pc`.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from qemu.qmp.legacy import QEMUMonitorProtocol

from iolab.vm.cmdline import blockdev_json, disk_devices
from iolab.vm.disk import SECRET_ID, DiskSpec, Secret

HOTPLUG_BUSES: tuple[str, ...] = ("virtio-blk", "virtio-scsi", "nvme")
NO_HOTPLUG: dict[str, str] = {
    "ide": "QEMU cannot hot-plug a disk on IDE (ide-hd on the PIIX IDE bus has no hot-plug), so an ide "
           "guest cannot be restored from a saved state without its disk",
    "ahci": "QEMU cannot hot-plug a disk on AHCI (ide-hd on an AHCI port has no hot-plug), so an ahci "
            "guest cannot be restored from a saved state without its disk",
}


def hotplug_problem(disk: DiskSpec | None) -> str | None:
    """Why this disk cannot be attached to a running guest (None: it can, or there is no disk)."""
    if disk is None or disk.bus in HOTPLUG_BUSES:
        return None
    return NO_HOTPLUG.get(disk.bus, f"no hot-plug known for bus {disk.bus!r}")


def attach_disk(qmp: QEMUMonitorProtocol, disk: DiskSpec, image: Path,
                secret: Secret | None) -> list[dict[str, Any]]:
    """The key (encrypt=luks), the block node and the bus devices, in the order a boot creates
    them; returns the commands run (the key's data left out), for the manifest.

    The key travels as `object-add` data over QMP's unix socket (in the target's private run
    directory): never on a disk or a command line. The library logs QMP messages at DEBUG, so
    DEBUG logging is off for that one command."""
    disk.validate()
    problem = hotplug_problem(disk)
    if problem:
        raise ValueError(problem)
    done: list[dict[str, Any]] = []
    if disk.encrypt != "none":
        if secret is None:
            raise ValueError("an encrypted disk needs its key (Secret)")
        key = {"qom-type": "secret", "id": SECRET_ID, "format": "base64"}
        with _no_debug_log():
            qmp.cmd("object-add", **key, data=base64.b64encode(secret.reveal()).decode())
        done.append({"execute": "object-add", "arguments": {**key, "data": "(the key, not recorded)"}})
    commands: list[tuple[str, dict[str, Any]]] = [("blockdev-add", blockdev_json(disk, image))]
    commands += [("object-add" if kind == "object" else "device_add", obj) for kind, obj in disk_devices(disk)]
    for name, args in commands:
        qmp.cmd(name, **args)
        done.append({"execute": name, "arguments": args})
    return done


@contextmanager
def _no_debug_log() -> Iterator[None]:
    previous = logging.root.manager.disable
    logging.disable(max(previous, logging.DEBUG))
    try:
        yield
    finally:
        logging.disable(previous)
