"""One POSIX ACL entry granted on one file: how `iolab fleet serve` lets its unprivileged server
user open just the device or directory it benchmarks.

The kernel's own format (`system.posix_acl_access`, linux/posix_acl_xattr.h): a little-endian
version 2 header, then (tag, perm, id) entries sorted by tag and id. Adding a named user
needs a mask entry; the mask is widened by the new permissions only, so what the owner, the
group and others could do before is unchanged. It is what systemd-logind does to give the
user at the console their devices (`uaccess`), without the `acl` package.
"""

from __future__ import annotations

import errno
import os
import struct

XATTR = "system.posix_acl_access"
VERSION = 2
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
UNDEFINED = 0xFFFFFFFF
_ENTRY = struct.Struct("<HHI")

Entry = tuple[int, int, int]  # tag, perm (rwx bits), id


def decode(blob: bytes) -> list[Entry]:
    (version,) = struct.unpack_from("<I", blob)
    if version != VERSION:
        raise ValueError(f"unknown ACL version {version}")
    return [_ENTRY.unpack_from(blob, off) for off in range(4, len(blob), _ENTRY.size)]


def encode(entries: list[Entry]) -> bytes:
    return struct.pack("<I", VERSION) + b"".join(_ENTRY.pack(*e) for e in sorted(entries, key=lambda e: (e[0], e[2])))


def from_mode(mode: int) -> list[Entry]:
    return [(USER_OBJ, (mode >> 6) & 7, UNDEFINED), (GROUP_OBJ, (mode >> 3) & 7, UNDEFINED),
            (OTHER, mode & 7, UNDEFINED)]


def with_user(entries: list[Entry], uid: int, perm: int) -> list[Entry]:
    """entries with `uid` granted `perm` (replacing its entry) and the mask widened to let it through."""
    out = [e for e in entries if not (e[0] == USER and e[2] == uid)] + [(USER, perm, uid)]
    masks = [e for e in out if e[0] == MASK]
    if masks:
        out = [e for e in out if e[0] != MASK] + [(MASK, masks[0][1] | perm, UNDEFINED)]
    else:
        group_class = 0
        for tag, p, _ in out:
            if tag in (GROUP_OBJ, USER, GROUP):
                group_class |= p
        out.append((MASK, group_class, UNDEFINED))
    return out


def current(path: str) -> list[Entry]:
    try:
        return decode(os.getxattr(path, XATTR))
    except OSError as exc:
        if exc.errno != errno.ENODATA:
            raise
        return from_mode(os.stat(path).st_mode)


def grant(path: str, uid: int, perm: int) -> None:
    """Give `uid` `perm` (e.g. 6: read and write) on `path`, leaving everyone else's access as it was."""
    os.setxattr(path, XATTR, encode(with_user(current(path), uid, perm)))


def user_perm(path: str, uid: int) -> int | None:
    """The permissions `uid`'s own ACL entry on `path` names (before the mask), None without one."""
    return next((p for tag, p, i in current(path) if tag == USER and i == uid), None)


def revoke(path: str, uid: int) -> bool:
    """Remove `uid`'s own entry from `path`'s ACL (the mask stays as it is); whether there was one."""
    entries = current(path)
    kept = [e for e in entries if not (e[0] == USER and e[2] == uid)]
    if len(kept) == len(entries):
        return False
    os.setxattr(path, XATTR, encode(kept))
    return True
