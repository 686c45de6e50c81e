"""What the pytest process itself (as an iolab owner) left on the machine: checked after every
test and at the end of the session (tests/conftest.py).

The tests that drive iolab in-process (executors, targets, trial cgroups) create resources
tagged with the pytest process's own owner token (core/owner.py): `iolab-o<pid>.<start>-...`.
While pytest runs that owner is alive, so `iolab clean` rightly leaves them alone, and nothing
but this check would ever notice one that a test forgot. Read straight from /sys and /proc,
not through iolab's code, so a bug there cannot hide a leftover.
"""

from __future__ import annotations

from pathlib import Path

from tests.core import owned

CGROUP_FS = Path("/sys/fs/cgroup")
NETNS = Path("/run/netns")


def cgroups(token: str) -> list[str]:
    """Tagged cgroups at the top of every mounted hierarchy (v1: blkio, memory, pids, ...; v2)."""
    prefix = f"iolab-{token}-"
    roots = [CGROUP_FS] + ([p for p in CGROUP_FS.iterdir() if p.is_dir()] if CGROUP_FS.is_dir() else [])
    out: list[str] = []
    for root in roots:
        out += [str(p) for p in root.glob(f"{prefix}*") if p.is_dir()]
    return sorted(set(out))


def netns(token: str) -> list[str]:
    return sorted(p.name for p in NETNS.glob(f"*{token}*")) if NETNS.is_dir() else []


def counted_now(token: str) -> set[str]:
    """The cheap part, run after every test: cgroups and network namespaces."""
    return set(cgroups(token)) | {f"netns {n}" for n in netns(token)}


def left_by(token: str) -> dict[str, list[str]]:
    """Everything of that owner still on the machine, by kind; {} when nothing is."""
    found = {"cgroups": cgroups(token), "netns": netns(token),
             "qemu": owned.qemus(token), "loops": owned.loops(token), "mounts": owned.mounts(token),
             "scheduler claims": owned.claims(token), "files": owned.files(token)}
    return {k: v for k, v in found.items() if v}


# multiprocessing's resource tracker: a `python -c "from multiprocessing.resource_tracker import main..."`
# that the first spawn-context process of an interpreter starts (tests/test_machine_lock.py,
# tests/store's concurrent writers) and that lives until that interpreter exits. It carries the
# worker's IOLAB_OWNER, so it was the "one python per worker still alive" of the first parallel run.
RESOURCE_TRACKER = "from multiprocessing.resource_tracker import main"


def processes(token: str) -> list[str]:
    """Live processes carrying the owner's IOLAB_OWNER, with their command lines, except Python's own
    resource tracker (above). Reported as a warning, not failed on: a process still exiting at the
    session's end under load would fail a green run."""
    out = []
    for row in owned.processes(token):
        pid = row.split()[0]
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
        except OSError:
            continue  # gone meanwhile
        if RESOURCE_TRACKER in cmd:
            continue
        out.append(f"{row}: {cmd}")
    return out
