"""A host reached by unix socket, as its fio client sees it: a socket in the client's own work
directory that iolab forwards to the real one.

Two reasons. The real socket sits in a directory only the host's server user and the
operator may enter (docs/fleet.md), and the client runs as another unprivileged user
(fleet/accounts.py), so the client cannot open it; iolab, the operator, can. And fio's
client names a host's logs `<log name>.<host>` where the host is the socket path, so an
absolute path (`h_iops.1.log./run/iolab-fio/fio.sock`) names a directory that does not exist
and every log is lost; the relay's socket is `server.sock` in the client's work directory,
so the logs are `h_iops.1.log.server.sock` beside it.

Paths longer than a unix socket address allows (108 bytes) are reached through
/proc/self/fd/N of their directory.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path

from iolab.fleet.accounts import Account, give

RELAY_NAME = "server.sock"
_CHUNK = 1 << 16


def _connectable(path: str) -> tuple[str, int | None]:
    """An address for `path` short enough for sun_path, and the directory fd that keeps it valid."""
    if len(path.encode()) < 100:
        return path, None
    parent, name = os.path.split(path)
    fd = os.open(parent or ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    return f"/proc/self/fd/{fd}/{name}", fd


class UnixRelay:
    """Listens on `<workdir>/server.sock` (owned by the client's user, mode 0600) and forwards
    every connection to `upstream` until either side closes. close() ends everything."""

    def __init__(self, workdir: Path, upstream: str, account: Account | None):
        self.upstream = upstream
        self.path = workdir / RELAY_NAME
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        address, fd = _connectable(str(self.path))
        try:
            self._listener.bind(address)
        finally:
            if fd is not None:
                os.close(fd)
        if account is not None:
            give(self.path, account, 0o600)
        self._listener.listen(8)
        self._thread = threading.Thread(target=self._accept, name=f"fleet-relay-{workdir.name}", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self._listener.accept()
            except OSError:
                return  # closed
            up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address, fd = _connectable(self.upstream)
            try:
                up.connect(address)
            except OSError:
                down.close()
                up.close()
                continue  # the client sees the connection drop: fio says so, and the host fails
            finally:
                if fd is not None:
                    os.close(fd)
            with self._lock:
                if self._closed:
                    down.close()
                    up.close()
                    return
                self._conns += [down, up]
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=_pump, args=(a, b), daemon=True, name="fleet-relay-pump").start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self._conns = self._conns, []
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()
        self._thread.join(timeout=5)


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(_CHUNK):
            dst.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)
