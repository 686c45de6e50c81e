"""How fio 3.33 reads a job file: the transformations the job-file sandbox must repeat.

Every function here mirrors one piece of fio's own reading (init.c `__parse_jobs_ini`,
options.c, parse.c of fio-3.33), so the sandbox checks the options fio will see, not the
text a user wrote. The numbers refer to this list:

 1. Lines are read with `fgets(buf, OPT_LEN_MAX=8192)`: a line longer than 8191 bytes comes
    back in pieces and every piece is parsed as a line of its own. Refused, naming the line.
 2. `is_empty_or_comment`: blank lines, and lines whose first character that is not a space
    or a control character is `;` or `#`, are skipped.
 3. `strip_blank_front` / `strip_blank_end`: leading spaces go; the text from the first `;`
    and from the first `#` on is cut (anywhere in the line: `filename=a#b` is `a`); trailing
    spaces and control characters go.
 4. Sections: `[name]` (`sscanf("[%255[^\\n]]")`, last character dropped); a name that starts
    with `global` is a global section, whose options every later job inherits; an option
    before the first section is an error.
 5. Any line that starts with `include` (after 2-3, before any substitution) includes the
    file named by the text after its 8th character: `include x`, `include=x`, `include\\tx`,
    `includex`, `include_me=1` are all includes. Every one is refused.
 6. `fio_option_dup_subs`: `${VAR}` is replaced by the environment's value, or by nothing when
    VAR is unset, over the whole line (name and value), in one pass; output capped at 8192
    bytes, and a value that does not fit is dropped. fio runs with iolab's environment.
 7. `fio_keyword_replace`: `$pagesize`, `$mb_memory`, `$ncpus` (case-sensitive, anywhere in
    the line) become this machine's values; if any was replaced and the line holds `+ - * /`
    and no `'`, fio pipes the value to `bc` (`bc_calc`, values up to 100 characters). iolab
    computes bc's integer arithmetic itself (scale 0) or refuses what bc would not compute.
 8. `get_option` / `o_match`: the name is the text before the first `=`, trailing blanks cut,
    matched exactly (case-sensitive) against names and aliases; the value is the rest.
 9. `get_next_str`: `filename` and `directory` are `:`-separated lists (`\\:` escapes a colon);
    iolab refuses `\\` and treats every `:` as a separator. `add_file` puts `directory` in
    front of every file name; the default name is `jobname.jobnum.filenum`.
10. `make_filename`: `filename_format` expands `$jobname $jobnum $filenum $clientuid`,
    case-insensitively.
11. Command-line job options (`fio --name=x --filename=y`, matched by getopt_long with unique
    prefixes) are never built from user input: iolab runs `fio --output-format=json+
    --output=F job.fio` only, with the canonical text as job.fio.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

OPT_LEN_MAX = 8192  # fio parse.h
KEYWORDS = ("$pagesize", "$mb_memory", "$ncpus")  # options.c fio_keywords[], in fio's order


@dataclass(frozen=True)
class Machine:
    """The values fio gives its `$` keywords (fio_keywords_init)."""

    pagesize: int
    mb_memory: int
    ncpus: int

    @classmethod
    def here(cls) -> Machine:
        page = os.sysconf("SC_PAGE_SIZE")
        return cls(page, os.sysconf("SC_PHYS_PAGES") * page // (1 << 20), os.sysconf("SC_NPROCESSORS_CONF"))

    def keyword(self, word: str) -> str:
        return str({"$pagesize": self.pagesize, "$mb_memory": self.mb_memory, "$ncpus": self.ncpus}[word])


def line_problem(raw: str) -> str | None:
    """What in one line of a job file fio would read differently from its text (1), or None."""
    size = len(raw.encode("utf-8", "surrogatepass")) + 1  # + the newline fgets keeps
    if size > OPT_LEN_MAX - 1:
        return (f"line is {size} bytes: fio reads lines in {OPT_LEN_MAX - 1}-byte pieces and would parse the rest "
                "as a line of its own")
    for ch in raw.rstrip("\r"):
        if ch == "\0":
            return "contains a NUL byte (fio would stop reading the line there)"
        if (ord(ch) < 0x20 and ch != "\t") or ord(ch) == 0x7F or 0xD800 <= ord(ch) <= 0xDFFF:
            return f"contains the control character {ch!r}"
    return None


def is_comment(raw: str) -> bool:
    """fio is_empty_or_comment: the first character that is not blank or control is ; or #."""
    for ch in raw:
        if ch in ";#":
            return True
        if not (ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F):
            return False
    return True


