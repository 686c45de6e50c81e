"""A real, throw-away PostgreSQL server: Debian's binaries, a temporary data directory, a unix
socket only (no TCP port to collide with anyone). The store tests (conftest.py) start one per
session; bench/store.py starts one (with fsync on) to measure.

initdb refuses to run as root, so the cluster belongs to the `postgres` system user (the
Debian package creates it) and is started through runuser; the socket is in the same
temporary directory. Authentication is `trust` for the superuser `iolab` and scram for one
role with a password (`pw`, to test the libpq password conventions for real). Every test
gets its own fresh database (`PgServer.fresh_url`).

The directory is tagged with the process that made it (`/tmp/iolab-<owner>-pg-*`): a server
left running by a killed pytest or benchmark is stopped and removed by the next `create`
(`sweep_dead`); `iolab clean` also removes the directory, after which the orphaned
postmaster shuts itself down (it checks its lock file).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg

from iolab.core import owner as owners

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PORT = 5439  # only names the socket file (.s.PGSQL.5439): no TCP listener
PASSWORD_ROLE, PASSWORD = "pw", "s3cret-Pw-77"


def missing_binaries() -> list[str]:
    return [p for p in ("initdb", "pg_ctl", "postgres") if not (PG_BIN / p).exists()]


@dataclass
class PgServer:
    root: Path  # the temporary directory: data/, the socket, the log
    fsync: bool = False  # off for tests (no crash of the OS is tested), on to measure

    @classmethod
    def create(cls, fsync: bool = False) -> PgServer:
        """initdb and start a new cluster in a new temporary directory (as `postgres` when root)."""
        sweep_dead()
        root = Path(tempfile.mkdtemp(prefix=owners.tag("pg") + "-", dir="/tmp"))
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
        server = cls(root, fsync)
        try:
            r = _as_postgres([str(PG_BIN / "initdb"), "-D", str(server.data), "-U", "iolab", "--no-sync",
                              "-E", "UTF8", "--locale=C.UTF-8", "--auth-local=trust", "--auth-host=reject"])
            if r.returncode != 0:
                raise RuntimeError(f"initdb failed: {r.stdout}{r.stderr}")
            hba = server.data / "pg_hba.conf"
            # the password role first: its line wins over the trust line below it
            hba.write_text(f"local all {PASSWORD_ROLE} scram-sha-256\n" + hba.read_text())
            server.start()
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        try:
            with server.admin() as conn:
                conn.execute(f"CREATE ROLE {PASSWORD_ROLE} LOGIN PASSWORD '{PASSWORD}'")
        except BaseException:
            server.destroy()
            raise
        return server

    def destroy(self) -> None:
        """Stop the server (even one a test left frozen) and remove its directory."""
        try:
            self.thaw()
            if self.stop().returncode != 0:
                self.pg_ctl("-w", "-t", "30", "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def thaw(self) -> None:
        """SIGCONT the postmaster and every backend: a test that froze the server (test_pg_hung.py)
        and failed before continuing it must not leave it stopped for the tests after it, nor a
        stopped postmaster that `pg_ctl stop` cannot stop."""
        postmaster = self.postmaster()
        if postmaster:
            signal_each([postmaster, *children_of(postmaster)], signal.SIGCONT)

    def postmaster(self) -> int | None:
        """The running postmaster's pid, None when the server is stopped."""
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, dbname: str = "postgres", user: str = "iolab") -> str:
        return f"postgresql://{user}@/{dbname}?host={self.root}&port={PORT}"

    def admin(self) -> psycopg.Connection:
        return psycopg.connect(self.url(), autocommit=True)

    def fresh_url(self, user: str = "iolab") -> str:
        """A new, empty database's URL (its owner is `user`)."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE {name} OWNER "{user}"')  # our own name
        return self.url(name, user)

    def pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return _as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), *args])

    def start(self) -> None:
        r = self.pg_ctl("-w", "-t", "60", "-l", str(self.root / "log"), "-o",
                        f"-k {self.root} -p {PORT} -c listen_addresses='' -c fsync={'on' if self.fsync else 'off'}"
                        " -c max_connections=60",
                        "start")
        if r.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {r.stdout}{r.stderr}{_tail(self.root / 'log')}")

    def stop(self) -> subprocess.CompletedProcess[str]:
        return self.pg_ctl("-w", "-t", "60", "-m", "fast", "stop")


def signal_each(pids: list[int], sig: signal.Signals) -> None:
    """Send `sig` to each process still there (a backend whose client just closed may be gone)."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def children_of(pid: int) -> list[int]:
    """The processes `pid` forked (a postmaster's backends and workers)."""
    return [int(c) for c in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()]


def set_read_only(server: PgServer, on: bool) -> None:
    """The whole server read-only for every session (as after a failover to a standby), or back."""
    with server.admin() as conn:
        conn.execute("ALTER SYSTEM SET default_transaction_read_only = on" if on
                     else "ALTER SYSTEM RESET default_transaction_read_only")
        conn.execute("SELECT pg_reload_conf()")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # reloading is asynchronous: wait until a new session sees it
        with server.admin() as conn:
            if conn.execute("SHOW default_transaction_read_only").fetchone() == (("on" if on else "off"),):
                return
        time.sleep(0.05)
    raise AssertionError("the server did not reload its configuration")


def sweep_dead() -> list[Path]:
    """Stop and remove the servers of test processes that died (their tag's owner is gone)."""
    gone = []
    for root in Path("/tmp").glob("iolab-*-pg-*"):
        if owners.dead_owner_of_name(root.name) is None:
            continue
        if (root / "data" / "postmaster.pid").exists():
            _as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(root / "data"), "-w", "-t", "30", "-m", "immediate",
                          "stop"])
        shutil.rmtree(root, ignore_errors=True)
        gone.append(root)
    return gone


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else ""


def _as_postgres(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run a server program as the postgres user when we are root (initdb and postgres refuse root)."""
    if os.geteuid() == 0:
        argv = ["runuser", "-u", "postgres", "--", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


