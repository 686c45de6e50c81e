"""Reading what a fleet host's `fio --client` left in its work directory, as untrusted data.

fio's client copies every text message its server sends into its output before the JSON
document, so the output is text the *server* chose, followed by fio's own JSON. The JSON is
located by fio's own header (`{` on a line of its own followed by `"fio version" : `), and
decoded exactly from there with `json.JSONDecoder.raw_decode`; only the last such document
that decodes to an object with `client_stats` and is followed by nothing but white space is
fio's (a server's text comes before it, whatever it imitates). Never "from the first `{`":
a server printing `hello\\n{not json` would otherwise decide the result of its host.

Files in the work directory were written by the client, which a hostile server may steer:
they are opened without following symlinks, must be regular files, and are read up to a cap.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_OUTPUT_BYTES = 64 << 20   # one host's fio output (json+ of many jobs is a few MiB)
MAX_LOG_BYTES = 64 << 20      # one log file fio's client wrote
MAX_LOG_FILES = 4096          # per host and trial
_HEADER = re.compile(r'^\{\n  "fio version" : ', re.M)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# what every server says about every job: fio's banner, not news
_ROUTINE = re.compile(r"^(<[^>\n]*>\s*)?(\S+: \(g=\d+\): rw=.*|Starting \d+ (process|thread)e?s?.*|)$")


@dataclass(frozen=True)
class Read:
    text: str
    mtime_ns: int
    truncated: bool


def read_capped(path: Path, cap: int) -> Read | None:
    """A regular file's text (at most `cap` bytes) and mtime; None when it is absent, not a
    regular file, or a symlink (never followed: a hostile server may have steered the client)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        raw = bytearray()
        while len(raw) <= cap:
            chunk = os.read(fd, min(1 << 20, cap + 1 - len(raw)))
            if not chunk:
                break
            raw += chunk
        return Read(bytes(raw[:cap]).decode(errors="replace"), st.st_mtime_ns, len(raw) > cap)
    finally:
        os.close(fd)


def locate_json(text: str) -> tuple[dict[str, Any] | None, str]:
    """(fio's JSON document, the text before it). None when no complete document is there."""
    decoder = json.JSONDecoder()
    starts = [m.start() for m in _HEADER.finditer(text)]
    for start in reversed(starts):
        try:
            doc, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("client_stats"), list) and not text[end:].strip():
            return doc, text[:start]
    return None, text


def host_entries(doc: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The job entries of one host's document (fio's "All clients" sum is never one)."""
    entries = (doc or {}).get("client_stats") or []
    return [e for e in entries if isinstance(e, dict) and e.get("jobname") != "All clients"]


def said(text: str, limit: int = 300) -> str:
    """The last lines of what fio (and the server, through it) printed: printable, bounded, for a
    failure reason that goes into the store and the reports."""
    lines = [_CONTROL.sub("?", ln).strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if not _ROUTINE.match(ln)]
    out = " / ".join(lines[-4:])
    return out[:limit] + ("..." if len(out) > limit else "")
