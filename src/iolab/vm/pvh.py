"""Booting the built-in guest's kernel faster under TCG: the ELF vmlinux inside a bzImage.

Why: under TCG the bzImage spends ~2.5 s decompressing itself; QEMU boots an ELF vmlinux
carrying a PVH entry note directly (guest_image caches the extracted kernel with the image).
"""

from __future__ import annotations

import lzma
import struct
import zlib
from pathlib import Path


def vmlinux(bzimage: Path) -> bytes | None:
    """The uncompressed ELF kernel inside a bzImage, if it can boot through PVH. None when the
    payload is not xz/gzip or the kernel lacks CONFIG_PVH: the caller boots the bzImage as usual."""
    data = bzimage.read_bytes()
    elf = _decompress_payload(data)
    if elf is None or elf[:4] != b"\x7fELF" or not _has_pvh_note(elf):
        return None
    return elf


def _decompress_payload(data: bytes) -> bytes | None:
    i = data.find(b"\xfd7zXZ\x00")
    if i >= 0:
        try:
            return lzma.LZMADecompressor().decompress(data[i:])
        except lzma.LZMAError:
            return None
    i = data.find(b"\x1f\x8b\x08")
    if i >= 0:
        try:
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data[i:])
        except zlib.error:
            return None
    return None


def _has_pvh_note(elf: bytes) -> bool:
    """True if a PT_NOTE segment holds a "Xen" note of type 18 (XEN_ELFNOTE_PHYS32_ENTRY)."""
    if elf[4] != 2:  # ELFCLASS64 only
        return False
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for k in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", elf, phoff + k * phentsize)
        if p_type != 4:
            continue
        off, end = p_offset, p_offset + p_filesz
        while off + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", elf, off)
            name = elf[off + 12: off + 12 + namesz].rstrip(b"\0")
            if name == b"Xen" and ntype == 18:
                return True
            off += 12 + ((namesz + 3) & ~3) + ((descsz + 3) & ~3)
    return False
