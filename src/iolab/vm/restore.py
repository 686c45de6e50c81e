"""Guests restored, not booted: boot the built-in guest once per shape, save it when its agent
is ready, and start every later guest of that shape from the saved state, its disk attached
fresh. Where that cannot be done the guest boots, and `GuestStart.why` says why.

A *shape* is everything the saved state holds or QEMU needs identical to load it: kernel and
initramfs, machine, memory, vCPUs, accelerator and CPU model, the devices on the command line
(the agent's virtio-serial port, the NIC when the guest has one) and the kernel arguments.
The trial's disk is not part of it: the base guest is booted without one, with the drivers of
every hot-pluggable bus loaded (`BASE_GROUPS`), so one state serves virtio-blk, virtio-scsi
and nvme guests alike. The key (`state_material`) is the whole command line with per-run names
left out, plus digests of the guest files, the QEMU binary, its version and firmware.

Saving (`save_base`): boot the base guest, zero its free memory (QEMU writes a zero page as a
flag, so the initramfs copy the kernel freed after unpacking costs nothing), `stop`, hand QEMU
a descriptor of the state file (`getfd`) and `migrate` to it (`fd:`; QEMU 7.2 has no `file:`
URI, and `exec:` would need a shell in a sandbox that may forbid spawning), with the default
128 MiB/s migration bandwidth cap lifted.

Restoring (`start_guest`): QEMU inherits a read-only descriptor of the state (`-incoming
fd:N`); once loaded the guest is paused (it was saved stopped), the disk is attached
(vm/hotplug.py), the guest runs, the agent answers, and the guest's wall clock is set and its
RNG reseeded (the clock and pool were those of the moment of saving). The guest then finds
its disk by serial (guest_setup.find_disk).
"""

from __future__ import annotations

import functools
import hashlib
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from iolab.core.digests import sha256_file
from iolab.core.errors import CapabilityMissing, InputError
from iolab.core.exec import ExecRequest
from iolab.core.resources import Ledger
from iolab.vm import saved_states
from iolab.vm.cmdline import NetSpec, RunFiles, VmSpec, build_command, qemu_system, qemu_version
from iolab.vm.errors import VmError
from iolab.vm.executor import CLOCK_AGENT_VERSION, GuestExecutor
from iolab.vm.hotplug import attach_disk, hotplug_problem
from iolab.vm.lifecycle import BOOT_TIMEOUT_S, Incoming, QemuVM
from iolab.vm.saved_states import SavedState, StateUnsupported

Boot = Literal["auto", "restore", "cold"]
BOOT_MODES: tuple[str, ...] = ("auto", "restore", "cold")
# Module groups a base guest loads: every hot-pluggable bus and ext4 (guest_image.MODULE_GROUPS)
BASE_GROUPS: tuple[str, ...] = ("virtio-blk", "virtio-scsi", "nvme", "ext4")
SAVE_TIMEOUT_S = 300.0
MIGRATE_BANDWIDTH = 100 << 30  # bytes/s; QEMU's default cap (128 MiB/s) made a 254 MB save take 1.9 s
FREE_RESERVE_KIB = 48 << 10  # left free when zeroing the base guest's memory, so nothing is squeezed
STATE_FD_NAME = "iolab-state"
FIRMWARE_DIRS = (Path("/usr/share/qemu"), Path("/usr/share/seabios"))


def base_spec(spec: VmSpec) -> VmSpec:
    """The guest a state is saved from: `spec` without its disk (and key) and with the drivers
    of every hot-pluggable bus; a NIC stays (its device is part of the state), its host port
    forwards do not (they are per run and not part of the guest)."""
    groups = spec.module_groups if spec.disk is None else (*BASE_GROUPS, *(("net",) if spec.net else ()))
    return replace(spec, disk=None, image=None, secret=None, module_groups=groups,
                   net=NetSpec() if spec.net is not None else None)


def restored_spec(spec: VmSpec) -> VmSpec:
    """The command line a guest of `spec` is restored with: the base's, with this guest's tag
    and port forwards (the disk comes through QMP). Its image path stays: without a disk the
    command line does not use it, but QEMU's confinement (vm/cmdline.confinement) must make
    that file visible and writable, or the hot-plug that opens it later finds nothing."""
    return replace(base_spec(spec), tag=spec.tag, net=spec.net, image=spec.image)


