"""The job-file sandbox: an fio job file read exactly as fio reads it, checked against an
allowlist, and rendered back as canonical text. fio runs the text iolab checked.

A check on the raw text can be walked around (fio substitutes `${VAR}` and `$ncpus` before
it matches a name, cuts comments anywhere in a line, and reads long lines in pieces), so
this module first repeats fio 3.33's own reading of the file, then checks every option
against `fio_allowlist`, then writes the options back one per line in a form on which
fio's transformations are the identity: no `$` left to substitute, no `;`/`#`/`\\`, no
long lines, one canonical name per option. Anything it cannot prove harmless is refused
with the file, the line and the option.

fio-3.33's reading of a job file (fgets pieces, comments, sections, include, ${VAR},
$-keywords and bc, exact name matching) is repeated in `fio_reading`, whose docstring lists
each behaviour and where it comes from in fio's source.

The path rule: every name an option gives (files, directories, logs, I/O logs, generated
names, job names) is relative without `..`, so it lands in the directory iolab gives the job
(the target's directory, else iolab's private work dir); at run time on the host, the
resolved path (symlinks followed) must also be inside one of them. The only absolute names
allowed are a block device that passes the data-safety guard (`core.diskguard`) and
/dev/null or /dev/zero. Everything outside `fio_allowlist.OPTIONS` is refused.
"""

from __future__ import annotations

import functools
import os
import re
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from iolab.core import diskguard
from iolab.core.errors import RefusedError
from iolab.fio import allowlist as allow
from iolab.fio import names as fio_names
from iolab.fio.names import path_names
from iolab.fio.reading import (
    Machine,
    is_comment,
    line_problem,
    replace_keywords,
    strip_end,
    substitute_env,
)

MAX_JOB_BYTES = 1 << 20  # a job file larger than this is not a job file
MAX_NAME = 64
_NAME = re.compile(rf"^[A-Za-z0-9_][A-Za-z0-9_.,+@%=-]{{0,{MAX_NAME - 1}}}$")  # a file name, never a path
_CHARSET = {
    allow.NUM: re.compile(r"^[A-Za-z0-9_.,:/%+-]+$"),
    allow.PATTERN: re.compile(r"^[\x21-\x7e]+$"),
    allow.TEXT: re.compile(r"^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$"),
}
# A data pattern, by fio's own grammar (lib/pattern.c parse_and_fill_pattern), built up from what
# is allowed rather than refusing what is not: "a string" (no quote inside: fio has no escape), a
# hex run 0x.., a decimal integer, and the %o offset format, in any sequence. fio's fifth form,
# 'PATH' in single quotes, opens that file and writes its bytes as the data: a copy of any file the
# trial can read into the files it writes, so it is not in the grammar.
_PATTERN = re.compile(r'(?:"[^"]*"|0[xX][0-9a-fA-F]+|-?[0-9]+|%o)+')
_PATH_CHARS = re.compile(r"^[A-Za-z0-9_.,+@%=/-]+$")
_FORBIDDEN_IN_VALUES = "$;#\\"  # fio would substitute, cut or unescape these: never in a checked value
_HARMLESS_DEVICES = {"/dev/null": (1, 3), "/dev/zero": (1, 5)}
# options whose value is a duration / a size that --max-runtime / --max-size caps
_TIME_CAPPED = ("runtime", "ramp_time", "startdelay")
_SIZE_CAPPED = ("size", "filesize", "io_size")


class JobFileRefused(RefusedError):
    """A job file iolab will not run; the message names the file and the line."""

    def __init__(self, source: str, line: int | None, message: str):
        self.source, self.line, self.reason = source, line, message
        super().__init__(f"{source}:{line}: {message}" if line else f"{source}: {message}")


@dataclass
class Option:
    line: int
    name: str            # canonical fio name
    value: str | None    # after fio's substitutions, surrounding blanks removed; None: no '='
    written: str         # the line as written (for messages)


@dataclass
class Section:
    line: int
    name: str
    options: list[Option] = field(default_factory=list)

    @property
    def is_global(self) -> bool:
        return self.name.startswith("global")  # fio: strncmp(name, "global", 6)


@dataclass(frozen=True)
class Caps:
    """Upper bounds iolab imposes on every job (to try a long job file briefly)."""

    runtime_s: float | None = None
    size: int | None = None


