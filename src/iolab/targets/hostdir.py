"""Host directory target: the workload does I/O on files in a directory of the host.

Without a directory, iolab makes a scratch one and removes it afterwards. A given
directory is never removed, and what it held before the study stays as it was: every
entry there at set-up is bound read-only over itself in the trials' confinement
(core/confine.py), so it can be neither written nor removed, whatever name a job file
reaches it by, unless the user named that file with --destroy-data. A system directory
(`/`, /etc, /usr, /proc, ..., anything on a pseudo filesystem) is refused when the spec is
read (core.inputs.system_directory_problem).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

import iolab.core.cleaners  # noqa: F401
from iolab.cgroups.executor import HostExecutor
from iolab.core import diskguard, owner, paths, sizing
from iolab.core.confine import Confinement, preexisting
from iolab.core.inputs import path_problem, system_directory_problem
from iolab.core.resources import Ledger, Resource
from iolab.targets import blockinfo
from iolab.targets.base import Placement, Target, TargetOffer, TargetParams, close_host
from iolab.targets.offer import HOST_CAPABILITIES


class HostDirParams(TargetParams):
    kind: Literal["host"] = "host"
    directory: str | None = Field(None, description="an existing directory; default: a scratch dir iolab removes")

    @field_validator("directory")
    @classmethod
    def _exists(cls, v: str | None) -> str | None:
        if v is None:
            return None
        problem = path_problem(v)
        if problem:
            raise ValueError(f"the path {problem}")
        if v and not Path(v).is_dir():
            raise ValueError(f"directory {v!r} does not exist")
        problem = system_directory_problem(v)
        if problem:
            raise ValueError(f"directory {problem}")
        return str(Path(v).resolve())


class HostDirTarget(Target):
    kind: ClassVar[str] = "host"
    Params: ClassVar[type[TargetParams]] = HostDirParams
    params: HostDirParams

    def __init__(self, params: TargetParams, ledger: Ledger):
        super().__init__(params, ledger)
        self.made: Resource | None = None
        self.executor: HostExecutor | None = None

    @classmethod
    def offer(cls, params: TargetParams) -> TargetOffer:
        """A directory on the host: the user's, or a scratch one made at setup; its free space
        and inodes now (what a workload's files can use, as far as known before the run)."""
        assert isinstance(params, HostDirParams)
        where = Path(params.directory) if params.directory else paths.scratch_dir()
        free, inodes = _room(where)
        return TargetOffer(
            kind=cls.kind, where="host", storage=frozenset({"directory"}), filesystem=_fstype(str(where)),
            directory=params.directory, capacity=free, inodes=inodes, capabilities=HOST_CAPABILITIES,
            writable=(str(where),),
            settings=f"directory = {params.directory!r}" if params.directory else f"a scratch directory in {where}",
            remedies={"capacity": "give it a directory on a larger filesystem"
                                  + ("" if params.directory else " (directory = ..., or IOLAB_SCRATCH)")})

    def describe(self) -> list[str]:
        d = self.params.directory
        if d:
            return [f"writes and removes its own files in {d}; what is there now stays read-only "
                    f"({_entries(d)}; a file named with --destroy-data excepted)",
                    f"each trial's processes can write only new files in {d} and iolab's work dir "
                    "(confined: core/confine.py)"]
        return [f"creates a scratch directory under {paths.scratch_dir()} and removes it afterwards",
                "each trial's processes can write only that directory and iolab's work dir "
                "(confined: core/confine.py)"]

    def setup(self) -> Placement:
        directory = self.params.directory
        if directory is None:
            paths.scratch_dir().mkdir(parents=True, exist_ok=True)
            d = paths.scratch_dir() / owner.tag("host", uuid.uuid4().hex[:8])  # whose it is, for clean --all
            with self.ledger.creating("dir", str(d), recursive=True) as made:
                d.mkdir()
            self.made = made
            directory = str(d)
        protected = preexisting(directory, diskguard.destroy_allowed) if self.params.directory else ()
        confinement = Confinement(writable=(directory,), protected=protected)
        self.executor = HostExecutor(paths.scratch_dir(), self.ledger, confinement=confinement)
        dev = blockinfo.device_of_path(directory)
        manifest: dict[str, Any] = {"target": "host", "directory": directory, "filesystem": _fstype(directory),
                                    "confinement": confinement.manifest()}
        if dev:
            manifest["queue"] = blockinfo.queue_settings(dev)
        return Placement(executor=self.executor, directory=directory, host_device=dev, manifest=manifest)

    def teardown(self) -> None:
        close_host(self.executor, self.ledger, self.made)
        self.executor = self.made = None


def _entries(directory: str) -> str:
    try:
        n = len(os.listdir(directory))
    except OSError:
        return "unreadable now"
    return f"{n} entr{'y' if n == 1 else 'ies'}"


def _room(directory: Path) -> tuple[int, int | None]:
    """(free bytes, free inodes) for a writer in `directory` or its nearest existing parent;
    inodes None where the filesystem does not count them (btrfs says 0)."""
    d = directory
    while not d.exists() and d != d.parent:
        d = d.parent
    st = os.statvfs(d)
    return sizing.free_bytes(directory), (st.f_favail or None) if st.f_files else None


def _fstype(path: str) -> str | None:
    best, fstype = "", None
    real = os.path.realpath(path)
    with open("/proc/mounts") as f:
        for line in f:
            _, mnt, typ = line.split()[:3]
            if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, fstype = mnt, typ
    return fstype
