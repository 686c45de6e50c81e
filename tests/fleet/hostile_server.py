"""A deliberately malicious fio server, speaking fio's own protocol (tests/fleet/fio_wire.py).

On every connection it answers fio's probe as a real server would (so iolab's checks pass
and the client goes on), then uses what fio's client protocol lets a server do to the
client's machine:

* SENDFILE for each path in `reads`: fio's client opens the file and sends it back;
* an IOLOG stored as it is for each name in `writes`: fio's client writes the payload to
  `<name>.<host>` (absolute paths, and `..` out of its work directory);

then says so in a text message, stops the "job" and quits. Everything the client sent back
is kept (`received`, and per SENDFILE the reply's size, error and data) for the test to
search for a canary's content.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path

from tests.fleet import fio_wire as wire


@dataclass
class SendfileReply:
    path: str
    size: int
    error: int
    data: bytes


@dataclass
class HostileServer:
    reads: list[str]
    writes: list[str]
    fio_version: str
    payload: bytes = b"iolab-hostile-server-was-here\n"
    received: bytearray = field(default_factory=bytearray)
    replies: list[SendfileReply] = field(default_factory=list)
    connections: int = 0
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def listen_tcp(self, address: str = "127.0.0.1") -> int:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((address, 0))
        return self._start()

    def listen_unix(self, path: Path) -> int:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(path))
        return self._start()

    def _start(self) -> int:
        assert self._sock is not None
        self._sock.listen(16)
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self._threads.append(t)
        name = self._sock.getsockname()
        return int(name[1]) if isinstance(name, tuple) else 0

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
        for t in self._threads:
            t.join(timeout=10)

    def _accept(self) -> None:
        assert self._sock is not None
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()
            self._threads.append(t)

    def _recv(self, conn: socket.socket) -> wire.Frame:
        f = wire.read_frame(conn)
        with self._lock:
            self.received += f.payload
        return f

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        try:
            with conn:
                while True:  # the client's probe, job and run command
                    f = self._recv(conn)
                    if f.opcode == wire.PROBE:
                        conn.sendall(wire.encode(wire.PROBE, wire.probe_reply(self.fio_version), f.tag))
                    if f.opcode == wire.RUN:
                        break
                conn.sendall(wire.encode(wire.SERVER_START))
                for i, path in enumerate(self.reads):
                    conn.sendall(wire.encode(wire.SENDFILE, wire.sendfile(path), tag=1000 + i))
                    while (f := self._recv(conn)).opcode != wire.SENDFILE:
                        pass
                    size, error, data = wire.sendfile_reply(f.payload)
                    with self._lock:
                        self.replies.append(SendfileReply(path, size, error, data))
                for name in self.writes:
                    conn.sendall(wire.encode(wire.IOLOG, wire.iolog(name, self.payload)))
                conn.sendall(wire.encode(wire.TEXT, wire.text("hostile server: done\n")))
                conn.sendall(wire.encode(wire.STOP, wire.stop()))
                conn.sendall(wire.encode(wire.QUIT))
                with contextlib.suppress(EOFError, OSError):
                    while True:
                        self._recv(conn)
        except (EOFError, OSError) as exc:
            with self._lock:
                self.errors.append(repr(exc))
