"""Parsing of sizes and durations as users write them in specs ("4k", "1M", "30s")."""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_MULT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_DUR = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_DUR_MULT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_size(value: int | str) -> int:
    """Bytes from an int or a string like '4k', '16M', '1GiB'. Suffixes are 1024-based like fio's."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size like '4k' or 4096, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"expected a non-negative size, got {value}")
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError(f"expected a size like '4k', '16M' or 4096, got {value!r}")
    return int(m.group(1)) * _MULT[m.group(2).lower()]


def format_size(n: int) -> str:
    """Shortest exact form: 4096 -> '4k', 1048576 -> '1m', 1000 -> '1000'."""
    for suffix, mult in (("t", 1 << 40), ("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if n and n % mult == 0:
            return f"{n // mult}{suffix}"
    return str(n)


def parse_duration(value: int | float | str) -> float:
    """Seconds from a number or a string like '30s', '2m', '500ms'."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like '30s', got {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"expected a non-negative duration, got {value}")
        return float(value)
    m = _DUR.match(str(value))
    if not m:
        raise ValueError(f"expected a duration like '30s', '2m' or 30, got {value!r}")
    return float(m.group(1)) * _DUR_MULT[m.group(2)]
