"""virtio's spec: the iozone workload on the host (ext4 on the scratch loop device) and in a guest
per disk bus (ext4 on the virtual disk, whose image sits on a scratch loop device of its own), and
below the guests the host-side layers of a virtual disk, each measured natively: the loop device
(fio), QEMU's block layer on that device (qemu-img bench, raw) and on a raw and a qcow2 image file
in the host's ext4 (qemu-img bench). A workload table names the targets it runs on."""

from __future__ import annotations

from typing import Any

from iolab.studies.iozone import spec as iozone

NAME = "virtio"
SUMMARY = ("R1: host vs QEMU guests (virtio-blk, ide; nvme, virtio-scsi, ahci), iozone tests, ratio vs host; "
           "the host-side layers (device, QEMU raw, qcow2) measured natively")
MAIN_BUSES = ["virtio-blk", "ide"]
EXTRA_BUSES = ["nvme", "virtio-scsi", "ahci"]
# --quick measures the rows of R1's table (host, virtio-blk, emulated IDE), the systems its claims
# read; the extra buses are iolab's addition, in the full study. Under TCG a guest row costs
# ~50 s of emulation per bus in --quick, and no claim reads the extra buses.
QUICK_BUSES = MAIN_BUSES
QUICK_TESTS = ["write", "read", "randread"]
QUICK_RECORDS = ["4k", "4m"]

HOST_TARGET = "host"          # ext4 on a scratch loop device: iozone's host row, the image-file layers
DEVICE_TARGET = "host-dev"    # a scratch loop device without filesystem: the device and QEMU-on-device layers
# The layers are sequential (qemu-img bench knows no other pattern), one request in flight like
# iozone, with the guests' disk settings: cache=none (O_DIRECT), aio=threads.
LAYER_TESTS = ["write", "read"]
LAYER_CACHE, LAYER_AIO, LAYER_DEPTH = "none", "threads", 1
# Bytes one layer trial moves, per record size: enough requests that qemu-img's millisecond
# clock and the trial's set-up stay small next to the time measured.
LAYER_BYTES_QUICK = {"4k": "16M", "4m": "128M"}
LAYER_BYTES = {"4k": "64M", "4m": "256M", "16m": "256M"}


def build(quick: bool) -> dict[str, Any]:
    """--quick keeps every row of R1's table (host, virtio-blk, IDE) but fewer tests and records,
    and leaves the extra buses to the full study: under TCG each guest trial costs seconds of
    emulation. The layer rows are host-only and cheap: --quick keeps them all, raw and qcow2."""
    file_size = "8M" if quick else "100M"
    guest = {"kind": "qemu", "format": "raw", "cache": LAYER_CACHE, "aio": LAYER_AIO, "guest_fs": "ext4",
             "disk_size": "128M" if quick else "256M", "memory": "512M", "prefill": False}
    buses = buses_of(quick)
    return {
        "study": {"name": NAME, "analysis": NAME, "repetitions": 3, "max_repetitions": 3 if quick else 6,
                  "ci_target": 0.05, "description": SUMMARY},
        "targets": [{"name": HOST_TARGET, "kind": "loop", "size": "256M" if quick else "512M", "filesystem": "ext4"},
                    {"name": DEVICE_TARGET, "kind": "loop", "size": "256M" if quick else "512M"}]
        + [dict(guest, name=bus, bus=bus) for bus in buses],
        "workloads": iozone_workloads(quick, [HOST_TARGET, *buses], file_size) + layer_workloads(quick),
    }


def buses_of(quick: bool) -> list[str]:
    """The guest buses the study runs: R1's two in --quick, every bus in the full study."""
    return list(QUICK_BUSES if quick else MAIN_BUSES + EXTRA_BUSES)


def iozone_workloads(quick: bool, targets: list[str], file_size: str) -> list[dict[str, Any]]:
    """iozone's tables (sized as iozone sizes them), on the host and in every guest."""
    tables = iozone.workloads(QUICK_TESTS if quick else iozone.TESTS, QUICK_RECORDS if quick else iozone.RECORDS,
                              file_size)
    named = tables.get("workloads") or [dict(tables["workload"], name="iozone")]
    return [dict(t, targets=targets) for t in named]


def layer_workloads(quick: bool) -> list[dict[str, Any]]:
    """Per record size: fio on the bare device, qemu-img bench raw on that same device, and
    qemu-img bench on a fresh raw and qcow2 image file in the host's ext4 (the guests' images
    are raw files in ext4 too), all moving the same bytes with the same pattern."""
    out: list[dict[str, Any]] = []
    for rec, size in (LAYER_BYTES_QUICK if quick else LAYER_BYTES).items():
        same = {"rw": LAYER_TESTS, "bs": rec, "size": size}
        qemu = {"kind": "qemu_img_bench", "cache": LAYER_CACHE, "aio": LAYER_AIO, "depth": LAYER_DEPTH, **same}
        out += [
            {"name": f"layer-device-{rec}", "kind": "fio", "targets": [DEVICE_TARGET], **same,
             "iodepth": LAYER_DEPTH, "ioengine": "psync", "direct": True, "end_fsync": False, "runtime": "none"},
            {"name": f"layer-qemu-device-{rec}", "targets": [DEVICE_TARGET], "format": "raw", **qemu},
            {"name": f"layer-qemu-file-{rec}", "targets": [HOST_TARGET], "format": ["raw", "qcow2"], **qemu},
        ]
    return out
