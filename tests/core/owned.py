"""What one iolab process (an owner, by its pid and start time) has on the machine right now.

Every name iolab creates carries its owner's token `o<pid>.<start>` and every process it
starts carries it in IOLAB_OWNER, so a test can list exactly one run's loop devices,
mounts, cgroups, processes, scheduler claims and files, while other runs (and other
people's tests) use the same machine. Read straight from /proc, /sys and the file system,
not through iolab's own code, so a bug there cannot hide a leftover.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.core.helpers import all_loops

QUEUE_RECORDS = Path(os.environ.get("IOLAB_RUN") or "/run/iolab") / "queues"
# blkio (weighted groups), cpuacct and freezer (v1 trial cgroups), the cgroup2 mount (either, on v2)
CGROUP_ROOTS = [Path("/sys/fs/cgroup/blkio"), Path("/sys/fs/cgroup/cpuacct"), Path("/sys/fs/cgroup/freezer"),
                Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")]


def token_of(pid: int) -> str:
    """The owner token of a running process (read while it is alive)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return f"o{pid}.{fields[19]}"


def cmdline(pid: int | str) -> str:
    """A process's command line (NULs as read), "" once it has exited: a process another test of
    the parallel suite started can be gone between listing it and reading it."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except OSError:
        return ""


def processes(token: str) -> list[str]:
    """Live processes started by that owner: 'pid comm' each."""
    out = []
    needle = f"IOLAB_OWNER={token}".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if needle not in (d / "environ").read_bytes().split(b"\0"):
                continue
            stat = (d / "stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] != "Z":
            out.append(f"{d.name} {(d / 'comm').read_text().strip() if (d / 'comm').exists() else '?'}")
    return out


def qemus(token: str) -> list[str]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and b"qemu" in os.path.basename(argv[0]) and any(token.encode() in a for a in argv):
            out.append(d.name)
    return out


def loops(token: str) -> list[str]:
    return [f"{dev} {back}" for dev, back in all_loops() if f"iolab-{token}-" in back]


def mounts(token: str) -> list[str]:
    with open("/proc/mounts") as f:
        return [line.split()[1] for line in f if f"iolab-{token}-" in line.split()[1]]


def cgroups(token: str) -> list[str]:
    out = []
    for root in CGROUP_ROOTS:
        if root.is_dir():
            out += [str(p) for p in root.glob(f"iolab-{token}-*")]
    return out


def claims(token: str) -> list[str]:
    """Scheduler claims of that owner in the machine-wide device records."""
    out = []
    for f in sorted(QUEUE_RECORDS.glob("*.json")) if QUEUE_RECORDS.is_dir() else []:
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        out += [f"{f.stem}:{rid}" for rid, c in (rec.get("claims") or {}).items() if c.get("owner") == token]
    return out


def files(token: str, *dirs: Path) -> list[str]:
    out = []
    for d in (*dirs, Path("/tmp"), Path("/var/tmp")):
        if d.is_dir():
            out += [str(p) for p in d.glob(f"iolab-{token}-*")]
    return sorted(set(out))


def everything(token: str, *dirs: Path) -> dict[str, list[str]]:
    """Every kind of thing the owner may have left; empty lists when it left nothing."""
    return {"processes": processes(token), "qemu": qemus(token), "loops": loops(token), "mounts": mounts(token),
            "cgroups": cgroups(token), "scheduler claims": claims(token), "files": files(token, *dirs)}


def nothing(token: str, *dirs: Path) -> dict[str, list[str]]:
    """{} when the owner left nothing, else only the non-empty kinds (for assert messages)."""
    return {k: v for k, v in everything(token, *dirs).items() if v}
