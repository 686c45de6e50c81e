"""fio's client/server wire format, enough to play a hostile fio server (fio 3.33 server.h).

A frame is a 24-byte little-endian header (version, opcode, flags, tag, pdu_len, cmd_crc16,
pdu_crc16) and a payload of at most 1024 bytes (longer payloads are fragments flagged MORE);
cmd_crc16 covers the first 20 header bytes, pdu_crc16 the payload, both fio's CRC-16
(poly 0xA001 reflected, init 0: crc/crc16.c). Written from fio's server.h/server.c/client.c
for the tests; iolab itself never speaks the protocol.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

SERVER_VER = 97          # fio 3.33
MAX_FRAGMENT = 1024
F_MORE = 1

QUIT, EXIT, JOB, JOBLINE, TEXT, TS, GS, SEND_ETA, ETA, PROBE, START, STOP = range(1, 13)
DU, SERVER_START, ADD_JOB, RUN, IOLOG, UPDATE_JOB, LOAD_FILE, VTRIGGER, SENDFILE, JOB_OPT = range(13, 23)
STORE_COMPRESSED = 2     # an IOLOG whose payload the client writes to disk as it is
_HEADER = struct.Struct("<HHIQIHH")


def _table() -> list[int]:
    out = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
        out.append(crc)
    return out


_CRC = _table()


def crc16(data: bytes) -> int:
    crc = 0
    for b in data:
        crc = (crc >> 8) ^ _CRC[(crc ^ b) & 0xFF]
    return crc


@dataclass
class Frame:
    opcode: int
    tag: int
    payload: bytes
    flags: int = 0


def encode(opcode: int, payload: bytes = b"", tag: int = 0) -> bytes:
    """One command, fragmented as fio does."""
    out, rest = b"", payload
    while True:
        part, rest = rest[:MAX_FRAGMENT], rest[MAX_FRAGMENT:]
        flags = F_MORE if rest else 0
        head = struct.pack("<HHIQI", SERVER_VER, opcode, flags, tag, len(part))
        out += head + struct.pack("<HH", crc16(head), crc16(part)) + part
        if not rest:
            return out


def _recv_exact(sk: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sk.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def read_frame(sk: socket.socket) -> Frame:
    """One whole command (fragments joined); EOFError when the peer closed."""
    payload, first = b"", None
    while True:
        version, opcode, flags, tag, pdu_len, _c1, _c2 = _HEADER.unpack(_recv_exact(sk, _HEADER.size))
        payload += _recv_exact(sk, pdu_len) if pdu_len else b""
        first = first or Frame(opcode, tag, b"", flags)
        if not flags & F_MORE:
            return Frame(first.opcode, first.tag, payload, first.flags)


def probe_reply(fio_version: str, hostname: str = "fake") -> bytes:
    """cmd_probe_reply_pdu: hostname[64], bigendian, fio_version[32], os, arch, bpp, cpus, flags."""
    return struct.pack("<64sB32sBBBxIQ", hostname.encode(), 0, fio_version.encode(), 1, 2, 8, 2, 0)


def text(message: str, level: int = 0) -> bytes:
    """cmd_text_pdu: level, buf_len, log_sec, log_usec, buf."""
    now = time.time()
    body = message.encode() + b"\0"
    return struct.pack("<IIQQ", level, len(body), int(now), int(now % 1 * 1e6)) + body


def sendfile(path: str) -> bytes:
    """cmd_sendfile: path[256]."""
    return struct.pack("<256s", path.encode())


def sendfile_reply(payload: bytes) -> tuple[int, int, bytes]:
    """(size, error, data) of the client's cmd_sendfile_reply."""
    size, error = struct.unpack_from("<II", payload)
    return size, error, payload[8:]


def iolog(name: str, data: bytes) -> bytes:
    """cmd_iolog_pdu stored as it is (STORE_COMPRESSED): the client writes `data` to `<name>.<host>`."""
    return struct.pack("<QIIIIII256s", 0, 1, 1, STORE_COMPRESSED, 0, 0, 0, name.encode()) + data


def stop(error: int = 0) -> bytes:
    """cmd_end_pdu: error, signal."""
    return struct.pack("<II", error, 0)
