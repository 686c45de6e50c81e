"""The host side of the agent channel: framed messages over virtio-serial.

Why framing: the channel must never be confused with console noise, and payloads (fio
JSON, job files) are arbitrary bytes. Every frame starts with a magic and carries its
length, every field inside is length-prefixed; see agent.c for the same table.

    frame = b"IOLB" | u8 version | u8 type | u32 id | u32 len | payload
    field = u8 tag | u32 len | bytes
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass

MAGIC = b"IOLB"
VERSION = 1
HEADER = struct.Struct("<4sBcII")  # magic, version, type, id, payload length
MAX_PAYLOAD = 256 << 20

# host -> guest (CLOCK: set the wall clock and reseed the RNG, agent version 2 on)
RUN, KILL, PING, POWEROFF, CLOCK = b"R", b"K", b"P", b"Q", b"T"
# guest -> host
HELLO, DONE, ERROR = b"H", b"D", b"E"

Fields = list[tuple[str, bytes]]


class ChannelClosed(Exception):
    """The guest side went away (QEMU exited, the agent died) before answering."""


@dataclass(frozen=True)
class Frame:
    type: bytes
    id: int
    fields: Fields

    def first(self, tag: str, default: bytes | None = None) -> bytes | None:
        for t, v in self.fields:
            if t == tag:
                return v
        return default

    def text(self, tag: str, default: str = "") -> str:
        v = self.first(tag)
        return default if v is None else v.decode(errors="replace")

    def number(self, tag: str, default: int = 0) -> int:
        v = self.first(tag)
        return default if v is None else int(v)


def encode_fields(fields: Iterable[tuple[str, bytes | str]]) -> bytes:
    out = bytearray()
    for tag, value in fields:
        data = value.encode() if isinstance(value, str) else value
        if len(tag) != 1:
            raise ValueError(f"field tag must be one character, got {tag!r}")
        out += tag.encode() + struct.pack("<I", len(data)) + data
    return bytes(out)


def decode_fields(payload: bytes) -> Fields:
    fields: Fields = []
    off = 0
    while off < len(payload):
        if len(payload) - off < 5:
            raise ValueError("truncated field header")
        tag = chr(payload[off])
        (n,) = struct.unpack_from("<I", payload, off + 1)
        off += 5
        if off + n > len(payload):
            raise ValueError("truncated field")
        fields.append((tag, payload[off: off + n]))
        off += n
    return fields


def encode_frame(ftype: bytes, fid: int, fields: Iterable[tuple[str, bytes | str]] = ()) -> bytes:
    payload = encode_fields(fields)
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"request of {len(payload)} bytes exceeds the {MAX_PAYLOAD} byte limit")
    return HEADER.pack(MAGIC, VERSION, ftype, fid, len(payload)) + payload


class FrameSocket:
    """A connected unix socket speaking frames; sends are serialised by a lock."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._send_lock = threading.Lock()
        self._buf = bytearray()

    def send(self, ftype: bytes, fid: int, fields: Iterable[tuple[str, bytes | str]] = ()) -> None:
        data = encode_frame(ftype, fid, fields)
        with self._send_lock:
            try:
                self.sock.sendall(data)
            except OSError as exc:
                raise ChannelClosed(f"sending to the guest agent failed: {exc}") from exc

    def recv(self) -> Frame:
        """Next frame; bytes before a magic are skipped (there should be none)."""
        head = self._read(HEADER.size)
        while head[:4] != MAGIC:
            head = head[1:] + self._read(1)
        magic, version, ftype, fid, length = HEADER.unpack(head)
        if version != VERSION:
            raise ChannelClosed(f"guest agent speaks protocol version {version}, expected {VERSION}")
        if length > MAX_PAYLOAD:
            raise ChannelClosed(f"guest agent sent an oversized frame ({length} bytes)")
        return Frame(ftype, fid, decode_fields(self._read(length)))

    def _read(self, n: int) -> bytes:
        while len(self._buf) < n:
            try:
                chunk = self.sock.recv(max(65536, n - len(self._buf)))
            except OSError as exc:
                raise ChannelClosed(f"reading from the guest agent failed: {exc}") from exc
            if not chunk:
                raise ChannelClosed("the guest agent channel closed (QEMU exited or the agent died)")
            self._buf += chunk
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
