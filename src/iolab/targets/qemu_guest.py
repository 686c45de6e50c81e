"""A QEMU guest with one test disk: the target for host-vs-VM and virtual-disk studies.

setup() starts the guest once (restored from the saved state of its shape where it can be,
vm/restore.py, else booted, with the reason in the manifest and the progress output); every
command of the trials sharing this target runs in it through the guest agent. The disk image
lives on a scratch loop device of its own (unless image_dir says otherwise), so the host-side
block counters see only the image's I/O.

Size: one target kind whole (its axes and their validation, its offer, set-up with restore or
boot, manifest, teardown); the guest machinery itself lives in iolab.vm, one concept a module.
"""

from __future__ import annotations

import os
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from iolab.core import owner as owners
from iolab.core import paths, sizing
from iolab.core.errors import CapabilityMissing, IolabError
from iolab.core.exec import ExecRequest
from iolab.core.net import free_port
from iolab.core.resources import Ledger, Resource
from iolab.core.units import format_size, parse_size
from iolab.native import guest_fio, ycsb_guest
from iolab.native.build import GUEST_DIR, available, helper_path
from iolab.targets import blockinfo
from iolab.targets.base import TCG_TIME_FACTOR, MachineCheck, Placement, Target, TargetOffer, TargetParams
from iolab.targets.loop import ScratchLoop, create_scratch_loop, release_scratch_loop
from iolab.targets.offer import Capability
from iolab.vm import guest_image, profiles
from iolab.vm.accel import AccelChoice, AccelInfo, choose
from iolab.vm.cmdline import (
    GUEST_NET,
    GUEST_SERVER_PORT,
    PEER_MEMORY_MB,
    NetSpec,
    Network,
    VmSpec,
    peer_spec,
    qemu_version,
)
from iolab.vm.disk import (
    DISK_ID,
    LUKS_ITER_TIME_MS,
    SECRET_ID,
    Aio,
    Bus,
    CacheMode,
    DiskSpec,
    Encrypt,
    Format,
    Prealloc,
    Secret,
)
from iolab.vm.errors import VmError
from iolab.vm.executor import GuestExecutor
from iolab.vm.guest_setup import GUEST_MOUNT, configure_network, make_ext4, wait_for_disk
from iolab.vm.hotplug import HOTPLUG_BUSES
from iolab.vm.image import create_image, image_info, prefill
from iolab.vm.lifecycle import QemuVM
from iolab.vm.restore import Boot, GuestStart, boot_instead, start_guest
from iolab.vm.virtio_queues import queue_report

# applications the built-in guest can carry (guest_apps): name -> (its directory in the guest,
# the host directory copied there whole); each is built by the set-up command, never by a run
GUEST_APPS: dict[str, Callable[[], tuple[str, Path]]] = {
    "ycsb": lambda: (ycsb_guest.GUEST_DIR, ycsb_guest.installed().directory),
}


