"""A fio server that babbles: a proxy in front of a real `fio --server` that forwards its frames
unchanged and, once the job has run for `--after` seconds, slips in what a broken or hostile
server might send (fio's wire format: tests/fleet/fio_wire.py).

    python -m tests.fleet.babbler --listen ADDR --port P --upstream-port U --mode text|garbage

* text: text messages that imitate the start of fio's JSON (`hello\\n{not json`, a fake
  `"fio version"` header), which fio's client copies into its output before the real JSON;
  the rest of the run is forwarded untouched, so the host's result is complete.
* garbage: the same text, then bytes that are no fio frame at all: fio's client rejects the
  stream (bad crc) and drops the host mid-trial.

Run inside a host's network namespace (`ip netns exec`), listening on the host's address;
the real server listens on the namespace's loopback.
"""

from __future__ import annotations

import argparse
import socket
import threading
import time

from tests.fleet import fio_wire as wire

FAKE = ('hello\n{not json\n{\n  "fio version" : "fio-0.0",\n  "client_stats" : [ { "jobname" : "fake", '
        '"read" : { "iops" : 1e12 } }\n')


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _serve(client: socket.socket, upstream: tuple[str, int], mode: str, after: float) -> None:
    server = socket.create_connection(upstream)
    threading.Thread(target=_pump, args=(client, server), daemon=True).start()
    lock, started, done = threading.Lock(), threading.Event(), threading.Event()

    def babble() -> None:
        if not started.wait(timeout=600) or done.wait(timeout=after):
            return
        with lock:
            client.sendall(wire.encode(wire.TEXT, wire.text(FAKE)))
            if mode == "garbage":
                client.sendall(b"\xde\xad\xbe\xef not a fio frame " * 16)
                done.set()

    threading.Thread(target=babble, daemon=True).start()
    try:
        while not done.is_set():
            f = wire.read_frame(server)
            with lock:
                if done.is_set():
                    break
                client.sendall(wire.encode(f.opcode, f.payload, f.tag))
            if f.opcode == wire.START:
                started.set()
        time.sleep(1)
    except (EOFError, OSError):
        pass
    finally:
        done.set()
        for s in (client, server):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream-port", type=int, required=True)
    ap.add_argument("--mode", choices=("text", "garbage"), required=True)
    ap.add_argument("--after", type=float, default=0.5, help="seconds after the job's start")
    args = ap.parse_args()
    family = socket.AF_INET6 if ":" in args.listen else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((args.listen, args.port))
    listener.listen(16)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve, args=(conn, ("127.0.0.1", args.upstream_port), args.mode, args.after),
                         daemon=True).start()


if __name__ == "__main__":
    main()
