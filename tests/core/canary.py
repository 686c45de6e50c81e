"""Canaries: a block device and files with known content, standing where hostile inputs point.

A canary loop device stands in for the machine's root disk (never /dev/vda itself): a loop
device over an image of random bytes that iolab did not make, holding no signature (so the
data-safety guard alone would call it free: only --destroy-data or the confinement keeps it
whole). Canary files sit outside the scratch space. After the harm was tried for real, every
checksum must be what it was.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path


def sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class Canaries:
    """A canary loop device, its image, and canary files; `changed()` lists what differs now."""

    root: Path
    device: str = ""
    image: Path | None = None
    files: list[Path] = field(default_factory=list)
    sums: dict[str, str] = field(default_factory=dict)

    def make(self, device_size: int = 8 << 20, files: tuple[str, ...] = ("canary-file", "etc-like/passwd")) -> Canaries:
        self.root.mkdir(parents=True, exist_ok=True)
        self.image = self.root / "canary-disk.img"
        self.image.write_bytes(os.urandom(device_size))
        self.device = subprocess.run(["losetup", "--find", "--show", str(self.image)], check=True,
                                     capture_output=True, text=True).stdout.strip()
        for name in files:
            p = self.root / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(b"canary " + os.urandom(4096))
            self.files.append(p)
        self.sums = self.now()
        return self

    def now(self) -> dict[str, str]:
        out = {str(f): sha256(f) if f.exists() else "missing" for f in self.files}
        if self.device:
            out[self.device] = sha256(self.device)
        if self.image is not None:
            out[str(self.image)] = sha256(self.image)  # what the loop device wrote, seen from its backing file
        return out

    def changed(self) -> list[str]:
        now = self.now()
        return sorted(k for k, v in self.sums.items() if now.get(k) != v)

    def close(self) -> None:
        if self.device:
            subprocess.run(["losetup", "-d", self.device], capture_output=True)
            self.device = ""
