"""The test disk's axes (bus, format, cache, aio, ...) and the key of an encrypted disk.

Pure values, checked before anything is created: `DiskSpec.problems()` names each
combination QEMU would refuse or silently ignore, so a spec fails with a reason instead
of a guest that does not boot. The names the command line, the probes and the guest use
for the disk (node names, device id, guest device per bus) live here so they agree.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from typing import Literal

Bus = Literal["virtio-blk", "virtio-scsi", "ide", "ahci", "nvme"]
Format = Literal["raw", "qcow2"]
CacheMode = Literal["none", "writeback", "writethrough", "directsync", "unsafe"]
Aio = Literal["threads", "native", "io_uring"]
Prealloc = Literal["off", "metadata", "falloc", "full"]
Encrypt = Literal["none", "luks"]

BUSES: tuple[str, ...] = ("virtio-blk", "virtio-scsi", "ide", "ahci", "nvme")
DISK_ID = "testdisk"  # the -device id: QMP query-blockstats names the disk by it
DISK_SERIAL = "iolab-test"
FORMAT_NODE = "disk0"
FILE_NODE = "disk0-file"
SECRET_ID = "disk0-key"
# PBKDF2 time to unlock the LUKS key slot (QEMU's default is 2000 ms, paid at every open);
# a lab image needs no brute-force resistance, and the cost is outside every measurement.
LUKS_ITER_TIME_MS = 100
# The block device name each bus gives the (only) test disk in the built-in guest.
GUEST_DEVICE: dict[str, str] = {
    "virtio-blk": "vda", "virtio-scsi": "sda", "ide": "sda", "ahci": "sda", "nvme": "nvme0n1",
}


@dataclass(frozen=True)
class CacheFlags:
    """What one `cache=` shorthand means (QEMU's table in qemu-options.hx, -drive cache=)."""

    direct: bool  # cache.direct: O_DIRECT on the image file
    no_flush: bool  # cache.no-flush: guest flushes are ignored
    write_cache: bool  # device write-cache: the guest sees a volatile cache and sends flushes


CACHE_MODES: dict[str, CacheFlags] = {
    "writeback": CacheFlags(direct=False, no_flush=False, write_cache=True),
    "none": CacheFlags(direct=True, no_flush=False, write_cache=True),
    "writethrough": CacheFlags(direct=False, no_flush=False, write_cache=False),
    "directsync": CacheFlags(direct=True, no_flush=False, write_cache=False),
    "unsafe": CacheFlags(direct=False, no_flush=True, write_cache=True),
}


@dataclass(frozen=True)
class DiskSpec:
    """The test disk's axes. validate() rejects combinations QEMU would refuse or ignore."""

    size: int
    bus: Bus = "virtio-blk"
    format: Format = "raw"
    cache: CacheMode = "none"
    aio: Aio = "threads"
    iothread: bool = False
    cluster_size: int | None = None
    preallocation: Prealloc = "off"
    lazy_refcounts: bool = False
    encrypt: Encrypt = "none"  # luks: qcow2's built-in LUKS; the key comes from a Secret (never argv or disk)

    def validate(self) -> None:
        for problem in self.problems():
            raise ValueError(problem)

    def problems(self) -> list[str]:
        out = []
        if self.bus not in BUSES:
            out.append(f"bus must be one of {', '.join(BUSES)}, got {self.bus!r}")
        if self.cache not in CACHE_MODES:
            out.append(f"cache must be one of {', '.join(CACHE_MODES)}, got {self.cache!r}")
        if self.size < (1 << 20) or self.size % 512:
            out.append(f"disk size must be at least 1M and a multiple of 512 bytes, got {self.size}")
        if self.aio == "native" and self.cache in CACHE_MODES and not CACHE_MODES[self.cache].direct:
            out.append(f"aio=native needs cache.direct=on (cache=none or cache=directsync); "
                       f"cache={self.cache} opens the image without O_DIRECT, and QEMU refuses it")
        if self.iothread and self.bus not in ("virtio-blk", "virtio-scsi"):
            out.append(f"iothread is supported for virtio-blk and virtio-scsi only, not bus={self.bus}")
        if self.format != "qcow2":
            if self.cluster_size is not None:
                out.append("cluster_size applies to format=qcow2 only")
            if self.lazy_refcounts:
                out.append("lazy_refcounts applies to format=qcow2 only")
            if self.preallocation == "metadata":
                out.append("preallocation=metadata applies to format=qcow2 only (raw: off, falloc, full)")
            if self.encrypt != "none":
                out.append("encrypt=luks applies to format=qcow2 only (qcow2 with LUKS encryption)")
        cs = self.cluster_size
        if cs is not None and (cs < 512 or cs > (2 << 20) or cs & (cs - 1)):
            out.append(f"cluster_size must be a power of two between 512 and 2M, got {cs}")
        return out

    @property
    def flags(self) -> CacheFlags:
        return CACHE_MODES[self.cache]

    def create_options(self) -> list[str]:
        """qemu-img create -o items (values are validated ints and enums)."""
        opts = [f"preallocation={self.preallocation}"]
        if self.format == "qcow2":
            if self.cluster_size is not None:
                opts.append(f"cluster_size={self.cluster_size}")
            opts.append(f"lazy_refcounts={'on' if self.lazy_refcounts else 'off'}")
            if self.encrypt == "luks":
                opts += ["encrypt.format=luks", f"encrypt.key-secret={SECRET_ID}",
                         f"encrypt.iter-time={LUKS_ITER_TIME_MS}"]
        return opts


class Secret:
    """A disk key that never touches the disk or a process list.

    QEMU and qemu-img read it from an inherited pipe (`-object secret,file=/dev/fd/N`):
    the bytes sit in the pipe buffer until the child reads them; argv shows only the fd.
    """

    def __init__(self, data: bytes | None = None):
        self._data = data if data is not None else secrets.token_urlsafe(32).encode()

    def open_fd(self) -> int:
        """A fresh read end holding the key (close it after the child started)."""
        r, w = os.pipe()
        try:
            os.write(w, self._data)
        finally:
            os.close(w)
        return r

    def reveal(self) -> bytes:
        """The key itself, for QMP object-add when a restored guest gets its disk (vm/hotplug.py):
        it then travels over QEMU's monitor socket, still never on a disk or a command line."""
        return self._data

    @staticmethod
    def object_arg(fd: int) -> str:
        return f"secret,id={SECRET_ID},file=/dev/fd/{int(fd)}"
