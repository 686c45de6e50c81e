"""The QEMU command line: what a guest is (VmSpec, NetSpec) and the argv that boots it.

Every value on the command line comes from a validated field: enums, integers, and paths
iolab created. -blockdev and -device are given as JSON objects so no value is ever parsed
as a QemuOpts list (a comma in a path cannot inject an option); the few QemuOpts paths
left (sockets, console) have commas doubled. Pure, except for finding the QEMU binary.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from iolab.core import children, paths
from iolab.core.confine import Confinement
from iolab.core.errors import CapabilityMissing
from iolab.vm.disk import (
    DISK_ID,
    DISK_SERIAL,
    FILE_NODE,
    FORMAT_NODE,
    SECRET_ID,
    DiskSpec,
    Secret,
)

Accel = Literal["kvm", "tcg"]
Network = Literal["none", "user"]

AGENT_PORT = "org.iolab.agent"
GUEST_NET = {"guest": "10.0.2.15/24", "host": "10.0.2.2", "gateway": "10.0.2.2"}  # slirp's fixed plan
GUEST_SERVER_PORT = 5201  # a guest's server port, forwarded from a free host port (iperf3's default)
KERNEL_ARGS = ("console=ttyS0", "panic=-1", "edd=off")
# QEMU's own seccomp filter: no obsolete syscalls, no setuid, no fork/exec (user networking
# needs neither), no changes of scheduling or priority. A filter QEMU checks per syscall: its
# cost is in the noise of a disk benchmark (bench/run overhead).
SANDBOX = ("-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny")
PEER_MEMORY_MB = 384


@dataclass(frozen=True)
class NetSpec:
    """User-mode networking (slirp): the guest is 10.0.2.15, the host's loopback is 10.0.2.2.

    hostfwd: (host port on 127.0.0.1, guest port) pairs, so the host or another guest can
    reach a server in this guest. Nothing leaves the machine unless a guest dials out.
    """

    hostfwd: tuple[tuple[int, int], ...] = ()

    def args(self) -> list[str]:
        fwd = "".join(f",hostfwd=tcp:127.0.0.1:{int(h)}-:{int(g)}" for h, g in self.hostfwd)
        return ["-netdev", f"user,id=net0,ipv6=off{fwd}",
                "-device", qemu_json({"driver": "virtio-net-pci", "netdev": "net0", "id": "nic0"})]


@dataclass(frozen=True)
class VmSpec:
    """One guest: its test disk (if any), kernel and initramfs, size, accelerator, NIC."""

    disk: DiskSpec | None  # None: a guest without a test disk (e.g. a network peer)
    image: Path | None
    kernel: Path
    initramfs: Path
    memory_mb: int = 512
    vcpus: int = 1
    accel: Accel = "tcg"
    cpu: str | None = None  # KVM only: the -cpu model the accel probe found to boot
    tag: str = "iolab-vm"
    # Module groups the built-in init loads (guest_image.MODULE_GROUPS); () = all of them.
    module_groups: tuple[str, ...] = ()
    net: NetSpec | None = None
    secret: Secret | None = None  # the key of an encrypt=luks disk


def peer_spec(spec: VmSpec, tag: str, host_port: int) -> VmSpec:
    """A diskless guest on a user network of its own, for guest-to-guest traffic: same
    kernel, initramfs and accelerator as `spec`, its server port forwarded from host_port."""
    return VmSpec(disk=None, image=None, kernel=spec.kernel, initramfs=spec.initramfs,
                  memory_mb=PEER_MEMORY_MB, vcpus=1, accel=spec.accel, cpu=spec.cpu, tag=tag,
                  module_groups=("net",), net=NetSpec(hostfwd=((host_port, GUEST_SERVER_PORT),)))


@dataclass(frozen=True)
class RunFiles:
    """Per-VM files: sockets and logs live in one private directory."""

    directory: Path

    @property
    def qmp(self) -> Path:
        return self.directory / "qmp.sock"

    @property
    def agent(self) -> Path:
        return self.directory / "agent.sock"

    @property
    def console(self) -> Path:
        return self.directory / "console.log"

    @property
    def stderr(self) -> Path:
        return self.directory / "qemu.stderr"


def opt_path(p: Path) -> str:
    """A path for a QemuOpts-style option: commas must be doubled, newlines refused."""
    s = str(p)
    if any(c in s for c in "\n\r\0"):
        raise ValueError(f"unusable path for QEMU: {s!r}")
    return s.replace(",", ",,")


def qemu_json(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"))


def blockdev_json(disk: DiskSpec, image: Path) -> dict[str, Any]:
    """Format node over a file node; cache flags on both (blockdev does not inherit them)."""
    cache = {"direct": disk.flags.direct, "no-flush": disk.flags.no_flush}
    file_node = {"driver": "file", "node-name": FILE_NODE, "filename": str(image),
                 "aio": disk.aio, "cache": cache}
    fmt: dict[str, Any] = {"driver": disk.format, "node-name": FORMAT_NODE, "cache": cache, "file": file_node}
    if disk.encrypt == "luks":
        fmt["encrypt"] = {"format": "luks", "key-secret": SECRET_ID}
    return fmt


def disk_devices(disk: DiskSpec) -> list[tuple[Literal["object", "device"], dict[str, Any]]]:
    """The objects and devices attaching the format node on the chosen bus, in order: the
    same list makes the -object/-device arguments of a boot and the QMP object-add/device_add
    of a restored guest (vm/restore.py), so both guests get the same disk."""
    wc = "on" if disk.flags.write_cache else "off"
    common = {"drive": FORMAT_NODE, "id": DISK_ID, "serial": DISK_SERIAL, "write-cache": wc}
    out: list[tuple[Literal["object", "device"], dict[str, Any]]] = []
    iothread = {"iothread": "iothread0"} if disk.iothread else {}
    if disk.iothread:
        out.append(("object", {"qom-type": "iothread", "id": "iothread0"}))
    if disk.bus == "virtio-blk":
        out.append(("device", {"driver": "virtio-blk-pci", **common, **iothread}))
    elif disk.bus == "virtio-scsi":
        out += [("device", {"driver": "virtio-scsi-pci", "id": "scsi0", **iothread}),
                ("device", {"driver": "scsi-hd", "bus": "scsi0.0", **common})]
    elif disk.bus == "ide":
        out.append(("device", {"driver": "ide-hd", "bus": "ide.0", **common}))
    elif disk.bus == "ahci":
        out += [("device", {"driver": "ahci", "id": "ahci0"}),
                ("device", {"driver": "ide-hd", "bus": "ahci0.0", **common})]
    elif disk.bus == "nvme":
        out.append(("device", {"driver": "nvme", **common}))
    else:
        raise ValueError(f"unknown bus {disk.bus!r}")
    return out


def device_args(disk: DiskSpec) -> list[str]:
    """-device (and -object) arguments attaching the format node on the chosen bus."""
    return [a for kind, obj in disk_devices(disk) for a in (f"-{kind}", qemu_json(obj))]


def accel_args(accel: Accel, cpu: str | None) -> list[str]:
    """-accel, and under KVM the -cpu model (TCG keeps QEMU's default: `host` needs KVM)."""
    if accel not in ("kvm", "tcg"):
        raise ValueError(f"accel must be kvm or tcg, got {accel!r}")
    if cpu is not None and not re.fullmatch(r"[a-zA-Z0-9_.-]+", cpu):
        raise ValueError(f"invalid CPU model {cpu!r}")
    return ["-accel", accel, *(["-cpu", cpu] if accel == "kvm" and cpu else [])]


def build_command(spec: VmSpec, files: RunFiles, qemu: str = "qemu-system-x86_64",
                  secret_fd: int | None = None, incoming_fd: int | None = None) -> list[str]:
    """The full argv. -name carries the tag `iolab clean` and the cleaner look for.

    secret_fd: the inherited pipe holding the disk key (encrypt=luks), see Secret.
    incoming_fd: an inherited descriptor of a saved state to restore instead of booting
    (`-incoming fd:N`, vm/restore.py); the rest of the argv must be the saved guest's.
    """
    if spec.disk is not None:
        spec.disk.validate()
        if spec.disk.encrypt != "none" and secret_fd is None:
            raise ValueError("an encrypted disk needs its key: secret_fd (Secret.open_fd())")
    if spec.memory_mb < 128 or spec.vcpus < 1:
        raise ValueError("a guest needs at least 128 MiB of memory and one vCPU")
    for p in (spec.kernel, spec.initramfs):
        if "," in str(p):
            raise ValueError(f"QEMU cannot take a kernel/initramfs path containing ',': {p}")
    for g in spec.module_groups:
        if not re.fullmatch(r"[a-z0-9-]+", g):
            raise ValueError(f"invalid module group {g!r}")
    append = [*KERNEL_ARGS, *([f"iolab_modules={','.join(spec.module_groups)}"] if spec.module_groups else [])]
    return [
        qemu, "-name", spec.tag, "-nodefaults", "-nographic", "-no-reboot", *SANDBOX,
        "-machine", "pc", *accel_args(spec.accel, spec.cpu),
        "-m", f"{spec.memory_mb}M", "-smp", str(spec.vcpus),
        "-kernel", str(spec.kernel), "-initrd", str(spec.initramfs),
        "-append", " ".join(append),
        "-chardev", f"file,id=console,path={opt_path(files.console)}", "-serial", "chardev:console",
        "-chardev", f"socket,id=qmp,path={opt_path(files.qmp)},server=on,wait=off",
        "-mon", "chardev=qmp,mode=control",
        "-chardev", f"socket,id=agent,path={opt_path(files.agent)},server=on,wait=off",
        "-device", qemu_json({"driver": "virtio-serial-pci", "id": "vser0"}),
        "-device", qemu_json({"driver": "virtserialport", "bus": "vser0.0", "chardev": "agent",
                              "name": AGENT_PORT}),
        *_disk_args(spec, secret_fd),
        *(spec.net.args() if spec.net else []),
        *(["-incoming", f"fd:{int(incoming_fd)}"] if incoming_fd is not None else []),
    ]


def _disk_args(spec: VmSpec, secret_fd: int | None) -> list[str]:
    if spec.disk is None:
        return []
    if spec.image is None:
        raise ValueError("a disk needs an image path")
    secret = ["-object", Secret.object_arg(secret_fd)] if spec.disk.encrypt != "none" and secret_fd is not None else []
    return [*secret, "-blockdev", qemu_json(blockdev_json(spec.disk, spec.image)), *device_args(spec.disk)]


def confinement(spec: VmSpec, files: RunFiles) -> Confinement:
    """Where QEMU runs (core/confine.py): it can write only its image and its run directory, sees
    no other image of the scratch dir (an empty tmpfs hides it, its own image bound back in), and
    under KVM /dev/kvm besides the standard devices. It keeps the host's network (user
    networking forwards host ports) and pid namespace (probes attach to its host pid), and may make
    unix sockets: its monitor (QMP) is one."""
    writable = [str(files.directory)] + ([str(spec.image)] if spec.image is not None else [])
    scratch = str(paths.scratch_dir())
    hidden = (scratch,) if os.path.isdir(scratch) and not str(files.directory).startswith(scratch + "/") else ()
    return Confinement(writable=tuple(writable), devices=("/dev/kvm",) if spec.accel == "kvm" else (),
                       hidden=hidden, share_net=True, private_pids=False, unix_sockets=True)  # its QMP socket


def qemu_system() -> str:
    exe = shutil.which("qemu-system-x86_64")
    if not exe:
        raise CapabilityMissing("qemu-system-x86_64 not found (Debian: apt-get install qemu-system-x86)")
    return exe


def qemu_version() -> str:
    out = children.run([qemu_system(), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"version\s+(\S+)", out)
    return m.group(1) if m else out.strip().splitlines()[0] if out.strip() else "unknown"
