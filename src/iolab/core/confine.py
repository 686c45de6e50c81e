"""Confinement: a trial's processes can write only what iolab made or the user named.

Why: the job-file sandbox (fio/sandbox.py) predicts how fio will read a file and
which names it will open. Two rounds of hostile inputs showed that such a prediction is
always one fio option behind (a default file name, a placeholder, a symlink at the name fio
really opens). So the guarantee is given by the kernel instead, per trial: every host
process that does a trial's I/O runs in a private mount namespace where

* the root filesystem is read-only (a symlink to /etc/passwd or to a file elsewhere on the
  root disk points at something that cannot be written);
* only what the trial may write is mounted writable at its own path: the executor's work
  dir and the directory, mount or image iolab made for the trial (`writable`; in a user's
  host directory, a directory iolab made inside it: nothing that was there is writable);
* /dev is private: the standard character devices (null, zero, full, random, urandom, tty)
  plus only the devices this trial may use (`devices`: the loop device iolab made for it, a
  device the user named with --destroy-data, /dev/kvm for QEMU). A symlink to /dev/vda then
  points at nothing. The writable binds are `nodev`, so a device node planted in a
  directory opens nothing either;
* /proc is the process's own (a private pid namespace) and read-only whole (uid 0 without
  capabilities could still write the root-owned sysctls in /proc/sys), /sys is read-only (so
  no process can leave its cgroup), IPC, UTS and, by default, network namespaces are private;
* no unix-domain socket can be made (a seccomp filter, core/socketfilter.py): a read-only
  root still lets a process connect() to any socket file on the host, and as uid 0 every
  one of them answers;
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
import platform
import shutil
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from iolab.core import socketfilter
from iolab.core.errors import CapabilityMissing

BWRAP = "bwrap"
SETPRIV = "setpriv"
# What reading and writing the allowed files needs: a host directory owned by another user
# (DAC_OVERRIDE, DAC_READ_SEARCH) and fio's own files (FOWNER: utimes, fallocate modes).
FILE_CAPS = ("CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER")
SHM_BYTES = 256 << 20  # the private /dev/shm (tmpfs, charged to the trial's memory limit)
NOBODY = 65534


@dataclass(frozen=True)
class Confinement:
    """What the confined processes of one executor may write; everything else is read-only or absent.

    writable:  directories (or files) bound read-write at their own path
    devices:   device nodes bound into the private /dev at their real path (block devices
               iolab made or the user named with --destroy-data; /dev/kvm for QEMU)
    hidden:    directories replaced by an empty read-only tmpfs (a home, secrets)
    share_net: keep the host's network namespace (QEMU's user network forwards host ports;
               a fleet client dials its servers); else a private one with only loopback
    private_pids: a pid namespace of its own (its /proc shows only itself); off for QEMU,
               whose host pid probes attach to
    user:      (uid, gid) to run as, with every capability dropped (own_dir_only)
    unix_sockets: may make unix-domain sockets (QEMU's monitor, a fleet client dialling its
               servers' sockets); a trial may not (core/socketfilter.py: the kernel refuses)
    """

    writable: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    share_net: bool = False
    private_pids: bool = True
    user: tuple[int, int] | None = None
    caps: tuple[str, ...] = FILE_CAPS
    unix_sockets: bool = False
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
                   share_net=True, user=(uid, gid), caps=(), unix_sockets=True)

    def with_writable(self, *paths: str) -> Confinement:
        return replace(self, writable=_unique(self.writable + tuple(paths)))

    def with_devices(self, *paths: str) -> Confinement:
        return replace(self, devices=_unique(self.devices + tuple(paths)))

    # -- running ----------------------------------------------------------------------------------
    @property
    def filtered(self) -> bool:
        """Whether its processes run under the unix-socket filter (argv then needs its fd)."""
        return not self.unix_sockets and socketfilter.available()

    def argv(self, command: Sequence[str], cwd: str | None = None, extra_devices: Iterable[str] = (),
             info_fd: int | None = None, seccomp_fd: int | None = None) -> list[str]:
        """`command` inside the confinement: bwrap's arguments, then (as a user) setpriv's.
        `info_fd`: bwrap writes {"child-pid": N} there, the host pid of the command (without a
        private pid namespace; bwrap itself is its parent). `seccomp_fd`: the unix-socket filter
        (socketfilter.program_fd(), passed to the child), required when `filtered`."""
        if self.filtered and seccomp_fd is None:
            raise ValueError("this confinement refuses unix sockets: pass socketfilter.program_fd() as seccomp_fd")
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
        if self.filtered:
            args += ["--seccomp", str(seccomp_fd)]
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
        """Writable binds, the shallower first: a writable path inside another is mounted after it."""
        out: list[str] = []
        for _, _, p in sorted((_depth(p), i, p) for i, p in enumerate(self.writable)):
            out += ["--bind", p, p]
        return out

    # -- the plan ---------------------------------------------------------------------------------
    def describe(self) -> list[str]:
        """What the confined processes can write, for --dry-run and the manifest."""
        lines = [f"can write {p}" for p in self.writable]
        block = [d for d in self.devices if _is_block(d)]
        lines += [f"can write the block device {d}" for d in block]
        other = [d for d in self.devices if d not in block]
        if other:
            lines.append(f"sees the devices {', '.join(other)}")
        lines.append("everything else read-only; /dev holds only null, zero, full, random, urandom, tty"
                     + ("" if self.share_net else "; no network")
                     + ("; no unix sockets" if self.filtered else
                        "" if self.unix_sockets else f"; unix sockets not filtered ({platform.machine()})"))
        return lines + list(self.notes)

    def manifest(self) -> dict[str, object]:
        return {"tool": BWRAP, "writable": list(self.writable),
                "devices": list(self.devices), "network": "host" if self.share_net else "none",
                "user": list(self.user) if self.user else None, "capabilities": list(self.caps),
                "unix_sockets": "allowed" if self.unix_sockets else "refused" if self.filtered else "not filtered"}


def returncode(status: int) -> int:
    """A confined command's status as subprocess gives an unconfined one: bwrap reports a command
    killed by signal N as exit status 128+N (the shell's convention); this says -N."""
    return -(status - 128) if 128 < status <= 128 + 64 else status


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
