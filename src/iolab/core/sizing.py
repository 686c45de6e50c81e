"""Sizes derived from hardware, bounded by what the machine (or guest) really has.

Pure decisions on given facts, so a test can pretend to be another machine (a 260 MiB L3,
a 512 MiB guest) without owning one; the few functions that read facts (`read_llc`,
`host_memory`) are at the bottom and do nothing else. Every decision comes with a sentence
that says what was chosen and why; the sentence goes into the trial's raw output, its
flags (when a size was reduced) and `iolab doctor`.

Test-only override: `IOLAB_FAKE_LLC=<size>` (e.g. `260M`) makes `read_llc` report that
last-level cache instead of sysfs's, so a real run on this machine sizes as a machine with
that cache would. Every decision made from it says so (`llc_source`).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from iolab.core.exec import ExecRequest, Executor
from iolab.core.units import parse_size

MiB = 1 << 20
GiB = 1 << 30
CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
FAKE_LLC_ENV = "IOLAB_FAKE_LLC"
FALLBACK_LLC = 32 * MiB  # when sysfs shows no cache sizes (assumed, and flagged)

# STREAM's rule: each array at least 4x the last-level cache.
LLC_FACTOR = 4
STREAM_ARRAYS = 3
# The three arrays may use at most this share of the memory available where they run: the
# rest is for the executor (guest agent, shell), the page cache the study's disk part needs,
# and other processes. MemAvailable is the kernel's own estimate of what can be allocated
# without swapping (Documentation/filesystems/proc.rst).
STREAM_MEM_SHARE = 0.7
# What the built-in guest itself holds in RAM besides a workload: its unpacked initramfs
# (~95 MiB, mostly fio's libraries), the kernel, page tables and the agent. Measured
# MemTotal - MemAvailable of an idle built-in guest is below this.
GUEST_BASE_BYTES = 256 * MiB
GUEST_MEMORY_FLOOR = 1 * GiB
# A guest may take at most this share of the host's available memory: the host side of the
# study (its loop image's page cache, the peer guest, QEMU itself) needs the rest.
GUEST_HOST_SHARE = 0.5
GUEST_MEMORY_STEP = 256 * MiB
SCRATCH_HEADROOM = 256 * MiB  # free space left on the scratch filesystem beside an image

_CACHE_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)\s*$", re.IGNORECASE)
_MEMINFO = re.compile(r"^(\w+):\s+(\d+)(?:\s+kB)?\s*$")


def mib(n: float) -> str:
    """Bytes as MiB for sentences: 1090519040 -> '1040 MiB'."""
    return f"{n / MiB:.0f} MiB" if n >= MiB else f"{n / MiB:.2f} MiB"


# ------------------------------------------------------------------------------ facts

@dataclass(frozen=True)
class Llc:
    """The host's last-level cache and where the number came from (sysfs, the fake, assumed)."""

    bytes: int
    source: str  # "sysfs" | "IOLAB_FAKE_LLC" | "assumed"


@dataclass(frozen=True)
class Memory:
    """What /proc/meminfo says, where a command runs (host or guest)."""

    total: int
    available: int
    swap_total: int = 0
    swap_free: int = 0
    where: str = "host"
    bound: str = "MemAvailable"  # what set `available`: MemAvailable, or a memory cgroup's limit

    @property
    def swap_used(self) -> int:
        return max(self.swap_total - self.swap_free, 0)


def parse_meminfo(text: str, where: str = "host") -> Memory:
    """/proc/meminfo's text -> Memory. MemAvailable is required (Linux >= 3.14 has it)."""
    kb: dict[str, int] = {}
    for line in text.splitlines():
        m = _MEMINFO.match(line.strip())
        if m:
            kb[m.group(1)] = int(m.group(2)) * 1024
    if "MemTotal" not in kb or "MemAvailable" not in kb:
        raise ValueError(f"no MemTotal/MemAvailable in /proc/meminfo of the {where}: {text[:200]!r}")
    return Memory(total=kb["MemTotal"], available=kb["MemAvailable"], swap_total=kb.get("SwapTotal", 0),
                  swap_free=kb.get("SwapFree", 0), where=where)