class QemuGuestParams(TargetParams):
    kind: Literal["qemu"] = "qemu"
    profile: str | None = Field(None, description="a built-in VM profile (iolab.vm.profiles); keys set here win")
    bus: Bus = "virtio-blk"
    format: Format = "raw"
    cache: CacheMode = "none"
    aio: Aio = "threads"
    iothread: bool = False
    cluster_size: int | None = Field(None, description="qcow2 cluster size, bytes or '64k'")
    preallocation: Prealloc = "off"
    lazy_refcounts: bool = False
    encrypt: Encrypt = Field("none", description="luks: qcow2 with LUKS; the key never touches disk or argv")
    disk_size: int = Field(256 << 20, description="test disk size, bytes or '256M'")
    memory: int = Field(512 << 20, description="guest memory, bytes or '512M'")
    vcpus: int = Field(1, ge=1, le=64)
    accel: AccelChoice = "auto"
    image_dir: str | None = Field(None, description="None: on a scratch loop device of its own")
    kernel: str | None = None
    initramfs: str | None = Field(None, description="must start /sbin/iolab-agent (docs/vm.md)")
    guest_fs: Literal["none", "ext4"] = "none"
    prefill: bool = Field(False, description="write pattern data over the whole disk before boot, "
                                             "so reads do not hit holes / unallocated clusters")
    extra_binaries: tuple[str, ...] = Field((), description="host binaries to add to the built-in guest")
    native_helpers: tuple[str, ...] = Field((), description="iolab C helpers to install in the guest "
                                                            "(e.g. iolab_stream)")
    guest_apps: tuple[Literal["ycsb"], ...] = Field((), description="applications to add to the built-in guest "
                                                    "beside fio: ycsb (a Java runtime, YCSB and RocksDB, ~90 MB "
                                                    "more guest RAM)")
    network: Network = Field("none", description="user: a virtio-net NIC on user-mode networking "
                                                 "(guest 10.0.2.15, host loopback 10.0.2.2)")
    net_peer: bool = Field(False, description="boot a second, diskless guest on its own user network, "
                                              "for guest-to-guest traffic (needs network = \"user\")")
    boot_timeout: float | None = Field(None, gt=0, description="seconds; default 30 (KVM) / 90 (TCG)")
    boot: Boot = Field("auto", description="auto: restore the guest from the saved state of its shape "
                                           "(made on first use) where its bus can hot-plug the disk, else "
                                           "boot; restore: restore or fail; cold: always boot")

    @field_validator("disk_size", "memory", "cluster_size", mode="before")
    @classmethod
    def _size(cls, v: Any) -> Any:
        return None if v is None else parse_size(v)

    @model_validator(mode="before")
    @classmethod
    def _profile(cls, values: Any) -> Any:
        return profiles.apply(values) if isinstance(values, dict) else values

    @model_validator(mode="after")
    def _consistent(self) -> QemuGuestParams:
        problems = self.disk_spec().problems()
        if self.net_peer and self.network != "user":
            problems.append("net_peer needs network = \"user\"")
        if self.prefill and self.encrypt != "none":
            problems.append("prefill is not supported with encrypt=luks (write the data from the guest)")
        unknown = sorted(set(self.native_helpers) - set(available()))
        if unknown:
            problems.append(f"unknown native helper(s) {', '.join(unknown)}; available: {', '.join(available())}")
        if self.memory < (384 << 20) and not self.initramfs:
            # the built-in initramfs (~95 MiB unpacked, mostly fio's libraries) is unpacked into RAM
            problems.append(f"memory must be at least 384M for the built-in guest, got {format_size(self.memory)}")
        elif self.memory < (128 << 20):
            problems.append(f"memory must be at least 128M, got {format_size(self.memory)}")
        if self.guest_apps and self.initramfs:
            problems.append(f"guest_apps {', '.join(self.guest_apps)} are added to the built-in guest; a guest of "
                            "your own (initramfs) must bring them itself")
        if self.initramfs and not self.kernel:
            problems.append("initramfs given without kernel: pass both, or neither")
        if self.boot == "restore" and self.bus not in HOTPLUG_BUSES:
            problems.append(f"boot = \"restore\" needs a bus QEMU can hot-plug a disk on "
                            f"({', '.join(HOTPLUG_BUSES)}); bus {self.bus} cannot: use boot = \"auto\" or \"cold\"")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def disk_spec(self) -> DiskSpec:
        return DiskSpec(size=self.disk_size, bus=self.bus, format=self.format, cache=self.cache,
                        aio=self.aio, iothread=self.iothread, cluster_size=self.cluster_size,
                        preallocation=self.preallocation, lazy_refcounts=self.lazy_refcounts,
                        encrypt=self.encrypt)


