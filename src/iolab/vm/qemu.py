"""Launching QEMU: accel probe, validated disk/VM specs, command line, QMP, shutdown.

Every value on the command line comes from a validated field: enums, integers, and paths
iolab created. -blockdev and -device are given as JSON objects so no value is ever parsed
as a QemuOpts list (a comma in a path cannot inject an option).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import iolab.vm.cleanup  # noqa: F401  (registers the "process" cleaner QemuVM relies on)
from iolab.core import paths
from iolab.core.errors import CapabilityMissing, IolabError
from iolab.core.resources import Ledger, Resource
from iolab.vm.executor import AgentChannel

Bus = Literal["virtio-blk", "virtio-scsi", "ide", "ahci", "nvme"]
Format = Literal["raw", "qcow2"]
CacheMode = Literal["none", "writeback", "writethrough", "directsync", "unsafe"]
Aio = Literal["threads", "native", "io_uring"]
Prealloc = Literal["off", "metadata", "falloc", "full"]
Encrypt = Literal["none", "luks"]
Network = Literal["none", "user"]
Accel = Literal["kvm", "tcg"]

BUSES: tuple[str, ...] = ("virtio-blk", "virtio-scsi", "ide", "ahci", "nvme")
AGENT_PORT = "org.iolab.agent"
DISK_SERIAL = "iolab-test"
SECRET_ID = "disk0-key"
# PBKDF2 time to unlock the LUKS key slot (QEMU's default is 2000 ms, paid at every open);
# a lab image needs no brute-force resistance, and the cost is outside every measurement.
LUKS_ITER_TIME_MS = 100
GUEST_NET = {"guest": "10.0.2.15/24", "host": "10.0.2.2", "gateway": "10.0.2.2"}  # slirp's fixed plan
DISK_ID = "testdisk"
FORMAT_NODE = "disk0"
FILE_NODE = "disk0-file"
# The block device name each bus gives the (only) test disk in the built-in guest.
GUEST_DEVICE: dict[str, str] = {
    "virtio-blk": "vda", "virtio-scsi": "sda", "ide": "sda", "ahci": "sda", "nvme": "nvme0n1",
}
KERNEL_ARGS = ("console=ttyS0", "panic=-1", "edd=off")


class VmError(IolabError):
    """QEMU or the guest failed; the message says why and carries the console tail."""


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
        import secrets

        self._data = data if data is not None else secrets.token_urlsafe(32).encode()

    def open_fd(self) -> int:
        """A fresh read end holding the key (close it after the child started)."""
        r, w = os.pipe()
        try:
            os.write(w, self._data)
        finally:
            os.close(w)
        return r

    @staticmethod
    def object_arg(fd: int) -> str:
        return f"secret,id={SECRET_ID},file=/dev/fd/{int(fd)}"


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
                "-device", _json({"driver": "virtio-net-pci", "netdev": "net0", "id": "nic0"})]


@dataclass(frozen=True)
class VmSpec:
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


# ---------------------------------------------------------------- command line

def _opt_path(p: Path) -> str:
    """A path for a QemuOpts-style option: commas must be doubled, newlines refused."""
    s = str(p)
    if any(c in s for c in "\n\r\0"):
        raise ValueError(f"unusable path for QEMU: {s!r}")
    return s.replace(",", ",,")


def _json(obj: dict[str, Any]) -> str:
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


def device_args(disk: DiskSpec) -> list[str]:
    """-device (and -object) arguments attaching the format node on the chosen bus."""
    wc = "on" if disk.flags.write_cache else "off"
    common = {"drive": FORMAT_NODE, "id": DISK_ID, "serial": DISK_SERIAL, "write-cache": wc}
    args: list[str] = []
    iothread = {"iothread": "iothread0"} if disk.iothread else {}
    if disk.iothread:
        args += ["-object", _json({"qom-type": "iothread", "id": "iothread0"})]
    if disk.bus == "virtio-blk":
        args += ["-device", _json({"driver": "virtio-blk-pci", **common, **iothread})]
    elif disk.bus == "virtio-scsi":
        args += ["-device", _json({"driver": "virtio-scsi-pci", "id": "scsi0", **iothread}),
                 "-device", _json({"driver": "scsi-hd", "bus": "scsi0.0", **common})]
    elif disk.bus == "ide":
        args += ["-device", _json({"driver": "ide-hd", "bus": "ide.0", **common})]
    elif disk.bus == "ahci":
        args += ["-device", _json({"driver": "ahci", "id": "ahci0"}),
                 "-device", _json({"driver": "ide-hd", "bus": "ahci0.0", **common})]
    elif disk.bus == "nvme":
        args += ["-device", _json({"driver": "nvme", **common})]
    else:
        raise ValueError(f"unknown bus {disk.bus!r}")
    return args


def build_command(spec: VmSpec, files: RunFiles, qemu: str = "qemu-system-x86_64",
                  secret_fd: int | None = None) -> list[str]:
    """The full argv. -name carries the tag `iolab clean` and the cleaner look for.

    secret_fd: the inherited pipe holding the disk key (encrypt=luks), see Secret.
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
    if spec.cpu is not None and not re.fullmatch(r"[a-zA-Z0-9_.-]+", spec.cpu):
        raise ValueError(f"invalid CPU model {spec.cpu!r}")
    cpu = ["-cpu", spec.cpu] if spec.accel == "kvm" and spec.cpu else []
    for g in spec.module_groups:
        if not re.fullmatch(r"[a-z0-9-]+", g):
            raise ValueError(f"invalid module group {g!r}")
    append = [*KERNEL_ARGS, *([f"iolab_modules={','.join(spec.module_groups)}"] if spec.module_groups else [])]
    return [
        qemu, "-name", spec.tag, "-nodefaults", "-nographic", "-no-reboot",
        "-machine", "pc", "-accel", spec.accel, *cpu,
        "-m", f"{spec.memory_mb}M", "-smp", str(spec.vcpus),
        "-kernel", str(spec.kernel), "-initrd", str(spec.initramfs),
        "-append", " ".join(append),
        "-chardev", f"file,id=console,path={_opt_path(files.console)}", "-serial", "chardev:console",
        "-chardev", f"socket,id=qmp,path={_opt_path(files.qmp)},server=on,wait=off",
        "-mon", "chardev=qmp,mode=control",
        "-chardev", f"socket,id=agent,path={_opt_path(files.agent)},server=on,wait=off",
        "-device", _json({"driver": "virtio-serial-pci", "id": "vser0"}),
        "-device", _json({"driver": "virtserialport", "bus": "vser0.0", "chardev": "agent",
                          "name": AGENT_PORT}),
        *_disk_args(spec, secret_fd),
        *(spec.net.args() if spec.net else []),
    ]


