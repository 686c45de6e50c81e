"""Who owns what iolab created: an owner is one iolab process, known by pid *and* start time.

Two runs at once (same or another `$IOLAB_DATA`) must never undo each other's resources,
and a recycled pid must never pass for the owner. So every owner carries a token
`o<pid>.<start>`, where start is the process's start time in clock ticks since boot
(/proc/<pid>/stat field 22): a pid can be reused, a (pid, start) pair cannot while the
machine is up. The token is written

* into the name of everything iolab creates (`iolab-o1234.567890-loop-3fa2c1d0.img`,
  mount points, work dirs, cgroups, the QEMU `-name`), so a sweep decides from the name
  alone whether the owner is alive, whatever data dir the owner used;
* into the environment of every process iolab starts (`IOLAB_OWNER`, inherited by every
  descendant: fio's job processes, mkfs, qemu-img, strace), so a sweep finds the load
  generators and helpers of a dead owner without knowing their pids;
* into the name of the owner's ledger file (`$IOLAB_DATA/ledger/o1234.567890.json`).

An owner is alive iff a process with that pid exists, is not a zombie and has that start
time. A process whose stat cannot be read is taken as alive: in doubt, nothing is touched.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ENV_OWNER = "IOLAB_OWNER"  # the owner token, in every process iolab starts
ENV_SPAWN = "IOLAB_SPAWN"  # one spawned load generator's own tag (its ledger entry finds it by this)
PREFIX = "iolab-"
_TOKEN = re.compile(r"o(\d+)\.(\d+)")
_TAGGED = re.compile(r"iolab-o(\d+)\.(\d+)(?:-|\.|$)")


@dataclass(frozen=True)
class Owner:
    pid: int
    start: int  # clock ticks after boot (/proc/<pid>/stat field 22)

    @property
    def token(self) -> str:
        return f"o{self.pid}.{self.start}"

    def alive(self) -> bool:
        return is_alive(self.pid, self.start)


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state first), or None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except ProcessLookupError:
        return None
    except OSError:
        return []  # exists but unreadable
    return text.rsplit(")", 1)[1].split()


def start_time(pid: int) -> int | None:
    fields = proc_stat(pid)
    if not fields or len(fields) < 20:
        return None
    return int(fields[19])


def is_alive(pid: int, start: int) -> bool:
    fields = proc_stat(pid)
    if fields is None:
        return False
    if not fields or len(fields) < 20:
        return True  # cannot tell: never treat an owner we cannot see as dead
    return fields[0] != "Z" and int(fields[19]) == start


_me: Owner | None = None


def me() -> Owner:
    """This process as an owner (recomputed after a fork)."""
    global _me
    pid = os.getpid()
    if _me is None or _me.pid != pid:
        start = start_time(pid)
        if start is None:
            raise RuntimeError("cannot read this process's start time from /proc")
        _me = Owner(pid, start)
    return _me


def adopt() -> Owner:
    """Become an owner: every process started from now on carries this process's token."""
    owner = me()
    os.environ[ENV_OWNER] = owner.token
    return owner


def tag(*parts: str) -> str:
    """A name for something this process creates: `iolab-<token>-<parts...>`."""
    return "-".join([f"{PREFIX}{me().token}", *parts])


def parse_token(token: str) -> Owner | None:
    m = _TOKEN.fullmatch(token)
    return Owner(int(m.group(1)), int(m.group(2))) if m else None


def owner_of_name(name: str) -> Owner | None:
    """The owner a tagged name carries (`iolab-o12.34-...`), None for any other name."""
    m = _TAGGED.match(os.path.basename(name.rstrip("/")))
    return Owner(int(m.group(1)), int(m.group(2))) if m else None


def dead_owner_of_name(name: str) -> Owner | None:
    """The owner of a tagged name if that owner is dead; None if untagged or alive."""
    o = owner_of_name(name)
    return o if o is not None and not o.alive() else None


# ---------------------------------------------------------------- processes iolab started

@dataclass(frozen=True)
class TaggedProcess:
    pid: int
    start: int
    owner: Owner
    spawn: str | None  # the load generator's own tag, if it was started by an executor
    argv0: str


def process_environ(pid: int) -> dict[str, str]:
    """The IOLAB_* variables of a process ({} if it is gone or has none)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        if item.startswith(b"IOLAB_"):
            k, _, v = item.decode(errors="replace").partition("=")
            out[k] = v
    return out


def tagged_processes() -> Iterator[TaggedProcess]:
    """Every live (non-zombie) process started by an iolab owner, except this process and its ancestors."""
    skip = _ancestors(os.getpid())
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        pid = int(entry)
        env = process_environ(pid)
        owner = parse_token(env.get(ENV_OWNER, ""))
        if owner is None or owner.pid == pid:
            continue
        fields = proc_stat(pid)
        if not fields or len(fields) < 20 or fields[0] == "Z":
            continue
        try:
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:
            argv0 = ""
        yield TaggedProcess(pid, int(fields[19]), owner, env.get(ENV_SPAWN), argv0)


def _ancestors(pid: int) -> set[int]:
    out = set()
    while pid > 1 and pid not in out:
        out.add(pid)
        fields = proc_stat(pid)
        if not fields or len(fields) < 2:
            break
        pid = int(fields[1])
    return out
