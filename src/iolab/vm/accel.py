"""Which accelerator a guest gets: KVM only if a KVM guest really boots here, else TCG.

Why boot instead of opening /dev/kvm: on some hosts /dev/kvm exists but guests fail or
hang (nested virtualisation without the features a guest needs, e.g. kvm-pvm). The
probe boots the kernel alone with the same `-accel kvm [-cpu ...]` arguments a guest
gets (`cmdline.accel_args`), `-cpu host` first, then QEMU's default model. The verdict
is cached per host boot for an hour; $IOLAB_ACCEL=kvm|tcg or the target's `accel`
overrides it, and a forced KVM means `-cpu host`, the model the probe prefers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iolab.core import children, paths
from iolab.core import owner as owners
from iolab.vm.cmdline import Accel, accel_args, opt_path, qemu_system
from iolab.vm.guest_image import host_kernel

AccelChoice = Literal["auto", "kvm", "tcg"]

ACCEL_TTL_S = 3600.0
PROBE_TIMEOUT_S = 6.0
KVM_CPU_MODELS: tuple[str | None, ...] = ("host", None)  # in order of preference; None: QEMU's default
CACHE_NAME = "accel.json"


@dataclass(frozen=True)
class AccelInfo:
    accel: Accel
    reason: str
    checked_at: float = 0.0
    cpu: str | None = None  # -cpu model that booted under KVM ("host", or None for QEMU's default)


def choose(requested: AccelChoice, kernel: Path) -> AccelInfo:
    """The accelerator a target boots with: probed for `auto`, else as the spec says."""
    if requested == "auto":
        return probe_accel(kernel)
    return _forced(requested, "set in the spec")


def _forced(accel: Accel, reason: str) -> AccelInfo:
    return AccelInfo(accel, reason, time.time(), KVM_CPU_MODELS[0] if accel == "kvm" else None)


def probe_accel(kernel: Path, refresh: bool = False) -> AccelInfo:
    """KVM if a KVM guest prints its first kernel line within a few seconds, else TCG."""
    forced = os.environ.get("IOLAB_ACCEL")
    if forced == "kvm" or forced == "tcg":
        return _forced("kvm" if forced == "kvm" else "tcg", f"forced by IOLAB_ACCEL={forced}")
    cache = paths.cache_dir() / CACHE_NAME
    if not refresh:
        cached = read_cache(cache)
        if cached:
            return cached
    info = _probe_kvm(kernel)
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_name(f".{cache.name}.{os.getpid()}")  # two runs at once never read half a verdict
    tmp.write_text(json.dumps({"boot_id": boot_id(), "accel": info.accel, "reason": info.reason,
                               "checked_at": info.checked_at, "cpu": info.cpu}))
    os.replace(tmp, cache)
    return info


def detect_accel(refresh: bool = False) -> AccelInfo:
    """probe_accel with the host's own kernel, for `iolab doctor` (no guest image needed)."""
    return probe_accel(host_kernel()[0], refresh=refresh)


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def read_cache(cache: Path) -> AccelInfo | None:
    """The verdict of this host boot, if younger than ACCEL_TTL_S; None for anything unreadable."""
    try:
        data = json.loads(cache.read_text())
        if data.get("boot_id") != boot_id() or not 0 <= time.time() - float(data["checked_at"]) <= ACCEL_TTL_S:
            return None
        accel, cpu = data["accel"], data.get("cpu")
        if accel not in ("kvm", "tcg") or not (cpu is None or cpu in KVM_CPU_MODELS):
            return None
        return AccelInfo(accel, str(data["reason"]) + " (cached)", float(data["checked_at"]), cpu)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _probe_kvm(kernel: Path) -> AccelInfo:
    """Try each KVM_CPU_MODELS entry in turn; TCG if none boots."""
    now = time.time()
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return AccelInfo("tcg", "/dev/kvm missing or not accessible", now)
    reasons = []
    for cpu in KVM_CPU_MODELS:
        ok, why = _kvm_boots(kernel, cpu)
        if ok:
            return AccelInfo("kvm", f"a KVM guest (-cpu {cpu or 'default'}) printed its first kernel line",
                             now, cpu)
        reasons.append(f"-cpu {cpu or 'default'}: {why}")
    return AccelInfo("tcg", "KVM unusable: " + "; ".join(reasons), now)


def _kvm_boots(kernel: Path, cpu: str | None) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory(prefix=owners.tag("accel") + "-") as tmp:
        console = Path(tmp) / "console.log"
        argv = [qemu_system(), "-name", owners.tag("accel-probe"), "-nodefaults", "-nographic", "-no-reboot",
                *accel_args("kvm", cpu), "-m", "128M", "-kernel", str(kernel),
                "-append", "console=ttyS0 panic=-1",
                "-chardev", f"file,id=c,path={opt_path(console)}", "-serial", "chardev:c"]
        proc = children.start(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, start_new_session=True)
        try:
            deadline = time.monotonic() + PROBE_TIMEOUT_S
            while time.monotonic() < deadline:
                text = console.read_text(errors="replace") if console.exists() else ""
                if "Linux version" in text:
                    return True, "booted"
                if proc.poll() is not None:
                    err = (proc.stderr.read() if proc.stderr else b"").decode(errors="replace")
                    return False, f"QEMU failed: {' '.join(err.split())[-200:]}"  # one line, for doctor
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
    if proc.stderr is not None:
        proc.stderr.close()