def guest_fio_check(fio: guest_fio.GuestFio) -> MachineCheck:
    """Which fio the built-in guest carries, and why: a warning only when set-up can do better
    (guests then start slower under TCG, their results are as valid)."""
    if fio.build == "static-minimal":
        return MachineCheck("guest-fio", "ok", f"the built-in guest carries {fio.binary} as /usr/bin/fio: {fio.why}")
    detail = f"the built-in guest carries {fio.version} from {fio.binary}: {fio.why}"
    if fio.remedy:
        return MachineCheck("guest-fio", "warn", f"{detail}; until then each fio exec in a TCG guest pays "
                                                 "the dynamic linking of Debian's fio (about 0.3 s per guest start)")
    return MachineCheck("guest-fio", "ok", detail)


class QemuGuestTarget(Target):
    kind: ClassVar[str] = "qemu"
    Params: ClassVar[type[TargetParams]] = QemuGuestParams
    params: QemuGuestParams

    def __init__(self, params: TargetParams, ledger: Ledger):
        super().__init__(params, ledger)
        self.tag = owners.tag(uuid.uuid4().hex[:10])  # the owner's tag: a sweep knows whose guest it is
        self.vm: QemuVM | None = None
        self.peer: QemuVM | None = None
        self.started: GuestStart | None = None
        self.image: Path | None = None
        self.loop: ScratchLoop | None = None
        self._made: list[Resource] = []
        self._setup_thread: threading.Thread | None = None  # QMP's thread (vm/qmp.py)

    @classmethod
    def machine_checks(cls) -> list[MachineCheck]:
        try:
            fio = guest_fio.for_guest()
        except (IolabError, OSError) as exc:
            return [MachineCheck("guest-fio", "missing", f"the built-in guest carries the host's fio: {exc}")]
        return [guest_fio_check(fio)]

    @classmethod
    def offer(cls, params: TargetParams) -> TargetOffer:
        """A guest: its test disk raw or with ext4, its memory, the programs the built-in guest
        carries (a guest of the user's own carries what it brings: not known here)."""
        assert isinstance(params, QemuGuestParams)
        p = params
        apps = None if p.initramfs else frozenset(
            {Path(b).name for b in (*guest_image.DEFAULT_BINARIES, *p.extra_binaries)}
            | set(p.native_helpers) | set(p.guest_apps))
        caps: set[Capability] = {"network"} if p.network == "user" else set()
        caps |= {"network_peer"} if p.net_peer else set()
        free, inodes = sizing.ext4_capacity(p.disk_size) if p.guest_fs == "ext4" else (p.disk_size, None)
        remedies = {"storage:directory": 'set guest_fs = "ext4"', "storage:block_device": 'set guest_fs = "none"',
                    "capacity": "give it a larger disk_size", "memory": 'give the target memory = "{need}"',
                    "app": 'add it to the guest: extra_binaries = ["/usr/bin/{app}"] (a host program)',
                    "capability:network": 'set network = "user"',
                    "capability:network_peer": 'set net_peer = true (with network = "user")',
                    **{f"app:{a}": f'give it guest_apps = ["{a}"]' for a in GUEST_APPS},
                    **{f"app:{h}": f'give it native_helpers = ["{h}"]' for h in available()}}
        return TargetOffer(
            kind=cls.kind, where="guest", storage=frozenset({"directory" if p.guest_fs == "ext4" else "block_device"}),
            filesystem=None if p.guest_fs == "none" else p.guest_fs, capacity=free, inodes=inodes, memory=p.memory,
            apps=apps, capabilities=frozenset(caps), remedies=remedies,
            settings=f"guest_fs = {p.guest_fs!r}, disk_size = {format_size(p.disk_size)}, memory = "
                     f"{format_size(p.memory)}, guest_apps = {list(p.guest_apps)}")

    def describe(self) -> list[str]:
        p = self.params
        where = p.image_dir or "a scratch loop device (ext4) of its own"
        return [
            f"creates a {format_size(p.disk_size)} {p.format} image on {where}",
            f"{'boots' if p.boot == 'cold' or p.bus not in HOTPLUG_BUSES else 'restores (or boots)'} a QEMU guest "
            f"({p.vcpus} vCPU, {format_size(p.memory)}; KVM if it works, else TCG) "
            f"with the disk on {p.bus}, cache={p.cache}, aio={p.aio}"
            + (", iothread" if p.iothread else ""),
            *(["saves the guest's state in iolab's cache on first use (one per guest shape; docs/vm.md)"]
              if p.boot != "cold" and p.bus in HOTPLUG_BUSES else []),
            *([f"makes ext4 on the guest disk and mounts it at {GUEST_MOUNT}"] if p.guest_fs == "ext4" else []),
            *(["encrypts the image with LUKS; the key is random, kept in memory and handed to QEMU "
               "through an inherited pipe (a restored guest: over its QMP socket)"] if p.encrypt != "none" else []),
            *(["gives the guest a virtio-net NIC on user-mode networking (host loopback at 10.0.2.2)"]
              if p.network == "user" else []),
            *(["boots a second, diskless guest as network peer"] if p.net_peer else []),
            *([f"adds {', '.join(p.guest_apps)} to the built-in guest"] if p.guest_apps else []),
            "QEMU runs confined (bubblewrap, -sandbox on): it can write only its image and its run directory, and "
            "sees /dev/kvm under KVM besides the standard devices",
            "stops the guest and removes the image and loop device at the end, also on failure",
        ]

    # ------------------------------------------------------------ setup

    def preflight(self) -> None:
        """Before anything exists: the guest(s) must fit in the host's available memory and the
        image's scratch loop device on the scratch filesystem."""
        p = self.params
        host = sizing.host_memory()
        wanted = p.memory + (PEER_MEMORY_MB << 20 if p.net_peer else 0)
        label = f"the {p.profile or p.bus} guest ({format_size(p.memory)}" + (
            f" + a {PEER_MEMORY_MB} MiB network peer)" if p.net_peer else ")")
        problem = sizing.guest_fits(wanted, host, label) if host else None
        if problem:
            raise CapabilityMissing(problem + "; give the target less `memory`")
        for app in p.guest_apps:
            GUEST_APPS[app]()  # CapabilityMissing if the set-up did not build it
        if not p.image_dir:
            scratch = paths.scratch_dir()
            problem = sizing.space_problem(image_loop_size(p.disk_size), sizing.free_bytes(scratch), str(scratch))
            if problem:
                raise CapabilityMissing(problem)

    def setup(self) -> Placement:
        return self.undone_on_failure(self._setup)

    def _setup(self) -> Placement:
        p = self.params
        self._setup_thread = threading.current_thread()
        image = self._guest()
        accel = choose(p.accel, image.kernel)
        directory, host_device = self._image_directory()
        self.image = directory / f"{self.tag}.{p.format}"
        made = self.ledger.add("file", str(self.image), pending=True)  # before qemu-img creates it
        self._made.append(made)
        secret = Secret() if p.encrypt != "none" else None
        create_image(p.disk_spec(), self.image, secret)
        self.ledger.confirm(made)
        if p.prefill:
            prefill(self.image, p.format, p.disk_size)
        run_dir = Path(tempfile.gettempdir()) / f"{self.tag}-run"
        with self.ledger.creating("dir", str(run_dir), recursive=True) as made:
            run_dir.mkdir(mode=0o700)
        self._made.append(made)
        spec = VmSpec(disk=p.disk_spec(), image=self.image, kernel=image.kernel, initramfs=image.initramfs,
                      memory_mb=p.memory >> 20, vcpus=p.vcpus, accel=accel.accel, cpu=accel.cpu, tag=self.tag,
                      module_groups=(p.bus, *(["ext4"] if p.guest_fs == "ext4" else []),
                                     *(["net"] if p.network == "user" else [])),
                      net=NetSpec(hostfwd=((free_port(), GUEST_SERVER_PORT),)) if p.network == "user" else None,
                      secret=secret)
        self.started = start_guest(spec, run_dir, self.ledger, boot=p.boot, image_digest=image.digest,
                                   boot_timeout_s=p.boot_timeout)
        self.vm = self.started.vm
        try:
            executor, dev = self._find_disk()
        except VmError as exc:
            if not self.started.restored or p.boot == "restore":
                raise
            self.started = boot_instead(self.started, spec, run_dir, self.ledger, exc, p.boot_timeout)
            self.vm = self.started.vm
            executor, dev = self._find_disk()
        mount = make_ext4(executor, dev) if p.guest_fs == "ext4" else None
        extras: dict[str, Any] = {"qmp": self.vm.qmp, "vm": self.vm, "qemu_pid": self.vm.pid,
                                  "qmp_device": DISK_ID, "accel": accel.accel,
                                  "native_helpers": {n: f"{GUEST_DIR}/{n}" for n in p.native_helpers},
                                  "guest_apps": {n: GUEST_APPS[n]()[0] for n in p.guest_apps}}
        if spec.net is not None:
            configure_network(executor)
            extras["net"] = {"host_addr": GUEST_NET["host"], "forward_port": spec.net.hostfwd[0][0],
                             "server_port": GUEST_SERVER_PORT}
        notes = [self.started.note(f"qemu guest ({p.profile or p.bus})")]
        if p.net_peer:
            extras["peer"], peer_start = self._start_peer(spec, run_dir, image.digest)
            notes.append(peer_start.note("its network peer"))
        manifest = self._manifest(image, accel, dev, host_device)
        if p.net_peer:
            manifest["peer_boot"] = peer_start.manifest()
        manifest["notes"] = notes
        return Placement(
            executor=executor, path=None if mount else f"/dev/{dev}", directory=mount,
            host_device=host_device, guest_device=dev, is_block_device=mount is None, manifest=manifest,
            extras=extras, time_factor=TCG_TIME_FACTOR if accel.accel == "tcg" else 1.0,
        )

    def _find_disk(self) -> tuple[GuestExecutor, str]:
        assert self.vm is not None and self.started is not None
        assert self.vm.channel is not None and self.vm.qmp is not None  # start() returns only with both
        executor = GuestExecutor(self.vm.channel, host_view=self._queue_view)
        return executor, wait_for_disk(executor, self.params.bus, self.params.disk_size, self._diagnosis,
                                       hotplugged=self.started.restored)

    def _queue_view(self) -> str:
        """QEMU's side of the disk's queues for a guest command that timed out (vm.virtio_queues);
        QMP is used from the thread that set the guest up only (vm/qmp.py), never from another."""
        vm = self.vm
        if vm is None or vm.qmp is None or threading.current_thread() is not self._setup_thread:
            return ""
        return queue_report(vm.qmp)

    def _start_peer(self, spec: VmSpec, run_dir: Path, digest: str | None) -> tuple[dict[str, Any], GuestStart]:
        """The network peer (cmdline.peer_spec), reachable from the host (and so from the
        first guest, through 10.0.2.2) at 127.0.0.1:forward_port; restored like the guest."""
        port = free_port()
        started = start_guest(peer_spec(spec, f"{self.tag}-peer", port), run_dir / "peer", self.ledger,
                              boot=self.params.boot, image_digest=digest, boot_timeout_s=self.params.boot_timeout)
        self.peer = started.vm
        assert self.peer.channel is not None
        executor = GuestExecutor(self.peer.channel)
        configure_network(executor)
        return ({"executor": executor, "forward_port": port, "server_port": GUEST_SERVER_PORT,
                 "qemu_pid": self.peer.pid}, started)

    def _guest(self) -> guest_image.GuestImage:
        p = self.params
        if p.kernel and p.initramfs:
            return guest_image.user_guest(p.kernel, p.initramfs)
        helpers = {f"{GUEST_DIR}/{n}": helper_path(n) for n in p.native_helpers}
        trees = dict(GUEST_APPS[n]() for n in p.guest_apps)
        return guest_image.build_guest(p.extra_binaries, extra_files=helpers,
                                       kernel=Path(p.kernel) if p.kernel else None, extra_trees=trees)

    def _image_directory(self) -> tuple[Path, str | None]:
        """Where the image goes and the host block device whose counters see its I/O.

        Default: a scratch loop device carrying ext4, used by this image alone, so host-side
        probes count exactly the image's I/O. image_dir: that directory, and its device.
        """
        p = self.params
        if p.image_dir:
            d = Path(p.image_dir)
            if not d.is_dir():
                raise CapabilityMissing(f"image_dir {d} is not a directory")
            return d, blockinfo.device_of_path(str(d))
        self.loop = create_scratch_loop(self.ledger, image_loop_size(p.disk_size), filesystem="ext4",
                                        prefill=False, label="vm")
        assert self.loop.mountpoint is not None  # filesystem="ext4" is mounted
        return self.loop.mountpoint, os.path.basename(self.loop.device)

    def _manifest(self, image: guest_image.GuestImage, accel: AccelInfo, dev: str,
                  host_device: str | None) -> dict[str, Any]:
        assert self.vm is not None and self.image is not None
        p = self.params
        flags = ["tcg_emulation: the guest runs under software emulation; timings are not "
                 "representative of KVM"] if accel.accel == "tcg" else []
        if not p.prefill:
            flags.append("not_prefilled: reads of never-written regions hit holes or unallocated clusters")
        return {
            "target": "qemu", "accel": accel.accel, "accel_reason": accel.reason,
            "qemu_version": qemu_version(), "qemu_cmdline": list(self.vm.argv),
            "qemu_img_info": image_info(self.image), "guest_kernel": self.vm.kernel_release,
            "guest_image": image.manifest(),
            "disk": asdict(p.disk_spec()) | {"cache_flags": asdict(p.disk_spec().flags)},
            "guest_device": dev, "guest_fs": p.guest_fs, "host_device": host_device,
            "image_path": str(self.image), "boot_seconds": self.vm.boot_seconds,
            "boot": self.started.manifest() if self.started else None,
            "memory_bytes": p.memory, "vcpus": p.vcpus, "prefilled": p.prefill, "flags": flags,
            "profile": p.profile, "network": p.network, "net_peer": p.net_peer,
            "encryption": ({"format": "luks", "key": "random per run, in memory only, passed " + (
                               f"over QMP (object-add secret id={SECRET_ID})" if self.vm.restored else
                               f"through an inherited pipe (-object secret id={SECRET_ID})"),
                            "iter_time_ms": LUKS_ITER_TIME_MS}
                           if p.encrypt != "none" else None),
        }

    def _diagnosis(self) -> str:
        return self.vm.diagnosis() if self.vm else ""

    # ------------------------------------------------------------ between trials and after

    def reset_between_trials(self, placement: Placement) -> None:
        """Flush and drop the guest page cache so one trial's cache does not feed the next."""
        placement.executor.run(ExecRequest(
            ["sh", "-c", "sync && echo 3 > /proc/sys/vm/drop_caches"], timeout_s=120))

    def teardown(self) -> None:
        errors = []
        for attr in ("peer", "vm"):
            vm = getattr(self, attr)
            if vm is None:
                continue
            try:
                vm.shutdown()
            except Exception as exc:  # keep going: the image and loop must still go
                errors.append(f"stopping the guest: {exc}")
            setattr(self, attr, None)
        self.started = None
        for res in reversed(self._made):
            try:
                self.ledger.release(res)
            except Exception as exc:
                errors.append(f"{res.kind} {res.ident}: {exc}")
        self._made.clear()
        if self.loop is not None:
            try:
                release_scratch_loop(self.ledger, self.loop)
            except Exception as exc:
                errors.append(f"scratch loop: {exc}")
            self.loop = None
        if errors:
            raise IolabError("teardown of the QEMU target was incomplete: " + "; ".join(errors))


def image_loop_size(disk_size: int) -> int:
    """The scratch loop device that carries a guest image: the disk, qcow2 metadata and ext4 overhead."""
    size = disk_size + disk_size // 8 + (64 << 20)
    return (size + (1 << 20) - 1) // (1 << 20) * (1 << 20)