@dataclass
class JobFile:
    source: str
    sections: list[Section]

    def jobs(self) -> Iterator[tuple[Section, dict[str, Option]]]:
        """Each job section with its effective options (every earlier global section, then its own)."""
        inherited: dict[str, Option] = {}
        for s in self.sections:
            own = {o.name: o for o in s.options}
            if s.is_global:
                inherited.update(own)
            else:
                yield s, {**inherited, **own}

    def sets(self, name: str) -> bool:
        return any(o.name == name for s in self.sections for o in s.options)

    def render(self, directory: str | None = None, caps: Caps | None = None) -> str:
        """Canonical job text: fio's reading of it is the identity. `directory`: where relative
        names land unless the file sets its own (a relative one, checked)."""
        caps = caps or Caps()
        capped = set(_TIME_CAPPED if caps.runtime_s else ()) | set(_SIZE_CAPPED if caps.size else ())
        out: list[str] = []
        if directory and not self.sets("directory"):
            out += ["[global]", _line("directory", directory)]
        effective = {id(s): eff for s, eff in self.jobs()}
        for s in self.sections:
            out.append(f"[{s.name}]")
            out += [_line(o.name, o.value) for o in s.options if o.name not in capped]
            if not s.is_global and capped:
                out += _cap_lines(effective[id(s)], caps)
        return "\n".join(out) + "\n"

    def estimate_seconds(self, caps: Caps | None = None) -> float:
        """Stonewalled groups run one after another, jobs within a group side by side: the sum
        over groups of their longest job (60 s for a job without a duration), each capped by
        caps.runtime_s. O(groups) per call (an axis of 90 000 caps reads the file once)."""
        cap = caps.runtime_s if caps else None
        if cap:
            return sum(cap if untimed else min(longest, cap) for longest, untimed in self._groups) + 5
        return sum(max(longest, 60.0) if untimed else longest for longest, untimed in self._groups) + 5

    @functools.cached_property
    def _groups(self) -> list[tuple[float, bool]]:
        """Per stonewalled group: (its longest job's runtime + ramp + start delay, has a job without one)."""
        groups: list[tuple[float, bool]] = []
        for s, eff in self.jobs():
            if not groups or any(o.name == "stonewall" for o in s.options):
                groups.append((0.0, False))
            t = sum(_seconds(eff[n].value) or 0.0 for n in ("runtime", "ramp_time", "startdelay") if n in eff)
            longest, untimed = groups[-1]
            groups[-1] = (max(longest, t), untimed or not t)
        return groups


# -- reading, as fio reads ------------------------------------------------------------------------
def parse(text: str, source: str, env: Mapping[str, str] | None = None, machine: Machine | None = None) -> JobFile:
    """The job file as fio 3.33 sees it; refuses (JobFileRefused) anything outside the allowlist."""
    env = os.environ if env is None else env
    machine = machine or Machine.here()
    if len(text.encode("utf-8", "surrogatepass")) > MAX_JOB_BYTES:
        raise JobFileRefused(source, None, f"larger than {MAX_JOB_BYTES >> 10} KiB: not a job file iolab reads")
    sections: list[Section] = []
    for no, raw in enumerate(text.split("\n"), 1):
        problem = line_problem(raw)
        if problem:
            raise JobFileRefused(source, no, problem)
        line = strip_end(raw.lstrip(" \t\r\v\f"))
        if is_comment(raw) or not line:
            continue
        if line.startswith("include"):
            raise JobFileRefused(source, no, f"'{_show(line)}' is refused: it is an include (fio includes any line "
                                             "that starts with 'include'), and iolab checks one file, not what it "
                                             "pulls in")
        if line.startswith("["):
            sections.append(Section(no, _section_name(line, source, no)))
            continue
        if not sections:
            raise JobFileRefused(source, no, f"'{_show(line)}' is outside any [section] (fio refuses it too)")
        sections[-1].options.append(_option(line, raw, source, no, env, machine))
    if not any(not s.is_global for s in sections):
        raise JobFileRefused(source, None, "defines no job (only [global] sections or nothing)")
    return JobFile(source, sections)


def _section_name(line: str, source: str, no: int) -> str:
    name = line[1:-1] if line.endswith("]") else None
    if name is None or not _NAME.match(name):
        raise JobFileRefused(source, no, f"section header '{_show(line)}': iolab accepts [NAME] with NAME of "
                                         f"letters, digits and _.,+@%=- (at most {MAX_NAME}, not starting with "
                                         "'.'); the job name becomes a file name")
    return name