def _disk_args(spec: VmSpec, secret_fd: int | None) -> list[str]:
    if spec.disk is None:
        return []
    if spec.image is None:
        raise ValueError("a disk needs an image path")
    secret = ["-object", Secret.object_arg(secret_fd)] if spec.disk.encrypt != "none" and secret_fd is not None else []
    return [*secret, "-blockdev", _json(blockdev_json(spec.disk, spec.image)), *device_args(spec.disk)]


# ---------------------------------------------------------------- images

def qemu_img() -> str:
    exe = shutil.which("qemu-img")
    if not exe:
        raise CapabilityMissing("qemu-img not found (Debian: apt-get install qemu-utils)")
    return exe


def qemu_system() -> str:
    exe = shutil.which("qemu-system-x86_64")
    if not exe:
        raise CapabilityMissing("qemu-system-x86_64 not found (Debian: apt-get install qemu-system-x86)")
    return exe


def create_image(disk: DiskSpec, path: Path, secret: Secret | None = None) -> None:
    disk.validate()
    if disk.encrypt != "none" and secret is None:
        raise ValueError("an encrypted image needs a Secret")
    for _ in range(LUKS_CREATE_ATTEMPTS):
        proc = _qemu_img_create(disk, path, secret if disk.encrypt != "none" else None)
        if proc.returncode == 0:
            return
        # LUKS creation times PBKDF2 with the thread's CPU clock; on a busy host that
        # measurement can read zero and qemu-img gives up. It is only a benchmark: retry.
        if "Unable to get accurate CPU usage" not in proc.stderr:
            break
        path.unlink(missing_ok=True)
    raise VmError(f"qemu-img create failed: {proc.stderr.strip()}\ncommand: {proc.args}")


LUKS_CREATE_ATTEMPTS = 5


def _qemu_img_create(disk: DiskSpec, path: Path, secret: Secret | None) -> subprocess.CompletedProcess[str]:
    fd = secret.open_fd() if secret else None
    obj = ["--object", Secret.object_arg(fd)] if fd is not None else []
    argv = [qemu_img(), "create", "-q", *obj, "-f", disk.format, "-o", ",".join(disk.create_options()),
            str(path), str(disk.size)]
    try:
        return subprocess.run(argv, capture_output=True, text=True, pass_fds=(fd,) if fd is not None else ())
    finally:
        if fd is not None:
            os.close(fd)


