"""The test disk's image file: qemu-img create and info, and the qemu-io prefill.

Side effects only; what the image must be is decided by `disk.DiskSpec`. The LUKS key
reaches qemu-img through an inherited pipe (`disk.Secret`), never argv or a file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from iolab.core import children
from iolab.core.errors import CapabilityMissing
from iolab.vm.disk import DiskSpec, Secret
from iolab.vm.errors import VmError

# qemu-img's LUKS set-up times PBKDF2 on its thread's CPU clock and, in Debian 12's QEMU 7.2,
# gives up when the first short round reads 0 ms ("Unable to get accurate CPU usage"; a QEMU bug,
# fixed upstream in 2025 by Daniel Berrange's "crypto: fix bogus error benchmarking pbkdf on fast
# machines"). Measured here: 15 % of attempts on an idle host, 55 % with both cores busy, in runs
# of up to 4; five back-to-back attempts lost the whole encrypted guest of a CI run. A failed
# attempt costs ~10 ms, so keep trying, spaced out, until a deadline.
LUKS_CREATE_DEADLINE_S = 30.0
LUKS_RETRY_PAUSE_S = 0.05
LUKS_BENCHMARK_BUG = "Unable to get accurate CPU usage"
PREFILL_CHUNK = 64 << 20
PREFILL_BYTE = 0x5A


def qemu_img() -> str:
    exe = shutil.which("qemu-img")
    if not exe:
        raise CapabilityMissing("qemu-img not found (Debian: apt-get install qemu-utils)")
    return exe


def create_image(disk: DiskSpec, path: Path, secret: Secret | None = None) -> int:
    """qemu-img create with the disk's format options; an encrypted disk needs its Secret.

    Returns how many qemu-img runs it took (more than one only for LUKS, see
    LUKS_CREATE_DEADLINE_S)."""
    disk.validate()
    if disk.encrypt != "none" and secret is None:
        raise ValueError("an encrypted image needs a Secret")
    deadline = time.monotonic() + LUKS_CREATE_DEADLINE_S
    attempts = 0
    while True:
        proc = _qemu_img_create(disk, path, secret if disk.encrypt != "none" else None)
        attempts += 1
        if proc.returncode == 0:
            return attempts
        if LUKS_BENCHMARK_BUG not in proc.stderr or time.monotonic() > deadline:
            break
        path.unlink(missing_ok=True)  # only a benchmark went wrong (see LUKS_CREATE_DEADLINE_S)
        time.sleep(LUKS_RETRY_PAUSE_S)
    why = (f" ({attempts} attempts in {LUKS_CREATE_DEADLINE_S:.0f} s: QEMU's PBKDF2 benchmark "
           "keeps reading 0 ms of CPU time; a newer QEMU fixes it)") if LUKS_BENCHMARK_BUG in proc.stderr else ""
    raise VmError(f"qemu-img create failed: {proc.stderr.strip()}{why}\ncommand: {proc.args}")


def _qemu_img_create(disk: DiskSpec, path: Path, secret: Secret | None) -> subprocess.CompletedProcess[str]:
    fd = secret.open_fd() if secret else None
    obj = ["--object", Secret.object_arg(fd)] if fd is not None else []
    argv = [qemu_img(), "create", "-q", *obj, "-f", disk.format, "-o", ",".join(disk.create_options()),
            str(path), str(disk.size)]
    try:
        return children.run(argv, capture_output=True, text=True, pass_fds=(fd,) if fd is not None else ())
    finally:
        if fd is not None:
            os.close(fd)


def image_info(path: Path) -> dict[str, Any]:
    """`qemu-img info --output=json` (-U: also while QEMU holds the image's lock)."""
    proc = children.run([qemu_img(), "info", "-U", "--output=json", str(path)],
                        capture_output=True, text=True)
    if proc.returncode != 0:
        raise VmError(f"qemu-img info failed: {proc.stderr.strip()}")
    info: dict[str, Any] = json.loads(proc.stdout)
    return info


def prefill(image: Path, fmt: str, size: int) -> None:
    """Write a pattern over the whole virtual disk through qemu-io, so every qcow2 cluster is
    allocated and no read of the trials hits a hole."""
    exe = shutil.which("qemu-io")
    if not exe:
        raise CapabilityMissing("qemu-io is needed for prefill (Debian: apt-get install qemu-utils)")
    cmds = []
    for off in range(0, size, PREFILL_CHUNK):
        cmds += ["-c", f"write -P {PREFILL_BYTE:#x} {off} {min(PREFILL_CHUNK, size - off)}"]
    proc = children.run([exe, "-f", fmt, *cmds, str(image)], capture_output=True, text=True)
    if proc.returncode != 0 or "error" in proc.stdout.lower():
        raise VmError(f"prefilling {image} failed: {(proc.stderr or proc.stdout).strip()[-500:]}")
