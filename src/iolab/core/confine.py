"""Confinement: a trial's processes can write only what iolab made or the user named.

Why: the job-file sandbox (fio/sandbox.py) predicts how fio will read a file and
which names it will open. Two rounds of hostile inputs showed that such a prediction is
always one fio option behind (a default file name, a placeholder, a symlink at the name fio
really opens). So the guarantee is given by the kernel instead, per trial: every host
process that does a trial's I/O runs in a private mount namespace where

* the root filesystem is read-only (a symlink to /etc/passwd or to a file elsewhere on the
  root disk points at something that cannot be written);
* only what the trial may write is mounted writable at its own path: the executor's work
  dir, the trial's scratch directory or the user's host directory (`writable`);
* inside a writable directory, what existed before iolab began (`protected`) is bound
  read-only over itself: it can be neither written nor removed nor renamed over (a mount
  point is busy), unless the user named it with --destroy-data;
* /dev is private: the standard character devices (null, zero, full, random, urandom, tty)
  plus only the devices this trial may use (`devices`: the loop device iolab made for it, a
  device the user named with --destroy-data, /dev/kvm for QEMU). A symlink to /dev/vda then
  points at nothing. The writable binds are `nodev`, so a device node planted in a
  directory opens nothing either;
* /proc is the process's own (a private pid namespace) and read-only whole (uid 0 without
  capabilities could still write the root-owned sysctls in /proc/sys), /sys is read-only (so
  no process can leave its cgroup), IPC, UTS and, by default, network namespaces are private;
* the capabilities are only those that reading and writing the allowed files needs
  (DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER), under no_new_privs: no mount, no mknod, no raw
  I/O, no real-time I/O priority or negative nice (CAP_SYS_NICE), no way to gain more by exec.

The tool is bubblewrap (`bwrap`, Debian package bubblewrap): the well-kept program that
Flatpak and GNOME use for exactly this (a new root assembled from read-only and writable
binds, a fresh /dev and /proc, capabilities dropped, no_new_privs), small enough to read, and
packaged by every distribution. It is an argv prefix, so the executor's other duties compose
unchanged: the process still joins its trial cgroup leaf between fork and exec (bwrap and all
it starts inherit it), is counted and ended through it, and a stop signal still reaches iolab
first. See docs/threat-model.md for what this guarantees and what it does not.

The same primitive confines a process that must write nothing but its own work directory,
as an unprivileged user, with the network shared (`Confinement.own_dir_only`): the fleet's
`fio --client`, which a remote fio server can ask to send any file or write logs where it likes.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from iolab.core.errors import CapabilityMissing, RefusedError

BWRAP = "bwrap"
SETPRIV = "setpriv"
# What reading and writing the allowed files needs: a host directory owned by another user
# (DAC_OVERRIDE, DAC_READ_SEARCH) and fio's own files (FOWNER: utimes, fallocate modes).
FILE_CAPS = ("CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER")
SHM_BYTES = 256 << 20  # the private /dev/shm (tmpfs, charged to the trial's memory limit)
MAX_PROTECTED = 4096  # pre-existing entries of a host directory bound read-only, one mount each
NOBODY = 65534


@dataclass(frozen=True)
class Confinement:
    """What the confined processes of one executor may write; everything else is read-only or absent.

    writable:  directories (or files) bound read-write at their own path
    protected: entries inside writable directories bound read-only over themselves (what a
               host directory held before iolab began)
    devices:   device nodes bound into the private /dev at their real path (block devices
               iolab made or the user named with --destroy-data; /dev/kvm for QEMU)
    hidden:    directories replaced by an empty read-only tmpfs (a home, secrets)
    share_net: keep the host's network namespace (QEMU's user network forwards host ports;
               a fleet client dials its servers); else a private one with only loopback
    private_pids: a pid namespace of its own (its /proc shows only itself); off for QEMU,
               whose host pid probes attach to
    user:      (uid, gid) to run as, with every capability dropped (own_dir_only)
    """

    writable: tuple[str, ...] = ()
    protected: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    share_net: bool = False
    private_pids: bool = True
    user: tuple[int, int] | None = None
    caps: tuple[str, ...] = FILE_CAPS
    notes: tuple[str, ...] = field(default=(), compare=False)  # for the plan: why a path is writable

    # -- building ---------------------------------------------------------------------------------
    @classmethod
    def own_dir_only(cls, directory: str | None = None, uid: int = NOBODY, gid: int = NOBODY,
                     hidden: Sequence[str] = ("/root", "/home", "/run", "/var/lib", "/etc/iolab")) -> Confinement:
        """A process that may write nothing but its own directory, as an unprivileged user with
        no capability, seeing no home directory, with the network shared: the fleet's
        `fio --client`, whom a remote server can ask to send any file or write logs anywhere.

        `directory` None: the executor's work dir only; a HostExecutor given this confinement
        hands its work dir to (uid, gid). Another directory the caller makes writable for
        (uid, gid) (os.chown) and reachable (its parents searchable by others: not under a
        0700 directory such as a pytest tmp dir)."""
        return cls(writable=(directory,) if directory else (), hidden=tuple(h for h in hidden if os.path.isdir(h)),
                   share_net=True, user=(uid, gid), caps=())

    def with_writable(self, *paths: str) -> Confinement:
        return replace(self, writable=_unique(self.writable + tuple(paths)))

    def with_devices(self, *paths: str) -> Confinement:
        return replace(self, devices=_unique(self.devices + tuple(paths)))

    def with_protected(self, *paths: str) -> Confinement:
        return replace(self, protected=_unique(self.protected + tuple(paths)))

    # -- running ----------------------------------------------------------------------------------
    def argv(self, command: Sequence[str], cwd: str | None = None, extra_devices: Iterable[str] = (),
             info_fd: int | None = None) -> list[str]:
        """`command` inside the confinement: bwrap's arguments, then (as a user) setpriv's.
        `info_fd`: bwrap writes {"child-pid": N} there, the host pid of the command (without a
        private pid namespace; bwrap itself is its parent)."""
        bwrap = shutil.which(BWRAP)
        if not bwrap:
            raise CapabilityMissing("bwrap (bubblewrap) not found: iolab confines every trial's processes with it. "
                                    "Debian/Ubuntu: apt-get install bubblewrap")
        args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev"]
        # a fresh /proc read-only whole: as uid 0, even without capabilities, a process may write
        # the root-owned files in /proc/sys (drop_caches, ...) and /proc/scsi, /proc/mtrr
        args += (["--unshare-pid", "--proc", "/proc", "--remount-ro", "/proc"] if self.private_pids
                 else ["--ro-bind", "/proc", "/proc"])
        args += ["--unshare-ipc", "--unshare-uts"] + ([] if self.share_net else ["--unshare-net"])
        # a private /dev/shm before the binds: a writable path iolab made there (a scratch dir on
        # /dev/shm) is bound back in over it, not hidden by it
        args += ["--size", str(SHM_BYTES), "--tmpfs", "/dev/shm"]
        for h in self.hidden:  # an empty tmpfs first, so a writable path inside can be bound back in
            args += ["--tmpfs", h]
        args += self._binds()
        for h in self.hidden:
            args += ["--remount-ro", h]
        for dev in _unique(tuple(self.devices) + tuple(extra_devices)):
            args += ["--dev-bind", dev, _dev_path(dev)]
        args += ["--remount-ro", "/dev"]
        if cwd:
            args += ["--chdir", cwd]
        if info_fd is not None:
            args += ["--info-fd", str(info_fd)]
        args += ["--cap-drop", "ALL"]
        keep = list(self.caps) + (["CAP_SETUID", "CAP_SETGID"] if self.user else [])
        for cap in keep:
            args += ["--cap-add", cap]
        args.append("--")
        if self.user:
            setpriv = shutil.which(SETPRIV)
            if not setpriv:
                raise CapabilityMissing("setpriv (util-linux) not found: needed to run a process as another user")
            uid, gid = self.user
            args += [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--inh-caps=-all",
                     "--bounding-set=-all", "--"]
        return args + list(command)

    def _binds(self) -> list[str]:
        """Writable binds, then protected entries over them, then writable carve-outs inside
        those (a work dir under a protected directory): each mount after the ones it sits in."""
        mounts: list[tuple[int, int, str, str]] = []
        for i, p in enumerate(self.writable):
            mounts.append((_depth(p), i, "--bind", p))
        for i, p in enumerate(self.protected):
            mounts.append((_depth(p), len(self.writable) + i, "--ro-bind-try", p))
        out: list[str] = []
        for mount in sorted(mounts):
            out += [mount[2], mount[3], mount[3]]
        return out

    # -- the plan ---------------------------------------------------------------------------------
    def describe(self) -> list[str]:
        """What the confined processes can write, for --dry-run and the manifest."""
        lines = [f"can write {p}" for p in self.writable]
        if self.protected:
            n = len(self.protected)
            lines.append(f"cannot write or remove the {n} entr{'y' if n == 1 else 'ies'} that were there before "
                         "(bound read-only)")
        block = [d for d in self.devices if _is_block(d)]
        lines += [f"can write the block device {d}" for d in block]
        other = [d for d in self.devices if d not in block]
        if other:
            lines.append(f"sees the devices {', '.join(other)}")
        lines.append("everything else read-only; /dev holds only null, zero, full, random, urandom, tty"
                     + ("" if self.share_net else "; no network"))
        return lines + list(self.notes)

    def manifest(self) -> dict[str, object]:
        return {"tool": BWRAP, "writable": list(self.writable), "protected": len(self.protected),
                "devices": list(self.devices), "network": "host" if self.share_net else "none",
                "user": list(self.user) if self.user else None, "capabilities": list(self.caps)}


def returncode(status: int) -> int:
    """A confined command's status as subprocess gives an unconfined one: bwrap reports a command
    killed by signal N as exit status 128+N (the shell's convention); this says -N."""
    return -(status - 128) if 128 < status <= 128 + 64 else status


def preexisting(directory: str, allowed: Callable[[str], bool] = lambda _path: False) -> tuple[str, ...]:
    """The entries of `directory` (not recursive: a subdirectory is bound read-only whole) that
    must stay as they are: every one, except those `allowed` says the user named
    (--destroy-data) and symlinks, which cannot be mounted over (what they point at is itself
    read-only or absent inside).

    Raises RefusedError above MAX_PROTECTED entries (one mount each): name an emptier directory."""
    out = []
    with os.scandir(directory) as it:
        for entry in it:
            if entry.is_symlink():
                continue
            path = os.path.join(directory, entry.name)
            if entry.is_file(follow_symlinks=False) and allowed(path):
                continue
            out.append(path)
            if len(out) > MAX_PROTECTED:
                raise RefusedError(f"{directory} holds more than {MAX_PROTECTED} entries: iolab keeps each one "
                                   "read-only during the study (one mount each). Name an emptier directory, or a "
                                   "new subdirectory of it")
    return tuple(sorted(out))


def _unique(items: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _depth(path: str) -> int:
    return len([c for c in path.split("/") if c])


def _dev_path(dev: str) -> str:
    """Where a device is bound inside: its own path when that is under /dev, else /dev/NAME."""
    return dev if dev.startswith("/dev/") else f"/dev/{Path(dev).name}"


def _is_block(path: str) -> bool:
    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        return False