def image_info(path: Path) -> dict[str, Any]:
    proc = subprocess.run([qemu_img(), "info", "-U", "--output=json", str(path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise VmError(f"qemu-img info failed: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def qemu_version() -> str:
    out = subprocess.run([qemu_system(), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"version\s+(\S+)", out)
    return m.group(1) if m else out.strip().splitlines()[0] if out.strip() else "unknown"


# ---------------------------------------------------------------- accel probe

ACCEL_TTL_S = 3600.0
PROBE_TIMEOUT_S = 6.0


@dataclass(frozen=True)
class AccelInfo:
    accel: Accel
    reason: str
    checked_at: float = 0.0
    cpu: str | None = None  # -cpu model that booted under KVM ("host", or None for QEMU's default)


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def probe_accel(kernel: Path, refresh: bool = False) -> AccelInfo:
    """KVM if a KVM guest prints its first kernel line within a few seconds, else TCG.

    Why boot instead of opening /dev/kvm: on some hosts /dev/kvm exists but guests hang
    (nested virtualisation without the needed features). The verdict is cached per host
    boot for an hour; $IOLAB_ACCEL=kvm|tcg overrides it.
    """
    forced = os.environ.get("IOLAB_ACCEL")
    if forced in ("kvm", "tcg"):
        return AccelInfo(forced, f"forced by IOLAB_ACCEL={forced}", time.time())  # type: ignore[arg-type]
    cache = paths.cache_dir() / "accel.json"
    if not refresh:
        cached = _cached_accel(cache)
        if cached:
            return cached
    info = _probe_kvm(kernel)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"boot_id": _boot_id(), "accel": info.accel, "reason": info.reason,
                                 "checked_at": info.checked_at, "cpu": info.cpu}))
    return info


def detect_accel(refresh: bool = False) -> AccelInfo:
    """probe_accel with the host's own kernel, for `iolab doctor` (no guest image needed)."""
    from iolab.vm.guest_image import host_kernel

    return probe_accel(host_kernel()[0], refresh=refresh)


def _cached_accel(cache: Path) -> AccelInfo | None:
    try:
        data = json.loads(cache.read_text())
    except (OSError, ValueError):
        return None
    if data.get("boot_id") != _boot_id() or time.time() - data.get("checked_at", 0) > ACCEL_TTL_S:
        return None
    return AccelInfo(data["accel"], data["reason"] + " (cached)", data["checked_at"], data.get("cpu"))


def _probe_kvm(kernel: Path) -> AccelInfo:
    """Try -cpu host first (best for KVM), then QEMU's default model; TCG if neither boots."""
    now = time.time()
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return AccelInfo("tcg", "/dev/kvm missing or not accessible", now)
    reasons = []
    for cpu in ("host", None):
        ok, why = _kvm_boots(kernel, cpu)
        if ok:
            return AccelInfo("kvm", f"a KVM guest (-cpu {cpu or 'default'}) printed its first kernel line",
                             now, cpu)
        reasons.append(f"-cpu {cpu or 'default'}: {why}")
    return AccelInfo("tcg", "KVM unusable: " + "; ".join(reasons), now)


def _kvm_boots(kernel: Path, cpu: str | None) -> tuple[bool, str]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="iolab-accel-") as tmp:
        console = Path(tmp) / "console.log"
        argv = [qemu_system(), "-name", "iolab-accel-probe", "-nodefaults", "-nographic", "-no-reboot",
                "-accel", "kvm", *(["-cpu", cpu] if cpu else []), "-m", "128M", "-kernel", str(kernel),
                "-append", "console=ttyS0 panic=-1",
                "-chardev", f"file,id=c,path={_opt_path(console)}", "-serial", "chardev:c"]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            deadline = time.monotonic() + PROBE_TIMEOUT_S
            while time.monotonic() < deadline:
                text = console.read_text(errors="replace") if console.exists() else ""
                if "Linux version" in text:
                    return True, "booted"
                if proc.poll() is not None:
                    err = (proc.stderr.read() if proc.stderr else b"").decode(errors="replace")
                    return False, f"QEMU failed: {err.strip()[-200:]}"
                time.sleep(0.05)
            return False, f"no kernel output within {PROBE_TIMEOUT_S:.0f} s (guest hangs)"
        finally:
            _kill_group(proc)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


# ---------------------------------------------------------------- QMP in a private loop

T = TypeVar("T")


class QmpSession:
    """qemu.qmp's asyncio QMPClient driven from sync code through a private loop thread."""

    def __init__(self, sock: Path):
        from qemu.qmp import QMPClient

        self.sock = sock
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="iolab-qmp", daemon=True)
        self.thread.start()
        self.client = QMPClient("iolab")

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def connect(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._run(self.client.connect(str(self.sock)), timeout=5)
                return
            except Exception as exc:  # the socket appears shortly after QEMU starts
                if time.monotonic() > deadline:
                    raise VmError(f"cannot connect to QMP at {self.sock}: {exc}") from exc
                time.sleep(0.05)

    def execute(self, cmd: str, args: dict[str, Any] | None = None, timeout: float = 10.0) -> Any:
        return self._run(self.client.execute(cmd, args), timeout)

    def close(self) -> None:
        try:
            self._run(self.client.disconnect(), timeout=3)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=3)
        self.loop.close()


