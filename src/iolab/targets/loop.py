"""The embedded default target: a scratch loop device on a pre-filled image file.

Nobody needs a spare disk: iolab creates an image under the scratch dir, fills it with
data (so reads reach the disk instead of reading holes), attaches it with direct I/O
(so the host page cache does not absorb the loop device's I/O) and, if asked, puts a
filesystem on it. Everything is recorded in the ledger before use.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

import iolab.core.cleaners  # noqa: F401  (registers the cleaners this target relies on)
from iolab.cgroups import (
    cleanup as _cgroup_cleaners,  # noqa: F401  (registers the "scheduler" cleaner)
)
from iolab.cgroups import scheduler as sched
from iolab.cgroups.device import resolve
from iolab.cgroups.executor import HostExecutor
from iolab.core import children, owner, paths, sizing
from iolab.core.confine import Confinement
from iolab.core.errors import CapabilityMissing
from iolab.core.resources import Ledger, Resource
from iolab.core.units import format_size, parse_size
from iolab.targets import blockinfo
from iolab.targets.base import MachineCheck, Placement, Target, TargetOffer, TargetParams
from iolab.targets.offer import HOST_CAPABILITIES


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
    """Image file -> loop device -> optional ext4 mounted. Also used by VM and cgroup targets.

    Every step is a pending ledger entry before it happens (core.resources.Ledger.creating),
    so a kill at any instant leaves nothing `iolab clean` cannot find: the loop device by
    its backing file, the mount by its path. Names carry the owner's tag (core.owner).
    """
    scratch = paths.scratch_dir()
    scratch.mkdir(parents=True, exist_ok=True)
    tag = owner.tag(label, uuid.uuid4().hex[:8])
    image = scratch / f"{tag}.img"
    _check_space(scratch, size)
    made: list[Resource] = []
    loop = ScratchLoop(device="", image=image, mountpoint=None, resources=made)
    try:
        with ledger.creating("file", str(image)) as res:
            fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        made.append(res)
        _fill_image(fd, size, prefill)
        with ledger.creating("loop", "", backing=str(image)) as res:
            loop.device = _attach(image, direct_io, sector_size)
            ledger.update(res, ident=loop.device)
        made.append(res)
        if filesystem == "ext4":
            children.run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", loop.device],
                         check=True, capture_output=True)
            mnt = scratch / f"{tag}.mnt"
            with ledger.creating("dir", str(mnt)) as res:
                mnt.mkdir()
            made.append(res)
            with ledger.creating("mount", str(mnt)) as res:
                children.run(["mount", loop.device, str(mnt)], check=True, capture_output=True)
            made.append(res)
            loop.mountpoint = mnt
    except BaseException:
        try:
            release_scratch_loop(ledger, loop)
        except Exception:
            pass  # what is left stays in the ledger: the runner's release_all or `iolab clean` retries
        raise
    return loop


def scratch_offer(kind: str, size: int, filesystem: str, settings: str, remedies: dict[str, str],
                  reserved: int = 0) -> TargetOffer:
    """The offer of a scratch loop device on the host (loop and cgroups targets): the raw
    device of `size` bytes, or the ext4 made on it, less `reserved` bytes of iolab's own."""
    if filesystem == "ext4":
        free, inodes = sizing.ext4_capacity(size)
        return TargetOffer(kind=kind, settings=settings, where="host", storage=frozenset({"directory"}),
                           filesystem="ext4", capacity=max(free - reserved, 0), inodes=inodes,
                           capabilities=HOST_CAPABILITIES, writable=(str(paths.scratch_dir()),), remedies=remedies)
    return TargetOffer(kind=kind, settings=settings, where="host", storage=frozenset({"block_device"}),
                       capacity=size, capabilities=HOST_CAPABILITIES, writable=(str(paths.scratch_dir()),),
                       remedies=remedies)