def _option(line: str, raw: str, source: str, no: int, env: Mapping[str, str], machine: Machine) -> Option:
    subst = substitute_env(line, env)
    try:
        subst = replace_keywords(subst, machine)
    except ValueError as exc:
        raise JobFileRefused(source, no, str(exc)) from None
    name, eq, value = subst.partition("=")
    name = strip_end(name)
    shown = _show(line) + (f"' (after fio's substitutions: '{_show(subst)}')" if subst != line else "'")
    found = allow.lookup(name)
    if found is None:
        reason = allow.refusal_reason(name)
        if name.lower() != name and name.lower() in allow.REFUSED:
            reason += f" (as {name.lower()}; fio matches names exactly, so this spelling fails there too)"
        raise JobFileRefused(source, no, f"fio option {_show(name) or '(empty)'} is refused: it {reason} ('{shown})")
    canonical, rule = found
    opt = Option(no, canonical, value.strip(" \t") if eq else None, raw.strip())
    _check_value(opt, rule, source, shown)
    return opt


def _check_value(opt: Option, rule: allow.Allowed, source: str, shown: str, absolute_ok: bool = False) -> None:
    def refuse(why: str) -> None:
        raise JobFileRefused(source, opt.line, f"fio option {opt.name} is refused: {why} ('{shown})")

    v = opt.value
    if v is None:
        if rule.kind in (allow.NUM, allow.LOG_PREFIX):
            return
        refuse("needs a value")
    assert v is not None
    if v == "":
        refuse("the value is empty" + (" (an unset ${VAR} is substituted by nothing)" if "${" in shown else ""))
    if rule.kind == allow.NAME_FORMAT:
        bad = re.sub(r"\$(jobname|jobnum|filenum|clientuid)", "", v, flags=re.IGNORECASE)
        if any(c in bad for c in _FORBIDDEN_IN_VALUES):
            refuse("only $jobname, $jobnum, $filenum and $clientuid may follow a '$'")
    elif any(c in v for c in _FORBIDDEN_IN_VALUES):
        refuse(f"the value holds {next(c for c in v if c in _FORBIDDEN_IN_VALUES)!r}, which fio would substitute, "
               "cut or unescape")
    if opt.name == "filename" and "-" in v.split(":"):
        refuse("'-' is fio's standard input or output: the job's data would be written to or read from iolab's "
               "pipe, not a file")
    if rule.kind == allow.CHOICE:
        word, colon, rest = v.partition(":")
        if opt.name == "rw" and word in allow.REFUSED_RW:
            refuse(f"rw={word} {allow.REFUSED_RW[word]}")
        if opt.name == "ioengine" and v not in allow.ENGINES:
            why = allow.REFUSED_ENGINES.get(word, "is not in iolab's list of engines; fio would dlopen() it")
            refuse(f"engine {v!r} {why} (allowed: {', '.join(allow.ENGINES)})")
        if word not in rule.choices or (colon and not (rule.suffix and _CHARSET[allow.NUM].match(rest))):
            refuse(f"expected one of {', '.join(rule.choices)}" + (" (optionally ':N')" if rule.suffix else ""))
    elif rule.kind in _CHARSET:
        if not _CHARSET[rule.kind].match(v):
            refuse("the value has characters iolab does not pass to fio")
        if rule.kind == allow.PATTERN and not _PATTERN.fullmatch(v):
            refuse("a data pattern is \"text\", 0x hex bytes, a decimal number and %o, joined (fio's "
                   "lib/pattern.c); a quoted 'name' would make fio read that file into the data it writes")
        if rule.max_int is not None and (not v.isdigit() or int(v) > rule.max_int):
            refuse(f"expected a whole number up to {rule.max_int}")
    elif rule.kind == allow.JOBNAME:
        if not _NAME.match(v):
            refuse("a job name is letters, digits and _.,+@%=- (it becomes a file name)")
    else:
        for name in path_names(opt):
            problem = _path_syntax_problem(opt.name, name, absolute_ok)
            if problem:
                refuse(problem if opt.name != "filename_format" else problem.replace(f"'{name}'", f"'{v}'"))
        if opt.name == "filename_format" and "/" in v:
            refuse("a generated name is a file name, not a path (no '/'): the files land in the job's directory")