def parse_cache_size(text: str) -> int | None:
    """sysfs cache `size` ("32768K") -> bytes."""
    m = _CACHE_SIZE.match(text)
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]


# ------------------------------------------------------------------------------ STREAM arrays

@dataclass(frozen=True)
class ArraySizing:
    """How big each STREAM array is, and why."""

    array_mib: int
    wanted_mib: int  # 4x LLC, or what the spec asked for
    llc: Llc
    available: int | None  # MemAvailable where the kernel runs, None if unknown
    where: str
    reduced: bool
    reason: str

    @property
    def elements(self) -> int:
        return self.array_mib * MiB // 8

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["llc"] = {"bytes": self.llc.bytes, "source": self.llc.source}
        return d


class DoesNotFit(ValueError):
    """Not even the smallest useful size fits in the memory available."""


def stream_arrays(llc: Llc, mem: Memory | None, requested_mib: int | None = None) -> ArraySizing:
    """MiB per array: 4x the LLC (or the spec's value), reduced to fit in `mem`.

    The three arrays may take STREAM_MEM_SHARE of MemAvailable where the kernel runs. A
    reduction is not an error (a study must not fail because a cache is large or a guest
    small); it is said in `reason`, and the workload flags it, because arrays below 4x the
    LLC let part of the traffic be served by the cache."""
    rule = f"4 x LLC ({mib(llc.bytes)}{'' if llc.source == 'sysfs' else ', ' + llc.source})"
    wanted = requested_mib if requested_mib is not None else math.ceil(LLC_FACTOR * llc.bytes / MiB)
    why_wanted = f"{requested_mib} MiB as the spec asks" if requested_mib is not None else rule
    where = mem.where if mem else "host"
    if mem is None:
        return ArraySizing(wanted, wanted, llc, None, where, False,
                           f"arrays 3 x {wanted} MiB: {why_wanted}; memory available in the {where} unknown")
    budget = int(STREAM_MEM_SHARE * mem.available) // STREAM_ARRAYS // MiB
    if wanted <= budget:
        return ArraySizing(wanted, wanted, llc, mem.available, where, False,
                           f"arrays 3 x {wanted} MiB: {why_wanted}; fits in the {where}'s "
                           f"{mib(mem.available)} available")
    if budget < 1:
        raise DoesNotFit(f"STREAM needs 3 arrays of at least 1 MiB; the {where} has only {mib(mem.available)} "
                         f"available ({STREAM_MEM_SHARE:.0%} of it may be used)")
    return ArraySizing(budget, wanted, llc, mem.available, where, True,
                       f"arrays 3 x {budget} MiB: {why_wanted} = 3 x {wanted} MiB would not fit in the {where}'s "
                       f"{mib(mem.available)} available ({mem.bound}; {mib(mem.total)} in all; at most "
                       f"{STREAM_MEM_SHARE:.0%} used)")


def pow2_at_least(n: int) -> int:
    """The smallest power of two >= n (sysbench's memory test accepts only such block sizes)."""
    return 1 << max(n - 1, 0).bit_length()


# ------------------------------------------------------------------------------ guest memory

@dataclass(frozen=True)
class GuestMemory:
    bytes: int
    wanted: int
    reduced: bool
    reason: str


