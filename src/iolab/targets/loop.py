"""The embedded default target: a scratch loop device on a pre-filled image file.

Nobody needs a spare disk: iolab creates an image under the scratch dir, fills it with
data (so reads reach the disk instead of reading holes), attaches it with direct I/O
(so the host page cache does not absorb the loop device's I/O) and, if asked, puts a
filesystem on it. Everything is recorded in the ledger before use.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

import iolab.core.cleaners  # noqa: F401  (registers the cleaners this target relies on)
from iolab.core import paths
from iolab.core.errors import CapabilityMissing
from iolab.core.exec import HostExecutor
from iolab.core.resources import Ledger, Resource
from iolab.core.units import format_size, parse_size
from iolab.targets import blockinfo
from iolab.targets.base import Placement, Target, TargetParams


class LoopParams(TargetParams):
    kind: Literal["loop"] = "loop"
    size: int = Field(512 << 20, description="image size, bytes or '512M'")
    filesystem: Literal["none", "ext4"] = "none"
    direct_io: bool = True
    sector_size: Literal[512, 4096] = 512
    prefill: bool = True
    scheduler: Literal["keep", "none", "mq-deadline", "bfq", "kyber"] = "keep"

    @field_validator("size", mode="before")
    @classmethod
    def _size(cls, v: Any) -> int:
        n = parse_size(v)
        if n < (16 << 20):
            raise ValueError(f"size must be at least 16M, got {v!r}")
        return n


@dataclass
class ScratchLoop:
    """A live scratch loop device and what was created for it."""

    device: str  # /dev/loopN
    image: Path
    mountpoint: Path | None
    resources: list[Resource]


def create_scratch_loop(ledger: Ledger, size: int, *, filesystem: str = "none", direct_io: bool = True,
                        sector_size: int = 512, prefill: bool = True, label: str = "loop") -> ScratchLoop:
    """Image file -> loop device -> optional ext4 mounted. Also used by VM and cgroup targets."""
    scratch = paths.scratch_dir()
    scratch.mkdir(parents=True, exist_ok=True)
    tag = f"iolab-{label}-{uuid.uuid4().hex[:8]}"
    image = scratch / f"{tag}.img"
    _check_space(scratch, size)
    made = [ledger.add("file", str(image))]
    _write_image(image, size, prefill)
    dev = _attach(image, direct_io, sector_size)
    made.append(ledger.add("loop", dev, backing=str(image)))
    mnt = None
    if filesystem == "ext4":
        subprocess.run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", dev],
                       check=True, capture_output=True)
        mnt = scratch / f"{tag}.mnt"
        mnt.mkdir()
        made.append(ledger.add("dir", str(mnt)))
        subprocess.run(["mount", dev, str(mnt)], check=True, capture_output=True)
        made.append(ledger.add("mount", str(mnt)))
    return ScratchLoop(device=dev, image=image, mountpoint=mnt, resources=made)


def release_scratch_loop(ledger: Ledger, loop: ScratchLoop) -> None:
    for res in reversed(loop.resources):
        ledger.release(res)
    loop.resources.clear()


def _check_space(directory: Path, size: int) -> None:
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    if free < size + (256 << 20):
        raise CapabilityMissing(f"not enough space in {directory} for a {format_size(size)} scratch image "
                                f"({format_size(free)} free); set IOLAB_SCRATCH to a larger directory")


def _write_image(image: Path, size: int, prefill: bool) -> None:
    """Fill with non-zero data so nothing reads holes; O_EXCL so an existing file is never clobbered."""
    fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        if not prefill:
            os.ftruncate(fd, size)
            return
        block = (os.urandom(64) * ((1 << 20) // 64))
        left = size
        while left > 0:
            n = os.write(fd, block[: min(left, len(block))])
            left -= n
        os.fsync(fd)
    finally:
        os.close(fd)


def _attach(image: Path, direct_io: bool, sector_size: int) -> str:
    argv = ["losetup", "--find", "--show", f"--direct-io={'on' if direct_io else 'off'}",
            f"--sector-size={sector_size}", str(image)]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise CapabilityMissing(f"could not attach a loop device ({' '.join(argv)}): {r.stderr.strip()}")
    return r.stdout.strip()


def set_scheduler(ledger: Ledger, dev: str, scheduler: str) -> Resource | None:
    """Switch the I/O scheduler, recording the old one so any exit restores it."""
    path = blockinfo.sysfs(dev) / "queue" / "scheduler"
    current = path.read_text()
    active = current.split("[", 1)[1].split("]", 1)[0] if "[" in current else current.strip()
    if active == scheduler:
        return None
    if scheduler not in current.replace("[", " ").replace("]", " ").split():
        raise CapabilityMissing(f"scheduler {scheduler} is not available on {dev} (has: {current.strip()})")
    res = ledger.add("scheduler", os.path.basename(dev), previous=active)
    path.write_text(scheduler)
    return res


class LoopTarget(Target):
    kind: ClassVar[str] = "loop"
    Params: ClassVar[type[TargetParams]] = LoopParams
    params: LoopParams

    def __init__(self, params: TargetParams, ledger: Ledger):
        super().__init__(params, ledger)
        self.loop: ScratchLoop | None = None
        self.executor: HostExecutor | None = None
        self.sched: Resource | None = None

    def describe(self) -> list[str]:
        p = self.params
        lines = [f"creates a {format_size(p.size)} image under {paths.scratch_dir()} "
                 f"({'pre-filled' if p.prefill else 'sparse'}), attaches it as a loop device "
                 f"(direct-io={'on' if p.direct_io else 'off'}, sector {p.sector_size})"]
        if p.filesystem != "none":
            lines.append(f"makes {p.filesystem} on that loop device and mounts it under {paths.scratch_dir()}")
        if p.scheduler != "keep":
            lines.append(f"sets the loop device's scheduler to {p.scheduler} (restored afterwards)")
        lines.append("removes all of it at the end, also on failure or Ctrl-C")
        return lines

    def setup(self) -> Placement:
        p = self.params
        self.loop = create_scratch_loop(self.ledger, p.size, filesystem=p.filesystem, direct_io=p.direct_io,
                                        sector_size=p.sector_size, prefill=p.prefill)
        if p.scheduler != "keep":
            self.sched = set_scheduler(self.ledger, self.loop.device, p.scheduler)
        self.executor = HostExecutor(paths.scratch_dir(), self.ledger)
        dev = os.path.basename(self.loop.device)
        manifest = {"target": "loop", "queue": blockinfo.queue_settings(dev), "image": str(self.loop.image),
                    "backing_device": blockinfo.device_of_path(str(self.loop.image))}
        if self.loop.mountpoint:
            return Placement(executor=self.executor, directory=str(self.loop.mountpoint), host_device=dev,
                             manifest=manifest)
        return Placement(executor=self.executor, path=self.loop.device, host_device=dev,
                         is_block_device=True, manifest=manifest)

    def teardown(self) -> None:
        if self.executor:
            self.executor.close()
            self.executor = None
        if self.sched:
            self.ledger.release(self.sched)
            self.sched = None
        if self.loop:
            release_scratch_loop(self.ledger, self.loop)
            self.loop = None


def _restore_scheduler(res: Resource) -> None:
    path = blockinfo.sysfs(res.ident) / "queue" / "scheduler"
    if path.exists():
        path.write_text(res.info["previous"])


from iolab.core.resources import _CLEANERS, register_cleaner  # noqa: E402

if "scheduler" not in _CLEANERS:  # the cgroup package may register a richer one
    register_cleaner("scheduler", _restore_scheduler)