def restore_problem(spec: VmSpec, boot: Boot) -> str | None:
    """Why a guest of `spec` boots instead of being restored (None: it can be restored)."""
    if boot == "cold":
        return 'boot = "cold" asks for a boot'
    return hotplug_problem(spec.disk)


# ---------------------------------------------------------------- the key


def state_material(spec: VmSpec, image_digest: str | None) -> dict[str, Any]:
    """Everything a saved state of `spec` depends on, as plain data (its digest is the key).

    The base command line with per-run names (tag, sockets, file paths) replaced by constants,
    so any device, machine, memory, CPU or kernel-argument change makes another key; the guest
    files by content (the built-in guest's digest covers kernel and initramfs bytes); QEMU's
    binary, version and firmware (its ROMs are part of the state); under KVM the host CPU."""
    neutral = replace(base_spec(spec), tag="iolab-state", kernel=Path("/guest/kernel"),
                      initramfs=Path("/guest/initramfs"))
    material: dict[str, Any] = {
        "argv": build_command(neutral, RunFiles(Path("/run-dir")), "qemu-system-x86_64")[1:],
        "guest": {"image_digest": image_digest} if image_digest else
        {"kernel": file_digest(spec.kernel), "initramfs": file_digest(spec.initramfs)},
        "qemu": qemu_identity(),
    }
    if spec.accel == "kvm":
        material["host"] = host_cpu_identity()
    return material