def _path_syntax_problem(option: str, name: str, absolute_ok: bool = False) -> str | None:
    if not _PATH_CHARS.match(name):
        return f"'{name}' has characters iolab does not pass to fio in a file name"
    if name.startswith("/"):
        if option != "filename" and not absolute_ok:
            return f"'{name}' is absolute: use a relative name, it lands in the directory iolab gives the job"
        return None  # a device: checked by check_paths (that needs the machine)
    if ".." in name.split("/"):
        return f"'{name}' climbs out with '..': names stay inside the directory iolab gives the job"
    return None


def check_rendered_option(name: str, value: str | None) -> None:
    """For jobs iolab renders itself: the name is allowlisted (canonical) and the value passes its
    kind's syntax. Absolute paths are allowed: they come from iolab's targets, guarded there."""
    found = allow.lookup(name)
    if found is None or found[0] != name:
        raise RefusedError(f"fio option {name} is refused: it {allow.refusal_reason(name)}")
    opt = Option(0, name, value, _line(name, value))
    try:
        _check_value(opt, found[1], "rendered job", _line(name, value) + "'", absolute_ok=True)
    except JobFileRefused as exc:
        raise RefusedError(exc.reason) from None


def _show(text: str, limit: int = 120) -> str:
    text = text.replace("\t", " ")
    return text if len(text) <= limit else text[:limit] + "..."


def _line(name: str, value: str | None) -> str:
    return name if value is None else f"{name}={value}"


# -- the path rule --------------------------------------------------------------------------------
def check_paths(job: JobFile, roots: Sequence[str] | None = None, workdir: str | None = None,
                base_directory: str | None = None) -> list[str]:
    """Absolute names must be a guarded block device (or /dev/null, /dev/zero); returns the devices.

    With `roots` (on the host): every path fio will open, computed as fio computes it
    (`fio_names`: the directory prefix, default and generated names for every clone and file
    number), resolved with symlinks, must be inside one of the roots; a link or a non-regular
    file at a generated name is refused. The confinement (core/confine.py) holds the same line
    whatever this check misses.
    """
    devices: list[str] = []
    for s in job.sections:
        for opt in s.options:
            if opt.name != "filename":
                continue
            for name in path_names(opt):
                if name.startswith("/"):
                    devices += _device(job.source, opt, name)
    if roots is not None and workdir is not None:
        for option, line, why in fio_names.problems(job, roots, workdir, base_directory):
            raise JobFileRefused(job.source, line, f"fio option {option}: {why}")
    return sorted(set(devices))


def _device(source: str, opt: Option, name: str) -> list[str]:
    harmless = _HARMLESS_DEVICES.get(name)
    if harmless:
        st = os.stat(name)
        if stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == harmless:
            return []
    try:
        node = diskguard.block_device(name)
    except ValueError as exc:
        raise JobFileRefused(source, opt.line, f"fio option filename: '{name}' is absolute and {exc}; iolab allows "
                                               "only relative names, a block device that holds no data, /dev/null "
                                               "and /dev/zero") from None
    try:
        diskguard.check_named(node.path)
    except RefusedError as exc:
        raise JobFileRefused(source, opt.line, f"fio option filename: {exc}") from None
    return [node.path]


# -- caps ------------------------------------------------------------------------------------------
def _seconds(value: str | None) -> float | None:
    m = re.match(r"^(\d+(?:\.\d+)?)(us|usec|ms|msec|s|sec|m|min|h|d)?$", (value or "").lower())
    if not m:
        return None
    mult = {"us": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
    return float(m.group(1)) * mult.get(m.group(2) or "s", 1.0)


def _bytes(value: str | None) -> int | None:
    m = re.match(r"^(\d+)([kmgtp]?)(i?b?)$", (value or "").lower())
    if not m:
        return None
    return int(m.group(1)) * (1 << (10 * " kmgtp".index(m.group(2) or " ")))


def _cap_lines(eff: dict[str, Option], caps: Caps) -> list[str]:
    out = []
    if caps.runtime_s:
        for name in _TIME_CAPPED:
            have_s = _seconds(eff[name].value) if name in eff else None
            if name == "runtime" or name in eff:
                limit = caps.runtime_s if name == "runtime" else 0.0
                out.append(f"{name}={_fmt_s(min(have_s, caps.runtime_s) if have_s is not None else limit)}")
    if caps.size:
        for name in _SIZE_CAPPED:
            have_bytes = _bytes(eff[name].value) if name in eff else None
            if name == "size" or name in eff:
                out.append(f"{name}={min(have_bytes, caps.size) if have_bytes else caps.size}")
    return out


def _fmt_s(seconds: float) -> str:
    return f"{int(round(seconds * 1000))}ms"