def guest_memory_for(array_mib: int, host: Memory | None, floor: int = GUEST_MEMORY_FLOOR) -> GuestMemory:
    """Guest RAM that holds 3 STREAM arrays of `array_mib` without reduction, bounded by the host.

    Enough that the guest's own stream_arrays() keeps the arrays (its MemAvailable is about
    memory - GUEST_BASE_BYTES), rounded up to GUEST_MEMORY_STEP, at least `floor`; at most
    GUEST_HOST_SHARE of the host's MemAvailable (and never below the floor: a smaller host
    gets a guest whose arrays are reduced, which its trials then say)."""
    need = math.ceil(STREAM_ARRAYS * array_mib * MiB / STREAM_MEM_SHARE) + GUEST_BASE_BYTES
    wanted = max(floor, -(-need // GUEST_MEMORY_STEP) * GUEST_MEMORY_STEP)
    arrays = f"3 x {array_mib} MiB STREAM arrays"
    if host is None:
        return GuestMemory(wanted, wanted, False, f"guest memory {mib(wanted)}: holds {arrays} (host memory unknown)")
    cap = max(floor, int(GUEST_HOST_SHARE * host.available) // GUEST_MEMORY_STEP * GUEST_MEMORY_STEP)
    if wanted <= cap:
        return GuestMemory(wanted, wanted, False, f"guest memory {mib(wanted)}: holds {arrays} beside the guest's "
                                                  f"own ~{mib(GUEST_BASE_BYTES)}")
    return GuestMemory(cap, wanted, True,
                       f"guest memory {mib(cap)}: {mib(wanted)} would hold {arrays}, but the host has only "
                       f"{mib(host.available)} available (a guest gets at most {GUEST_HOST_SHARE:.0%}); "
                       "the guest's arrays are reduced")


def guest_fits(memory: int, host: Memory, label: str) -> str | None:
    """None if a guest of `memory` bytes fits in the host's available memory, else why not."""
    if memory <= host.available:
        return None
    return (f"{label} needs {mib(memory)} of RAM, the host has {mib(host.available)} available "
            f"(MemAvailable of {mib(host.total)}): it would be OOM-killed or push the host into swap")


# ------------------------------------------------------------------------------ disk space

def space_problem(size: int, free: int, directory: str) -> str | None:
    """None if an image of `size` bytes fits in `free` with SCRATCH_HEADROOM left, else why not."""
    if free >= size + SCRATCH_HEADROOM:
        return None
    return (f"not enough space in {directory} for a {mib(size)} scratch image ({mib(free)} free, "
            f"{mib(SCRATCH_HEADROOM)} kept free beside it); set IOLAB_SCRATCH to a larger directory")


# ------------------------------------------------------------------------------ file sets

# A Filebench-style file set (varmail) of N entries never holds more than N files. Its bytes
# start near N x prealloc x mean size; every iteration then deletes a file and appends two
# random sizes, so the mean file size relaxes towards 2 x the mean append (total S with F
# files: dS = 2a - S/F per iteration, settling at S = 2aF). Each file may also hold one
# partly used block. The headroom covers the spread of the random sizes and the file count
# rising to N when deletes are skipped.
FILESET_BLOCK = 4096
FILESET_HEADROOM = 1.25
# mkfs.ext4 (iolab's options) leaves this share of a device free for files, measured from
# 16 MiB to 4 GiB (0.81 below 512 MiB, where it uses 1 KiB blocks; 0.90 above), and one
# inode per 4 KiB (below 512 MiB) or 16 KiB of the device.
EXT4_USABLE = 0.80
EXT4_SMALL = 512 * MiB


def fileset_bytes(nfiles: int, mean_file: float, mean_append: float) -> int:
    """Bytes a varmail file set of `nfiles` entries may take on disk during a run of any length."""
    per_file = max(mean_file, 2 * mean_append) + FILESET_BLOCK
    return math.ceil(nfiles * per_file * FILESET_HEADROOM)


def ext4_capacity(device_bytes: int) -> tuple[int, int]:
    """(bytes free for files, inodes) of a fresh ext4 made by iolab on a device of this size."""
    per_inode = 4096 if device_bytes < EXT4_SMALL else 16384
    return int(EXT4_USABLE * device_bytes), device_bytes // per_inode


def fileset_problem(nfiles: int, need: int, free: int, inodes: int | None, where: str) -> str | None:
    """None if a file set of `nfiles` files needing `need` bytes fits in `free` bytes (and `inodes`,
    if known) of `where`, else why not."""
    if need > free:
        return (f"the file set of {nfiles} files may take {mib(need)} (docs/workloads-varmail.md#sizing), "
                f"{where} has about {mib(free)} free")
    if inodes is not None and nfiles + 2 > inodes:
        return f"the file set needs {nfiles} files, {where} has about {inodes} inodes"
    return None


# ------------------------------------------------------------------------------ reading facts

def read_llc(cache_dir: Path | None = None) -> Llc:
    """The host's last-level cache: $IOLAB_FAKE_LLC if set (tests), else the largest cache of
    cpu0 in sysfs, else FALLBACK_LLC (assumed)."""
    fake = os.environ.get(FAKE_LLC_ENV)
    if fake:
        try:
            n = parse_size(fake)
        except ValueError as exc:
            raise ValueError(f"{FAKE_LLC_ENV}={fake!r}: {exc}") from None
        if n > 0:
            return Llc(n, FAKE_LLC_ENV)
    sizes = []
    for f in (cache_dir or CACHE_DIR).glob("index*/size"):
        try:
            size = parse_cache_size(f.read_text())
        except OSError:
            continue
        if size:
            sizes.append(size)
    return Llc(max(sizes), "sysfs") if sizes else Llc(FALLBACK_LLC, "assumed")


def host_memory(meminfo: Path = Path("/proc/meminfo")) -> Memory | None:
    try:
        return parse_meminfo(meminfo.read_text(), "host")
    except (OSError, ValueError):
        return None


# Prints /proc/meminfo, then "@@limit <limit> <usage>" for the memory cgroup the shell runs in
# and each of its ancestors (v1 memory controller and v2), so a command in a container or a
# limited cgroup is sized by its limit, not by the machine's MemAvailable. POSIX sh + sed:
# the guest's busybox runs it too.
_MEMORY_SCRIPT = r"""cat /proc/meminfo || exit 1
limits() { p="$2"; while :; do
  [ -r "$1$p/$3" ] && echo "@@limit $(cat "$1$p/$3") $(cat "$1$p/$4" 2>/dev/null || echo 0)"
  [ -z "$p" ] || [ "$p" = / ] && break; p="${p%/*}"; done; }
v1=$(sed -n 's/^[0-9]*:memory:\(.*\)$/\1/p' /proc/self/cgroup)
[ -n "$v1" ] && limits /sys/fs/cgroup/memory "$v1" memory.limit_in_bytes memory.usage_in_bytes
v2=$(sed -n 's/^0::\(.*\)$/\1/p' /proc/self/cgroup)
[ -n "$v2" ] && limits /sys/fs/cgroup "$v2" memory.max memory.current
exit 0
"""


def apply_cgroup_limits(mem: Memory, text: str) -> Memory:
    """`mem` with `available` bounded by every "@@limit <limit> <usage>" line's headroom
    (limit "max" or v1's huge no-limit value is no limit)."""
    available, bound = mem.available, mem.bound
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 3 or parts[0] != "@@limit" or not parts[1].isdigit():
            continue
        limit, usage = int(parts[1]), int(parts[2]) if parts[2].isdigit() else 0
        if limit < mem.total and limit - usage < available:
            available, bound = max(limit - usage, 0), f"memory cgroup limit {mib(limit)}"
    return Memory(mem.total, available, mem.swap_total, mem.swap_free, mem.where, bound)


def memory_where(executor: Executor) -> Memory | None:
    """Memory available where the executor runs commands: the guest's own /proc/meminfo when it
    is a guest's; bounded by the memory cgroup limits of that place (containers). None if it
    cannot be read."""
    where = "guest" if executor.name == "guest" else "host"
    try:
        res = executor.run(ExecRequest(argv=["sh", "-c", _MEMORY_SCRIPT], timeout_s=30))
    except OSError:
        return None
    if res.returncode != 0:
        return None
    try:
        return apply_cgroup_limits(parse_meminfo(res.stdout, where), res.stdout)
    except ValueError:
        return None


def free_bytes(directory: Path) -> int:
    """Free bytes for an unprivileged writer in `directory` (or its nearest existing parent)."""
    d = directory
    while not d.exists() and d != d.parent:
        d = d.parent
    st = os.statvfs(d)
    return st.f_bavail * st.f_frsize
