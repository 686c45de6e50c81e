"""Parsing of sizes and durations as users write them in specs ("4k", "1M", "30s").

Both refuse what no study can mean: booleans, negative, infinite or NaN numbers, and
values beyond a sane bound (1 EiB, 30 days), so `size = "1e400"` or `runtime = inf` is a
spec error naming the key, never a trial that runs forever or a division by zero. A size
is positive unless the caller allows zero.
"""

from __future__ import annotations

import math
import re

_SIZE = re.compile(r"[ \t]*(\d+)[ \t]*([kmgtp]?)(i?b?)[ \t]*", re.IGNORECASE)
_MULT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_DUR = re.compile(r"[ \t]*(\d+(?:\.\d+)?)[ \t]*(ms|s|m|h)?[ \t]*")
_DUR_MULT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
MAX_SIZE = 1 << 60          # 1 EiB: larger than any device iolab will see
MAX_DURATION = 30 * 86400.0  # 30 days
_MAX_TEXT = 64


def parse_size(value: object, *, allow_zero: bool = False) -> int:
    """Bytes from an int or a string like '4k', '16M', '1GiB'. Suffixes are 1024-based like fio's."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"expected a size like '4k' or 4096, got {value!r}")
    if isinstance(value, int):
        n = value
    else:
        m = _SIZE.fullmatch(value) if len(value) <= _MAX_TEXT else None
        if not m:
            raise ValueError(f"expected a size like '4k', '16M' or 4096, got {value!r}")
        n = int(m.group(1)) * _MULT[m.group(2).lower()]
    if n < 0 or (n == 0 and not allow_zero):
        raise ValueError(f"expected a {'non-negative' if allow_zero else 'positive'} size, got {value!r}")
    if n > MAX_SIZE:
        raise ValueError(f"size {value!r} is larger than 1 EiB")
    return n


def format_size(n: int) -> str:
    """Shortest exact form: 4096 -> '4k', 1048576 -> '1m', 1000 -> '1000'."""
    for suffix, mult in (("t", 1 << 40), ("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if n and n % mult == 0:
            return f"{n // mult}{suffix}"
    return str(n)


def parse_duration(value: object) -> float:
    """Seconds from a number or a string like '30s', '2m', '500ms' (0 allowed; callers bound it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a duration like '30s', got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        m = _DUR.fullmatch(value) if len(value) <= _MAX_TEXT else None
        if not m:
            raise ValueError(f"expected a duration like '30s', '2m' or 30, got {value!r}")
        seconds = float(m.group(1)) * _DUR_MULT[m.group(2)]
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"expected a finite, non-negative duration, got {value!r}")
    if seconds > MAX_DURATION:
        raise ValueError(f"duration {value!r} is longer than 30 days")
    return seconds


def positive_duration(value: object, name: str) -> float | None:
    """A duration setting's seconds, refused unless longer than 0 s; None (not set) stays None.
    The one validator of every such setting ([study] trial_timeout and budget, a workload's
    duration or max_runtime), so each says the same thing the same way."""
    if value is None:
        return None
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError(f"{name} must be longer than 0 s, got {value!r}")
    return seconds
