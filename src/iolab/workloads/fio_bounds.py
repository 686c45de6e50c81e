"""Bounds on what a job file may ask for: processes, buffer memory, durations, I/O priority.

The allowlist checks each option alone; these checks look at the whole file, because a bomb
is a product (16 sections x numjobs=256 is 4096 processes; bs=64m x iodepth=256 is 16 GiB
per process). They are the friendly first line, refused when the spec is read with the file
and line; the trial cgroup's pids and memory limits (cgroups.trial.Bounds) and the trial
timeout hold the same line at run time whatever this misses.

* processes: the sum over jobs of numjobs, at most MAX_PROCESSES; files (numjobs x nrfiles
  summed), at most MAX_FILES (an inode bomb in the user's directory; fio's own filecreate example makes 500 000);
* space (`check_space`, in a host directory): the bytes the jobs lay out must fit in the
  directory's free space, so a job cannot fill the user's (or the root) filesystem;
* memory: fio allocates max block size x iodepth bytes of buffers per process; the sum over
  jobs must fit in MEMORY_SHARE of the memory available now;
* durations: runtime, ramp_time and startdelay at most 30 days (iolab's longest duration);
* priority: `cmdprio_percentage` and `cmdprio_bssplit` issue I/O with `cmdprio_class`, whose
  default is the highest class, real-time (fio's HOWTO): like `prioclass=1`, refused unless
  `cmdprio_class` names best-effort (2) or idle (3) for every direction, and a
  `cmdprio_bssplit` entry with its own class (`bs/pct/class/level`) must too.
"""

from __future__ import annotations

import re

from iolab.core.units import MAX_DURATION, format_size
from iolab.fio.sandbox import JobFile, JobFileRefused, Option

MAX_PROCESSES = 512
MAX_FILES = 1_000_000  # fio's own filecreate example makes 500 000
MEMORY_SHARE = 0.9
_SIZE = re.compile(r"(\d+(?:\.\d+)?)([kmgtpe]?)(?:i?b)?", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50, "e": 1 << 60}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(us|usec|ms|msec|s|sec|m|min|h|d)?$", re.IGNORECASE)
_DURATION_MULT = {"us": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3, "s": 1.0, "sec": 1.0, "m": 60.0,
                  "min": 60.0, "h": 3600.0, "d": 86400.0}
_ALLOWED_CLASSES = {"2", "3"}


def check(job: JobFile, available_memory: int) -> None:
    """JobFileRefused naming the line of the first bound a job file exceeds."""
    processes = 0
    buffers = 0
    files = 0
    for section, eff in job.jobs():
        numjobs = _int(eff.get("numjobs"), 1)
        processes += numjobs
        files += numjobs * _int(eff.get("nrfiles"), 1)
        if files > MAX_FILES:
            opt = eff.get("nrfiles") or eff.get("numjobs")
            raise JobFileRefused(job.source, opt.line if opt else section.line,
                                 f"refused: the jobs up to [{section.name}] make {files} files (numjobs x nrfiles); "
                                 f"iolab lets a trial make at most {MAX_FILES}")
        if processes > MAX_PROCESSES:
            opt = eff.get("numjobs")
            raise JobFileRefused(job.source, opt.line if opt else section.line,
                                 f"refused: the jobs up to [{section.name}] start {processes} processes (sections x "
                                 f"numjobs); iolab runs at most {MAX_PROCESSES} per trial")
        bs = max([_largest(eff[n].value) for n in ("bs", "bsrange", "bssplit") if n in eff] or [4096])
        buffers += bs * max(_int(eff.get("iodepth"), 1), 1) * numjobs
        limit = int(MEMORY_SHARE * available_memory)
        if available_memory and buffers > limit:
            raise JobFileRefused(job.source, section.line,
                                 f"refused: the jobs up to [{section.name}] need {format_size(buffers)} of I/O buffers "
                                 f"(block size x iodepth x numjobs); this machine has {format_size(available_memory)}"
                                 f" available, and a trial may use {MEMORY_SHARE:.0%} of it")
        for name in ("runtime", "ramp_time", "startdelay"):
            seconds = _seconds(eff[name].value) if name in eff else None
            if seconds is not None and seconds > MAX_DURATION:
                raise JobFileRefused(job.source, eff[name].line, f"fio option {name}={eff[name].value} is "
                                                                 "refused: longer than 30 days, iolab's longest trial")
        _check_priority(job, eff)