def strip_end(line: str) -> str:
    """fio strip_blank_end: cut at the first ';' and at the first '#', then trailing blanks."""
    for mark in ";#":
        cut = line.find(mark)
        if cut >= 0:
            line = line[:cut]
    return line.rstrip(" \t\r\v\f")


def substitute_env(opt: str, env: Mapping[str, str]) -> str:
    """fio_option_dup_subs: ${VAR} -> value or '' (unset), one pass, at most OPT_LEN_MAX bytes out."""
    out: list[str] = []
    left = OPT_LEN_MAX
    i = 0
    while i < len(opt) and left > 0:
        if opt.startswith("${", i):
            end = opt.find("}", i)
            if end > i + 1:
                value = env.get(opt[i + 2:end])
                if value is not None and len(value.encode()) <= left:
                    out.append(value)
                    left -= len(value.encode())
                i = end + 1
                continue
        out.append(opt[i])
        left -= 1
        i += 1
    return "".join(out)


def replace_keywords(opt: str, machine: Machine) -> str:
    """fio_keyword_replace + bc_calc (7), with bc's integer arithmetic computed here.

    Raises ValueError when fio would hand bc something iolab cannot compute exactly as bc does."""
    replaced = False
    for word in KEYWORDS:
        while word in opt:
            opt = opt.replace(word, machine.keyword(word), 1)
            replaced = True
    if not replaced or not any(c in opt for c in "+-*/") or "'" in opt or "=" not in opt:
        return opt
    name, _, value = opt.partition("=")
    if len(opt) >= 128 or len(value) > 100:
        return opt  # bc_calc leaves long values alone
    result = bc_integer(value)
    if result is None:
        raise ValueError(f"fio would hand '{value}' to bc (a $-keyword with arithmetic); iolab only accepts "
                         "integer arithmetic that bc computes exactly")
    return f"{name}={result}"


def bc_integer(expr: str) -> int | None:
    """bc with scale=0 on + - * / % ^ and parentheses; None for anything else (or a huge result)."""
    tokens = re.findall(r"\d+|\+\+|--|[-+*/%^()]|\S", expr)  # bc reads ++ and -- as one (variable) operator
    if not tokens or any(not (t.isdigit() or (len(t) == 1 and t in "+-*/%^()")) for t in tokens):
        return None
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def primary() -> int:
        t = take() if peek() else None
        if t == "(":
            v = additive()
            if take() != ")":
                raise ValueError
            return v
        if t is None or not t.isdigit():
            raise ValueError
        return int(t)

    def unary() -> int:  # bc: unary minus binds tighter than ^
        if peek() == "-":
            take()
            return -unary()
        return primary()

    def power() -> int:
        base = unary()
        if peek() == "^":
            take()
            exp = power()
            if exp < 0 or exp > 64 or abs(base) > 1 << 32:
                raise ValueError
            return base ** exp
        return base

    def term() -> int:
        v = power()
        while peek() in ("*", "/", "%"):
            op, rhs = take(), power()
            if op != "*" and rhs == 0:
                raise ValueError
            q = abs(v) // abs(rhs) * (1 if (v >= 0) == (rhs >= 0) else -1) if op != "*" else 0
            v = v * rhs if op == "*" else q if op == "/" else v - q * rhs
        return v

    def additive() -> int:
        v = term()
        while peek() in ("+", "-"):
            v = v + term() if take() == "+" else v - term()
        return v

    try:
        value = additive()
    except (ValueError, IndexError):
        return None
    return value if pos == len(tokens) and abs(value) < 1 << 63 else None