def loop_check(loop_control: bool, losetup: str | None) -> MachineCheck:
    """`iolab doctor`: loop devices, which every scratch target (loop, cgroups, a guest's image) is."""
    if loop_control and losetup:
        return MachineCheck("loop", "ok", "loop devices available (/dev/loop-control, losetup)")
    if not loop_control:
        return MachineCheck("loop", "fail", "no /dev/loop-control: load the loop module (modprobe loop); every "
                                            "scratch target is a loop device")
    return MachineCheck("loop", "missing", "install util-linux (losetup)")


def release_scratch_loop(ledger: Ledger, loop: ScratchLoop) -> None:
    for res in reversed(loop.resources):
        ledger.release(res)
    loop.resources.clear()


def _check_space(directory: Path, size: int) -> None:
    """Refuse an image the scratch filesystem cannot hold (also called by preflights, before
    anything exists, so a study stops before its first target rather than in the middle)."""
    problem = sizing.space_problem(size, sizing.free_bytes(directory), str(directory))
    if problem:
        raise CapabilityMissing(problem)


def _fill_image(fd: int, size: int, prefill: bool) -> None:
    """Fill with non-zero data so nothing reads holes (the file was opened O_EXCL: never someone else's)."""
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
    r = children.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise CapabilityMissing(f"could not attach a loop device ({' '.join(argv)}): {r.stderr.strip()}")
    return r.stdout.strip()


def set_scheduler(ledger: Ledger, dev: str, scheduler: str) -> Resource:
    """Switch the I/O scheduler through the machine-wide claim (restored when the last holder ends)."""
    device = resolve(dev)
    if scheduler not in sched.available(device):
        raise CapabilityMissing(f"scheduler {scheduler} is not available on {dev} "
                                f"(has: {', '.join(sched.available(device))})")
    return sched.select(device, scheduler, ledger)


class LoopTarget(Target):
    kind: ClassVar[str] = "loop"
    Params: ClassVar[type[TargetParams]] = LoopParams
    params: LoopParams

    def __init__(self, params: TargetParams, ledger: Ledger):
        super().__init__(params, ledger)
        self.loop: ScratchLoop | None = None
        self.executor: HostExecutor | None = None
        self.sched: Resource | None = None

    @classmethod
    def offer(cls, params: TargetParams) -> TargetOffer:
        """A raw loop device, or the fresh ext4 iolab makes on it (its usable share and inodes)."""
        assert isinstance(params, LoopParams)
        return scratch_offer(cls.kind, params.size, params.filesystem,
                             f"filesystem = {params.filesystem!r}, size = {format_size(params.size)}",
                             {"storage:directory": 'set filesystem = "ext4"',
                              "storage:block_device": 'set filesystem = "none"',
                              "capacity": 'give it a larger size (ext4 keeps about a fifth for itself)'})

    @classmethod
    def machine_checks(cls) -> list[MachineCheck]:
        return [loop_check(Path("/dev/loop-control").exists(), shutil.which("losetup"))]

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
        what = "the filesystem on that loop device" if p.filesystem != "none" else "that loop device"
        lines.append(f"each trial's processes can write only {what} and iolab's work dir (confined: core/confine.py)")
        return lines

    def preflight(self) -> None:
        _check_space(paths.scratch_dir(), self.params.size)

    def setup(self) -> Placement:
        p = self.params
        self.loop = create_scratch_loop(self.ledger, p.size, filesystem=p.filesystem, direct_io=p.direct_io,
                                        sector_size=p.sector_size, prefill=p.prefill)
        if p.scheduler != "keep":
            self.sched = set_scheduler(self.ledger, self.loop.device, p.scheduler)
        mnt = self.loop.mountpoint
        confinement = Confinement(writable=(str(mnt),)) if mnt else Confinement(devices=(self.loop.device,))
        self.executor = HostExecutor(paths.scratch_dir(), self.ledger, confinement=confinement)
        dev = os.path.basename(self.loop.device)
        manifest = {"target": "loop", "queue": blockinfo.queue_settings(dev), "image": str(self.loop.image),
                    "backing_device": blockinfo.device_of_path(str(self.loop.image)),
                    "confinement": confinement.manifest()}
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
