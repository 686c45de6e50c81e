"""Host directory target: the workload does I/O on files in a directory of the host.

Every trial's files live in a directory iolab makes for the study and removes afterwards:
under the scratch dir when no directory is named, else *inside* the directory the user named
(`<directory>/iolab-o<owner>-host-<id>`, on the filesystem under test). The confinement
(core/confine.py) makes only that new directory writable, so nothing a job file or a spec
asks for can create, change or remove a name anywhere else: not a file that was in the user's
directory, and not a new one either (a spec naming ~/.ssh cannot leave an authorized_keys
there; it could only write inside iolab's own subdirectory, which goes with the study). A
system directory (`/`, /etc, /usr, /proc, ..., anything on a pseudo filesystem) is refused
when the spec is read (core.inputs.system_directory_problem).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

import iolab.core.cleaners  # noqa: F401
from iolab.cgroups.executor import HostExecutor
from iolab.core import owner, paths, sizing
from iolab.core.confine import Confinement
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
        """A directory on the host, made at setup (in the user's directory, or in the scratch dir);
        the free space and inodes of where it will be, now (as far as known before the run)."""
        assert isinstance(params, HostDirParams)
        where = Path(params.directory) if params.directory else paths.scratch_dir()
        free, inodes = _room(where)
        return TargetOffer(
            kind=cls.kind, where="host", storage=frozenset({"directory"}), filesystem=_fstype(str(where)),
            directory=None, capacity=free, inodes=inodes, capabilities=HOST_CAPABILITIES,
            writable=(str(where / owner.tag("host", "*")),),
            settings=f"directory = {params.directory!r}" if params.directory else f"a scratch directory in {where}",
            remedies={"capacity": "give it a directory on a larger filesystem"
                                  + ("" if params.directory else " (directory = ..., or IOLAB_SCRATCH)")})

    def describe(self) -> list[str]:
        d = self.params.directory
        where = d if d else str(paths.scratch_dir())
        lines = [f"makes a directory of its own in {where} ({owner.tag('host', '…')}), where every trial's "
                 "files go, and removes it afterwards",
                 "each trial's processes can write only that directory and iolab's work dir (confined: "
                 "core/confine.py)"]
        if d:
            lines.append(f"nothing else in {d} can be written, removed or added ({_entries(d)} there now)")
        return lines

    def setup(self) -> Placement:
        base = Path(self.params.directory) if self.params.directory else paths.scratch_dir()
        if self.params.directory is None:
            base.mkdir(parents=True, exist_ok=True)
        d = base / owner.tag("host", uuid.uuid4().hex[:8])  # whose it is, for clean --all
        with self.ledger.creating("dir", str(d), recursive=True) as made:
            d.mkdir()
        self.made = made
        directory = str(d)
        confinement = Confinement(writable=(directory,))
        self.executor = HostExecutor(paths.scratch_dir(), self.ledger, confinement=confinement)
        dev = blockinfo.device_of_path(directory)
        manifest: dict[str, Any] = {"target": "host", "directory": directory, "in": str(base),
                                    "filesystem": _fstype(directory), "confinement": confinement.manifest()}
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
