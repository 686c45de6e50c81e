"""The data-safety guard for what a fleet host's job writes, and `--destroy-data HOST:PATH`.

A host's `device`, or a `filename` that already exists or names a block device, is only
written when the user names it with `--destroy-data HOST:PATH` (the permission names the
host: the same path on two hosts is two decisions). Beyond that:

* A host sharing this machine's devices (FleetHost.local) is judged here: a block device
  (by number, whatever the path's spelling or links: core/diskguard.py) that holds data is
  refused as for the `device` target; a `filename` that exists (a file, a link, a device
  node) is refused unless named.
* A host on another machine cannot be examined from here. Its `device` is refused unless
  named. Its `filename` is examined *by its own fio server*, which reports what it would
  open (`check_remote`): a 512-byte read with `allow_file_create=0`. Only fio's own "file
  creation disallowed" (nothing there to open) clears it; anything else (it read the
  file, it is a directory, an error) needs the permission.

This is the friendly first line: the guarantee on a host is its server's user, which may
write only the device or directory it was given (`iolab fleet serve`, docs/fleet.md).
Any other `--destroy-data` value goes to core.diskguard unchanged.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterable

from iolab.core import diskguard
from iolab.core.errors import RefusedError
from iolab.fio import engine as fio_engine
from iolab.fleet.fio_output import host_entries
from iolab.fleet.hosts import FleetHost

_HOST_PATH = re.compile(r"([A-Za-z0-9_.]{1,64}):(/.+)")
_ALLOWED: set[tuple[str, str]] = set()
ABSENT = "file creation disallowed by allow_file_create=0"


def allow_destroy(values: Iterable[str]) -> None:
    """Split `HOST:PATH` values (kept here) from plain devices (core.diskguard)."""
    plain = []
    for v in values:
        m = _HOST_PATH.fullmatch(v)
        if m:
            _ALLOWED.add((m.group(1), m.group(2)))
        else:
            plain.append(v)
    diskguard.allow_destroy(plain)


def allowed(host: FleetHost) -> bool:
    return (host.name, host.path) in _ALLOWED


def _refuse(host: FleetHost, why: str) -> RefusedError:
    return RefusedError(f"refusing to use {host.path} on host {host.label()}: {why}. If that is really what you "
                        f"want, pass --destroy-data {host.name}:{host.path}")


def check_host(host: FleetHost) -> bool:
    """What can be decided without connecting. RefusedError when the host's device or file may hold
    data and was not named in --destroy-data; True when its `filename` must still be examined on the
    host itself (check_remote)."""
    if not host.local:
        if host.device is not None and not allowed(host):
            raise _refuse(host, "a device on another machine cannot be examined from here, and writing to it "
                                "destroys its data")
        return host.filename is not None and not allowed(host)
    if host.device is not None:
        try:
            node = diskguard.block_device(host.device)
        except ValueError as exc:
            raise RefusedError(f"refusing to use {host.device} on host {host.label()}: it {exc}") from None
        signs = diskguard.data_signs(node)
        if signs and not allowed(host):
            raise _refuse(host, f"it {'; it '.join(signs)}. Its data would be destroyed")
        return False
    if allowed(host):
        return False
    try:
        st = os.lstat(host.path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise _refuse(host, f"it cannot be examined ({exc.strerror})") from None
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(host, f"it is a symbolic link (to {os.readlink(host.path)}): fio would write where it "
                            "points")
    if stat.S_ISBLK(st.st_mode):
        node = diskguard.block_device(host.path)
        signs = diskguard.data_signs(node)
        raise _refuse(host, f"it is the block device {node.path}" + (f", which {'; which '.join(signs)}" if signs
                                                                      else ""))
    kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a regular file" if stat.S_ISREG(st.st_mode) \
        else "a device or special file"
    raise _refuse(host, f"it exists ({kind}, {st.st_size} bytes): fio would overwrite it")


def probe_job(path: str) -> str:
    """What fio on the host would open at `path`, without writing: read 512 bytes, never create."""
    return fio_engine.render_job({"filename": path, "rw": "read", "bs": 512, "size": 512, "ioengine": "psync",
                                  "allow_file_create": 0, "invalidate": 0, "direct": 0}, [("iolab-guard", {})])


def check_remote(run: Callable[[list[FleetHost], dict[str, str]], object], hosts: list[FleetHost]) -> list[str]:
    """Ask each host's fio server what it would open at its `filename`; the refusals (empty: all clear).
    `run` is the fleet's client runner (fleet/checks.py)."""
    if not hosts:
        return []
    got = run(hosts, {h.name: probe_job(h.path) for h in hosts})
    refusals = []
    for h in hosts:
        r = got.hosts[h.name]  # type: ignore[attr-defined]
        entries = host_entries(r.doc)
        read = sum(int((e.get("read") or {}).get("io_bytes") or 0) for e in entries)
        if ABSENT in r.text and not read:
            continue
        if read:
            why = "its fio server opened and read it: it exists, and fio would overwrite it"
        else:
            why = f"its fio server could not say that nothing is there ({r.why or 'fio said: ' + r.text[-200:]})"
        refusals.append(str(_refuse(h, why + " (iolab does not remove files on other machines: an earlier "
                                    "run may have left it)" if read else why)))
    return refusals
