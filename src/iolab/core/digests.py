"""The sha256 of a file's bytes, read in 1 MiB chunks: what the guest image's content hash, a
saved state's key and the pinned fio source check are made of (one definition for all three)."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: Path | str) -> str:
    """Hex sha256 of the file at `path` (never read whole: images and tarballs are large)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
