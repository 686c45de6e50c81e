"""The paths fio 3.33 opens for a job file, computed as fio computes them.

The job-file sandbox's path rule is only as good as its idea of which names fio opens; a
check of `<dir>/<section>` while fio opens `<dir>/<section>.0.0` lets a symlink planted at
the second name through (issue 23). So this module repeats fio's own naming, from its source:

* **Directory prefix** (`filesetup.c: add_file`, `options.c: set_name_idx`): when the job has a
  `directory`, every file name is `<directory>/` + the name, *also an absolute name*
  (`directory=d` + `filename=/dev/x` opens `d//dev/x`). A `directory` list (`a:b`) is indexed
  by the job's clone number modulo its length; an explicitly named file always takes the first.
* **Explicit names** (`options.c: str_filename_cb`, `get_next_str`): `filename` split at `:`
  (an empty part ends the list), each prefixed with the directory the section has when fio
  parses it: fio sorts `directory` before `filename` within a section (their `prio`), and a
  `[global]` section's files keep the prefix of that global section's directory; a job inherits
  them already prefixed (`dup_files`), and adds its own with its own directory.
* **Generated names** (`init.c: add_job`, `make_filename`): without any `filename` (or opendir),
  for every clone `jobnum` in 0..numjobs-1 and `filenum` in 0..nrfiles-1, `filename_format`
  with `$jobname`, `$jobnum`, `$filenum` and `$clientuid` replaced case-insensitively (empty
  outside client mode), default `$jobname.$jobnum.$filenum`; with nrfiles=1 and a non-regular
  file named like the job in fio's working directory, that name instead.
* **Working directory**: a relative directory or name is relative to fio's cwd, iolab's work dir.

Generated names can number numjobs x nrfiles (25 million): they are matched as a pattern
against what a directory holds (`Generated.matches`), never listed.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # fio_sandbox imports this module: the types only, to keep one direction
    from iolab.fio.sandbox import JobFile, Option

_KEYWORDS = (("$jobname", "jobname"), ("$jobnum", "jobnum"), ("$filenum", "filenum"), ("$clientuid", "clientuid"))
DEFAULT_FORMAT = "$jobname.$jobnum.$filenum"


def path_names(opt: Option) -> list[str]:
    """The names a path option gives (lists split at ':', as fio's get_next_str; empty parts skipped)."""
    if opt.value is None:
        return []
    if opt.name in ("filename", "directory"):
        return [p for p in opt.value.split(":") if p]
    if opt.name == "filename_format":
        return [re.sub(r"\$(jobname|jobnum|filenum|clientuid)", "0", opt.value, flags=re.IGNORECASE)]
    return [opt.value]


@dataclass(frozen=True)
class Named:
    """One path fio opens (or a directory it puts files in), and the option (name, line) that gave it."""

    option: str
    line: int
    path: str  # absolute (fio's cwd joined), not normalised: as fio passes it to open()


@dataclass(frozen=True)
class Generated:
    """The names one job generates in one directory: `<directory>/<format>` for its clones."""

    option: str              # filename_format, or the section name (default names)
    line: int
    directory: str           # absolute
    jobname: str
    fmt: str
    jobnums: tuple[int, ...]  # the clone numbers whose files land in this directory
    nrfiles: int

    def matches(self, name: str) -> bool:
        """Would fio open `name` (an entry of `directory`) for one of these clones and files?"""
        if self.nrfiles == 1 and name == self.jobname:
            return True  # fio's exists_and_not_regfile(jobname) case: the bare job name
        m = _pattern(self.fmt, self.jobname).fullmatch(name)
        if not m:
            return False
        j, f = m.groupdict().get("j"), m.groupdict().get("f")
        return (j is None or int(j) in self.jobnums) and (f is None or int(f) < self.nrfiles)


@functools.lru_cache(maxsize=256)
def _pattern(fmt: str, jobname: str) -> re.Pattern[str]:
    """A regex for the names make_filename yields for `fmt` (the numbers captured to be checked)."""
    out: list[str] = []
    i, lowered = 0, fmt.lower()
    while i < len(fmt):
        for word, key in _KEYWORDS:
            if lowered.startswith(word, i):
                seen = "".join(out)
                out.append({"jobname": re.escape(jobname), "clientuid": "",
                            "jobnum": r"(?P=j)" if "(?P<j>" in seen else r"(?P<j>0|[1-9][0-9]*)",
                            "filenum": r"(?P=f)" if "(?P<f>" in seen else r"(?P<f>0|[1-9][0-9]*)"}[key])
                i += len(word)
                break
        else:
            out.append(re.escape(fmt[i]))
            i += 1
    return re.compile("".join(out))


def opened(job: JobFile, workdir: str, base_directory: str | None) -> tuple[list[Named], list[Generated]]:
    """Every explicit path and directory fio opens for `job` as iolab renders it (a leading
    `[global] directory=<base_directory>` unless the file sets one), and its generated names."""
    named: list[Named] = []
    generated: list[Generated] = []
    base = [base_directory] if base_directory and not job.sets("directory") else []
    global_dirs: list[str] = [_abs(workdir, d) for d in base]
    global_files: list[Named] = []
    for section in job.sections:
        own = {o.name: o for o in section.options}
        if section.is_global:
            if "directory" in own:
                global_dirs = [_abs(workdir, d) for d in path_names(own["directory"])]
                named += [_named(own["directory"], d) for d in global_dirs]
            if "filename" in own:
                global_files += [_named(own["filename"], _prefixed(workdir, global_dirs, 0, n))
                                 for n in path_names(own["filename"]) if n != "-"]
    named += global_files
    for section, eff in job.jobs():
        dirs = [_abs(workdir, d) for d in path_names(eff["directory"])] if "directory" in eff else global_dirs
        if "directory" in eff:
            named += [_named(eff["directory"], d) for d in dirs]
        own = {o.name: o for o in section.options}
        if "filename" in own:
            named += [_named(own["filename"], _prefixed(workdir, dirs, 0, n)) for n in path_names(own["filename"])
                      if n != "-"]
        if "filename" in eff or "opendir" in eff:
            continue
        numjobs = _count(eff.get("numjobs"), 1)
        nrfiles = _count(eff.get("nrfiles"), 1)
        fmt_opt = eff.get("filename_format")
        fmt = fmt_opt.value if fmt_opt is not None and fmt_opt.value else DEFAULT_FORMAT
        where = dirs or [workdir]
        for i, d in enumerate(where):
            jobnums = tuple(j for j in range(numjobs) if j % len(where) == i)
            if jobnums:
                generated.append(Generated("filename_format" if fmt_opt else f"[{section.name}] (fio's default name)",
                                           fmt_opt.line if fmt_opt else section.line, d, section.name, fmt,
                                           jobnums, nrfiles))
    return named, generated


def _named(opt: Option, path: str) -> Named:
    return Named(opt.name, opt.line, path)


def existing_matches(gen: Generated, limit: int = 100_000) -> Iterator[str]:
    """The entries already in the generated names' directory that fio would open (bounded)."""
    try:
        with os.scandir(gen.directory) as it:
            for n, entry in enumerate(it):
                if n >= limit:
                    return
                if gen.matches(entry.name):
                    yield posixpath.join(gen.directory, entry.name)
    except OSError:
        return


def describe_existing(path: str) -> str:
    """What is at `path` now, for a refusal message."""
    try:
        st = os.lstat(path)
    except OSError:
        return "nothing"
    if stat.S_ISLNK(st.st_mode):
        return f"a symbolic link to {os.readlink(path)}"
    for test, what in ((stat.S_ISREG, "a file"), (stat.S_ISDIR, "a directory"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(st.st_mode):
            return what
    return "something"


def _abs(workdir: str, path: str) -> str:
    return path if path.startswith("/") else posixpath.join(workdir, path)


def _prefixed(workdir: str, dirs: list[str], index: int, name: str) -> str:
    """set_name_idx + sprintf: `<dir>/` before the name, even an absolute one."""
    if dirs:
        return dirs[index % len(dirs)] + "/" + name
    return _abs(workdir, name)


def _count(opt: Option | None, default: int) -> int:
    if opt is None or opt.value is None or not opt.value.isdigit():
        return default
    return max(int(opt.value), 1)


_LOG_OPTIONS = ("opendir", "write_iolog", "write_bw_log", "write_lat_log", "write_iops_log", "write_hist_log")


def problems(job: JobFile, roots: Sequence[str], workdir: str,
             base_directory: str | None) -> list[tuple[str, int, str]]:
    """(option, line, why) for every path fio would open outside `roots` (symlinks followed), and
    a symbolic link or a non-regular file at a name fio generates."""
    real_roots = [os.path.realpath(r) for r in roots]

    def inside(path: str) -> bool:
        real = os.path.realpath(path)
        return any(real == r or real.startswith(r.rstrip("/") + "/") for r in real_roots)

    out: list[tuple[str, int, str]] = []
    where = ", ".join(real_roots)
    named, generated = opened(job, workdir, base_directory)
    for _section, eff in job.jobs():
        for name in _LOG_OPTIONS:
            value = eff[name].value if name in eff else None
            if value:
                named.append(Named(name, eff[name].line, posixpath.join(workdir, value)))
    for n in named:
        if not inside(n.path):
            out.append((n.option, n.line, f"'{n.path}' resolves to '{os.path.realpath(n.path)}', outside the "
                                          f"directories iolab gives the job ({where})"))
    for g in generated:
        if not inside(g.directory):
            out.append((g.option, g.line, f"'{g.directory}' resolves to '{os.path.realpath(g.directory)}', outside "
                                          f"the directories iolab gives the job ({where})"))
            continue
        for path in existing_matches(g):
            what = describe_existing(path)
            if what == "a file":
                continue
            out.append((g.option, g.line, f"fio would open '{path}' (job [{g.jobname}], format '{g.fmt}'), and it "
                                          f"is already there: {what}. iolab never follows a link or opens a "
                                          "non-regular file at a name fio generates. Remove it"))
    return out