# Engines whose jobs put no data in files: `size` is how much I/O they pretend or count, not bytes laid out.
NO_DATA_ENGINES = frozenset({"null", "cpuio", "filecreate", "filestat"})


def check_space(job: JobFile, free_bytes: int, size_cap: int | None = None) -> None:
    """JobFileRefused when the files the jobs lay out (numjobs x max(size, nrfiles x filesize),
    each capped by the workload's max_size) would not fit in `free_bytes` of the directory."""
    total = 0
    for section, eff in job.jobs():
        engine = eff["ioengine"].value if "ioengine" in eff else None
        if engine in NO_DATA_ENGINES:
            continue
        size = max(_largest(eff["size"].value) if "size" in eff else 0,
                   _largest(eff["filesize"].value) * _int(eff.get("nrfiles"), 1) if "filesize" in eff else 0)
        if size_cap is not None:
            size = min(size, size_cap) if size else size_cap
        total += size * _int(eff.get("numjobs"), 1)
        if total > free_bytes:
            raise JobFileRefused(job.source, eff["size"].line if "size" in eff else section.line,
                                 f"refused: the jobs up to [{section.name}] lay out {format_size(total)} of files; the "
                                 f"directory's filesystem has {format_size(free_bytes)} free")


def _check_priority(job: JobFile, eff: dict[str, Option]) -> None:
    uses = [eff[n] for n in ("cmdprio_percentage", "cmdprio_bssplit") if n in eff]
    if not uses:
        return
    cls = eff.get("cmdprio_class")
    if cls is None or not cls.value:
        raise JobFileRefused(job.source, uses[0].line, f"fio option {uses[0].name} is refused: it issues I/O "
                                                       "with cmdprio_class, "
                                                       "whose default is real-time (like prioclass=1, refused: it "
                                                       "could starve the machine); set cmdprio_class=2 or 3")
    if any(c.strip() not in _ALLOWED_CLASSES for c in cls.value.split(",")):
        raise JobFileRefused(job.source, cls.line, f"fio option cmdprio_class={cls.value} is refused: only "
                                                   "best-effort (2) and idle (3) "
                                                   "are allowed (real-time could starve the machine)")
    split = eff.get("cmdprio_bssplit")
    for entry in re.split(r"[:,]", split.value or "") if split is not None else []:
        parts = entry.split("/")
        if len(parts) >= 3 and parts[2].strip() not in _ALLOWED_CLASSES:
            assert split is not None
            raise JobFileRefused(job.source, split.line, f"fio option cmdprio_bssplit is refused: entry {entry!r} sets "
                                                         "priority class "
                                                         f"{parts[2]!r}: only best-effort (2) and idle (3) are "
                                                         "allowed")


def buffer_bytes(bs: int, iodepth: int, numjobs: int) -> int:
    """What fio allocates for I/O buffers: the largest block size x iodepth, per process."""
    return bs * iodepth * numjobs


def _int(opt: Option | None, default: int) -> int:
    if opt is None or opt.value is None:
        return default
    m = re.match(r"\d+", opt.value)
    return int(m.group(0)) if m else default


def _largest(value: str | None) -> int:
    """The largest size in a bs, bsrange or bssplit value ('4k,64m', '4k-1m', '4k/10:64k/90')."""
    best = 0
    for number, unit in _SIZE.findall(value or ""):
        best = max(best, int(float(number) * _UNITS[unit.lower()]))
    return best


def _seconds(value: str | None) -> float | None:
    m = _DURATION.match((value or "").strip())
    return float(m.group(1)) * _DURATION_MULT[(m.group(2) or "s").lower()] if m else None