# ---------------------------------------------------------------- the VM

BOOT_TIMEOUT_S = {"kvm": 30.0, "tcg": 90.0}


@dataclass
class QemuVM:
    """One QEMU process: start (boot to agent hello), QMP, shutdown; always reaped.

    The process is recorded in the ledger before anything relies on it, so a crash of
    iolab leaves a tagged pid for `iolab clean` (see iolab.vm.cleanup).
    """

    spec: VmSpec
    files: RunFiles
    ledger: Ledger
    proc: subprocess.Popen[bytes] | None = None
    argv: list[str] = field(default_factory=list)
    qmp: QmpSession | None = None
    channel: AgentChannel | None = None
    kernel_release: str | None = None
    boot_seconds: float | None = None
    started_at: float | None = None  # time.monotonic() just before QEMU was launched
    _res: Resource | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, boot_timeout_s: float | None = None) -> None:
        """Launch and wait for the agent's hello; on any failure kill QEMU and raise VmError."""
        self.files.directory.mkdir(parents=True, exist_ok=True)
        fd = self.spec.secret.open_fd() if self.spec.secret is not None else None
        try:
            self.argv = build_command(self.spec, self.files, qemu_system(), secret_fd=fd)
            t0 = self.started_at = time.monotonic()
            with open(self.files.stderr, "wb") as err:
                self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                             start_new_session=True, pass_fds=(fd,) if fd is not None else ())
        finally:
            if fd is not None:
                os.close(fd)
        self._res = self.ledger.add("process", str(self.proc.pid), tag=self.spec.tag, what="qemu",
                                    argv0=self.argv[0])
        timeout = boot_timeout_s or BOOT_TIMEOUT_S[self.spec.accel]
        try:
            self.channel = AgentChannel(self.files.agent, diagnose=self.diagnosis)
            self.channel.connect(timeout_s=10.0)
            self.qmp = QmpSession(self.files.qmp)
            self.qmp.connect()
            hello = self.channel.wait_hello(timeout, alive=self.alive)
        except BaseException as exc:
            self.kill()
            if not isinstance(exc, Exception):  # Ctrl-C: already cleaned up, let it through
                raise
            why = str(exc) or type(exc).__name__
            raise VmError(f"guest {self.spec.tag} did not come up: {why}\n{self.diagnosis()}") from exc
        self.kernel_release = hello.text("k")
        self.boot_seconds = time.monotonic() - t0

    def console_tail(self, n: int = 3000) -> str:
        try:
            data = self.files.console.read_bytes()[-n:]
        except OSError:
            return ""
        return data.decode(errors="replace").replace("\x1b", "")

    def diagnosis(self) -> str:
        """Why a guest failed, for error messages: QEMU's exit, its stderr, the console tail."""
        parts = []
        if self.proc is not None and self.channel is not None and self.channel.closed_reason:
            self._wait_exit(2.0)  # the channel closes a moment before QEMU can be reaped
        if self.proc is not None and self.proc.poll() is not None:
            parts.append(f"QEMU exited with status {self.proc.returncode}")
        try:
            err = self.files.stderr.read_text(errors="replace").strip()
        except OSError:
            err = ""
        if err:
            parts.append("QEMU stderr:\n" + err[-1500:])
        tail = self.console_tail()
        parts.append("guest console tail:\n" + (tail if tail.strip() else "(empty)"))
        return "\n".join(parts)

    def blockstats(self) -> list[dict[str, Any]]:
        if self.qmp is None:
            raise VmError("QMP is not connected")
        return self.qmp.execute("query-blockstats")

    def shutdown(self, timeout_s: float = 15.0) -> None:
        """Agent power-off, then QMP quit, then SIGKILL: each step only if the last one failed."""
        if self.alive() and self.channel is not None and self.channel.hello is not None:
            try:
                self.channel.poweroff()
            except Exception:
                pass
            self._wait_exit(timeout_s / 2)
        if self.alive() and self.qmp is not None:
            try:
                self.qmp.execute("quit", timeout=3)
            except Exception:
                pass
            self._wait_exit(timeout_s / 2)
        self.kill()

    def _wait_exit(self, timeout_s: float) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass

    def kill(self) -> None:
        """Kill and reap QEMU, close the channels, release the ledger entry. Idempotent."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc is not None:
            self.proc.wait()
        if self.channel is not None:
            self.channel.close()
        if self.qmp is not None:
            self.qmp.close()
            self.qmp = None
        if self._res is not None:
            self.ledger.forget(self._res)  # reaped above: nothing left for the cleaner
            self._res = None
