"""A tiny writer for the newc cpio format the kernel unpacks as initramfs.

Why not the cpio tool: entries come from several host places (binaries, libraries at
their own paths, generated text), and a deterministic archive (fixed mtimes, sorted
entries, fixed owners) makes the content hash of the image meaningful.
"""

from __future__ import annotations

import gzip
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from io import BufferedIOBase
from pathlib import Path


@dataclass(frozen=True)
class Entry:
    """One archive member. Exactly one of `source`, `data`, `symlink` is used for files."""

    name: str  # path inside the guest, without the leading "/"
    mode: int  # full st_mode (type bits + permissions)
    source: Path | None = None
    data: bytes | None = None
    symlink: str | None = None

    def payload(self) -> bytes:
        if self.symlink is not None:
            return self.symlink.encode()
        if self.data is not None:
            return self.data
        if self.source is not None:
            return self.source.read_bytes()
        return b""


def directory(name: str) -> Entry:
    return Entry(name.strip("/"), stat.S_IFDIR | 0o755)


def file_from(name: str, source: Path, mode: int = 0o755) -> Entry:
    return Entry(name.strip("/"), stat.S_IFREG | mode, source=source)


def file_data(name: str, data: bytes, mode: int = 0o644) -> Entry:
    return Entry(name.strip("/"), stat.S_IFREG | mode, data=data)


def symlink(name: str, target: str) -> Entry:
    return Entry(name.strip("/"), stat.S_IFLNK | 0o777, symlink=target)


def _pad(n: int) -> bytes:
    return b"\0" * ((4 - n % 4) % 4)


def _header(ino: int, mode: int, size: int, name: bytes) -> bytes:
    fields = [ino, mode, 0, 0, 1, 0, size, 0, 0, 0, 0, len(name) + 1, 0]
    return b"070701" + b"".join(f"{v:08x}".encode() for v in fields)


def _write_one(out: BufferedIOBase, ino: int, mode: int, name: str, payload: bytes) -> None:
    bname = name.encode()
    head = _header(ino, mode, len(payload), bname) + bname + b"\0"
    out.write(head + _pad(len(head)))
    out.write(payload + _pad(len(payload)))


def with_parents(entries: Iterable[Entry]) -> list[Entry]:
    """Add directory entries for every parent so the kernel can create each member."""
    items = {e.name: e for e in entries}
    for name in list(items):
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            items.setdefault(d, directory(d))
    return [items[k] for k in sorted(items)]


def write_archive(entries: Iterable[Entry], path: Path, compress: bool) -> None:
    """Write a newc archive (gzip level 1 when compressed: decompression speed matters more)."""
    ordered = with_parents(entries)
    raw: BufferedIOBase  # the file, or a GzipFile over it
    with open(path, "wb") as fh:
        raw = gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=1, mtime=0) if compress else fh
        for ino, e in enumerate(ordered, start=1):
            _write_one(raw, ino, e.mode, e.name, e.payload())
        _write_one(raw, 0, 0, "TRAILER!!!", b"")
        if compress:
            raw.close()