def file_digest(path: Path) -> str:
    st = path.stat()
    return _digest(str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _digest(path: str, _ino: int, _size: int, _mtime_ns: int) -> str:
    """sha256 of a file, once per process per (path, inode, size, mtime)."""
    return sha256_file(path)


def qemu_identity() -> dict[str, str]:
    exe = Path(qemu_system())
    return {"binary": file_digest(exe), "version": _version(file_digest(exe)), "firmware": firmware_digest()}


@functools.lru_cache(maxsize=4)
def _version(_binary_digest: str) -> str:
    return qemu_version()


def firmware_digest() -> str:
    """Name, size and mtime of every firmware file QEMU may load (BIOS, option ROMs): a package
    upgrade changes them, and ROM contents are part of a saved state."""
    h = hashlib.sha256()
    for d in FIRMWARE_DIRS:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for name in names:
            try:
                st = (d / name).stat()
            except OSError:
                continue
            h.update(f"{d}/{name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:20]


def host_cpu_identity() -> dict[str, str]:
    """Under KVM a state holds the CPU model the host gave the guest (`-cpu host`)."""
    model = flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {"model": model, "flags": hashlib.sha256(flags.encode()).hexdigest()[:16], "kernel": os.uname().release}


# ---------------------------------------------------------------- saving


def save_base(spec: VmSpec, run_dir: Path, ledger: Ledger, out: Path, timeout_s: float, key: str) -> dict[str, Any]:
    """Boot the base guest of `spec`, save it to `out`, stop it; facts for the state's meta."""
    vm = QemuVM(replace(base_spec(spec), tag=f"{spec.tag}-base"), RunFiles(run_dir), ledger)
    try:
        vm.start(timeout_s)
        assert vm.channel is not None and vm.qmp is not None
        if vm.channel.agent_version < CLOCK_AGENT_VERSION:
            reason = (f"the guest's agent (version {vm.channel.agent_version}) cannot set the clock of a restored "
                      f"guest; version {CLOCK_AGENT_VERSION} can (rebuild it from src/iolab/vm/guest/agent.c)")
            saved_states.mark_unsupported(key, reason)
            raise StateUnsupported(reason)
        zeroed = zero_free_memory(GuestExecutor(vm.channel))
        facts = save_state(vm.qmp, out)
        return {"base_boot_seconds": vm.boot_seconds, "zeroed_kib": zeroed, "guest_kernel": vm.kernel_release,
                "memory_mb": spec.memory_mb, "vcpus": spec.vcpus, "accel": spec.accel, **facts}
    finally:
        vm.kill()


def zero_free_memory(executor: GuestExecutor) -> int:
    """Fill the guest's free memory with zeros and free it again (a read from /dev/zero into one
    buffer: the kernel hands out zeroed pages). Pages the kernel freed dirty (the initramfs
    archive after unpacking) then migrate as zero-page flags, not 4 KiB each. Returns the KiB
    zeroed (0 when it could not be done: the state is then larger, not wrong)."""
    script = ('kb=$(sed -n "s/^MemFree: *\\([0-9]*\\) kB$/\\1/p" /proc/meminfo); n=$((kb - $1)); '
              'if [ "$n" -gt 0 ]; then dd if=/dev/zero of=/dev/null bs=${n}k count=1 2>/dev/null && echo $n; fi')
    res = executor.run(ExecRequest(["sh", "-c", script, "sh", str(FREE_RESERVE_KIB)], timeout_s=120))
    out = res.stdout.strip()
    return int(out) if res.returncode == 0 and out.isdigit() else 0


def save_state(qmp: Any, out: Path, timeout_s: float = SAVE_TIMEOUT_S) -> dict[str, Any]:
    """Stop the guest and migrate it into `out` (created here, exclusively) through a descriptor
    handed to QEMU over QMP; VmError if QEMU reports the migration failed or it takes too long."""
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        qmp.cmd("migrate-set-parameters", **{"max-bandwidth": MIGRATE_BANDWIDTH})
        qmp.cmd("stop")
        t0 = time.monotonic()
        qmp.send_fd_scm(fd)
        qmp.cmd("getfd", fdname=STATE_FD_NAME)
    finally:
        os.close(fd)
    qmp.cmd("migrate", uri=f"fd:{STATE_FD_NAME}")
    while True:
        info = qmp.cmd("query-migrate")
        status = info.get("status")
        if status == "completed":
            break
        if status in ("failed", "cancelled"):
            raise VmError(f"saving the guest's state failed: {info.get('error-desc', status)}")
        if time.monotonic() - t0 > timeout_s:
            qmp.cmd("migrate_cancel")
            raise VmError(f"saving the guest's state took over {timeout_s:.0f} s")
        time.sleep(0.02)
    ram = info.get("ram") or {}
    return {"save_seconds": round(time.monotonic() - t0, 3), "ram_transferred": ram.get("transferred"),
            "ram_duplicate_pages": ram.get("duplicate"), "ram_normal_pages": ram.get("normal")}


# ---------------------------------------------------------------- starting a guest


@dataclass
class GuestStart:
    """A running guest and how it came up: restored from `state`, or booted and `why`."""

    vm: QemuVM
    restored: bool
    why: str | None = None
    state: SavedState | None = None
    state_made: bool = False
    attached: list[dict[str, Any]] | None = None  # the QMP commands that gave a restored guest its disk

    def manifest(self) -> dict[str, Any]:
        vm = self.vm
        out: dict[str, Any] = {"mode": "restored" if self.restored else "booted",
                               "ready_seconds": vm.boot_seconds, **(vm.clock.manifest() if vm.clock else {})}
        if self.why:
            out["why_not_restored"] = self.why
        if self.state is not None and self.restored:
            meta = self.state.meta
            out["restore_seconds"] = vm.restore_seconds
            out["state"] = {"key": self.state.key, "path": str(self.state.path), "size": self.state.size,
                            "created": meta.get("created"), "made_by_this_guest": self.state_made,
                            "base_boot_seconds": meta.get("base_boot_seconds"),
                            "save_seconds": meta.get("save_seconds")}
            out["disk_attached"] = self.attached or []
        return out

    def note(self, label: str) -> str:
        """One line for the progress output."""
        vm = self.vm
        if self.restored and self.state is not None:
            made = (f"; saved now from a boot of {self.state.meta.get('base_boot_seconds', 0):.1f} s"
                    if self.state_made else "")
            return (f"{label}: restored from saved state {self.state.key[:10]} ({self.state.size / 1e6:.0f} MB), "
                    f"agent ready in {vm.boot_seconds or 0:.2f} s{made}")
        return f"{label}: booted in {vm.boot_seconds or 0:.2f} s, not restored: {self.why}"


def start_guest(spec: VmSpec, run_dir: Path, ledger: Ledger, *, boot: Boot = "auto",
                image_digest: str | None = None, boot_timeout_s: float | None = None) -> GuestStart:
    """A running guest of `spec` with its agent ready: restored from the saved state of its shape
    (made now if there is none), else booted, with the reason. boot="restore" makes a guest
    that cannot be restored a CapabilityMissing instead; boot="cold" always boots."""
    timeout = boot_timeout_s or BOOT_TIMEOUT_S[spec.accel]
    files = RunFiles(run_dir)
    why = restore_problem(spec, boot)
    state: SavedState | None = None
    made = False
    if why is None:
        try:
            material = state_material(spec, image_digest)
            key = saved_states.key_of(material)
            state, made = saved_states.obtain(
                key, material, lambda out: save_base(spec, run_dir / "base", ledger, out, timeout, key),
                ledger, wait_s=timeout + SAVE_TIMEOUT_S)
        except InputError:  # the user's setting (the cache bound): exit 2, not a slower guest
            raise
        except Exception as exc:  # any failure to save (QEMU refusing a QMP command too) means a boot
            why = f"no saved state to restore: {_summary(exc)}"
    if state is not None:
        attached: list[dict[str, Any]] = []
        try:
            vm = _restore(spec, state, files, ledger, timeout, attached)
            saved_states.record_outcome(state.key, None)
            return GuestStart(vm, True, None, state, made, attached)
        except Exception as exc:  # QemuVM.start has killed the QEMU it started: a boot follows
            saved_states.discard(state.key)  # made again by the next guest of this shape
            why = f"restoring saved state {state.key[:10]} failed (state removed): {_summary(exc)}"
            saved_states.record_outcome(state.key, why)
    if boot == "restore":
        raise CapabilityMissing(f'boot = "restore", but the guest cannot be restored: {why}')
    vm = QemuVM(spec, files, ledger)
    vm.start(timeout)
    return GuestStart(vm, False, why)


def boot_instead(started: GuestStart, spec: VmSpec, run_dir: Path, ledger: Ledger, problem: BaseException,
                 boot_timeout_s: float | None = None) -> GuestStart:
    """A restored guest that failed after it came up (its hot-plugged disk never showed) is
    killed and the guest booted in its place, the reason recorded like any failed restore."""
    assert started.restored and started.state is not None
    why = f"the guest restored from saved state {started.state.key[:10]} failed: {_summary(problem)}"
    saved_states.record_outcome(started.state.key, why)
    started.vm.kill()
    vm = QemuVM(spec, RunFiles(run_dir), ledger)
    vm.start(boot_timeout_s or BOOT_TIMEOUT_S[spec.accel])
    return GuestStart(vm, False, why)


def _restore(spec: VmSpec, state: SavedState, files: RunFiles, ledger: Ledger, timeout: float,
             attached: list[dict[str, Any]]) -> QemuVM:
    def attach(qmp: Any) -> None:
        if spec.disk is not None:
            assert spec.image is not None
            attached.extend(attach_disk(qmp, spec.disk, spec.image, spec.secret))

    fd = state.open()
    try:
        vm = QemuVM(restored_spec(spec), files, ledger)
        vm.start(timeout, Incoming(fd, attach))
    finally:
        os.close(fd)
    return vm


def _summary(exc: BaseException) -> str:
    """The first line of an error, and QEMU's own last word when the error carries its stderr
    (a state QEMU cannot load says why there: "load of migration failed: ...")."""
    lines = (str(exc).strip() or type(exc).__name__).splitlines()
    out = lines[0][:300]
    if "QEMU stderr:" in lines:
        err = lines[lines.index("QEMU stderr:") + 1:]
        err = [ln.strip() for ln in err[:err.index("guest console tail:")] if ln.strip()] \
            if "guest console tail:" in err else [ln.strip() for ln in err if ln.strip()]
        if err:
            out += f" (QEMU: {err[-1][:200]})"
    return out
