"""`KEY=VALUE` overrides of a study spec, as `iolab ab --set-b workload.iodepth=32` gives them.

KEY is a dotted path into the spec's tables (`study.repetitions`, `target.cache`,
`workloads.0.bs`: a number indexes an array of tables); VALUE is a TOML value (`32`, `"none"`,
`[1, 2]`, `true`), or, when it does not parse as one, the text itself (`target.kernel=/boot/vmlinuz`).
Missing tables on the path are created; the result is validated like any spec afterwards, so a
wrong key or value is refused with the spec's own message (exit status 2) naming the override.
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Sequence
from typing import Any

from iolab.core.errors import InputError

MAX_OVERRIDE = 4096


def parse(text: str, option: str) -> tuple[list[str | int], Any]:
    """('a.b.0.c' -> ['a', 'b', 0, 'c'], the value) of one KEY=VALUE; InputError naming `option`."""
    if len(text) > MAX_OVERRIDE or "\n" in text or "\x00" in text:
        raise InputError(f"{option} {text[:60]!r}: an override is one line of at most {MAX_OVERRIDE} characters")
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise InputError(f"{option} {text!r}: expected KEY=VALUE (e.g. workload.iodepth=32)")
    parts: list[str | int] = []
    for p in key.split("."):
        if not p or not all(c.isalnum() or c in "_-" for c in p):
            raise InputError(f"{option} {text!r}: {key!r} is not a dotted key (letters, digits, _ and -)")
        parts.append(int(p) if p.isdigit() else p)
    if isinstance(parts[0], int):
        raise InputError(f"{option} {text!r}: a key starts with a table name (study, target, workload, ...)")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return parts, value


def apply(doc: dict[str, Any], overrides: Sequence[str], option: str) -> dict[str, Any]:
    """A copy of `doc` with every override set, in order."""
    out = copy.deepcopy(doc)
    for text in overrides:
        path, value = parse(text, option)
        node: Any = out
        for i, part in enumerate(path[:-1]):
            nxt = path[i + 1]
            node = _step(node, part, nxt, text, option)
        last = path[-1]
        if isinstance(node, list):
            if not isinstance(last, int) or last >= len(node):
                raise InputError(f"{option} {text!r}: {last!r} is not an index of that array (0..{len(node) - 1})")
            node[last] = value
        else:
            node[str(last)] = value
    return out


def _step(node: Any, part: str | int, nxt: str | int, text: str, option: str) -> Any:
    if isinstance(node, list):
        if not isinstance(part, int) or part >= len(node):
            raise InputError(f"{option} {text!r}: {part!r} is not an index of that array (0..{len(node) - 1})")
        return node[part]
    if not isinstance(node, dict):
        raise InputError(f"{option} {text!r}: {part!r} is inside a value, not a table")
    key = str(part)
    if key not in node:
        node[key] = [] if isinstance(nxt, int) else {}
    if not isinstance(node[key], (dict, list)):
        raise InputError(f"{option} {text!r}: {key!r} is a value, not a table")
    return node[key]
