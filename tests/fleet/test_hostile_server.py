"""A fleet host whose server is hostile cannot read or write iolab's machine outside its client's
work directory (issue 26 item 3, issue 23 item 1's fleet client).

fio's client obeys its server: SENDFILE makes it read any file the server names and send it
back, an IOLOG stored as it is makes it write `<name>.<host>` wherever the server says (fio
3.33 client.c). The hostile server (tests/fleet/hostile_server.py, fio's own protocol) asks for
canaries iolab's operator keeps (a file under /root, the run's results database, the client's
parent's environment) and writes to /root, /etc, iolab's data and scratch directories and out
of its work directory with `..`. First shown against a bare `fio --client` as root (the attack
works), then through `iolab run`: nothing read, nothing written, and the good host's results
are kept.

What the unprivileged user alone does not stop, the OS-level confinement (core/confine.py,
fleet/client.py client_confinement) does: reading a world-readable file, writing into a
world-writable directory. Each of those two tests also checks that the client really ran the
protocol (it answered the server's SENDFILE), so a client that never started cannot pass them.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from iolab.core.net import free_port
from iolab.fio.engine import fio_version
from tests.core.helpers import Lab, fio_workload, make_lab, study_table
from tests.fleet.hostile_server import HostileServer
from tests.fleet.netns_hosts import _kill_server_tree

SECRET_ENV = "IOLAB_TEST_OPERATOR_SECRET"


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    lab = make_lab(tmp_path / "lab")
    try:
        yield lab
    finally:
        lab.force_cleanup()


@contextmanager
def root_canary() -> Iterator[tuple[Path, str]]:
    """A directory under /root (0700) holding a file (0600) with a secret: what an operator keeps."""
    secret = "canary-" + secrets.token_hex(16)
    d = Path(tempfile.mkdtemp(prefix="iolab-canary-", dir="/root"))
    try:
        os.chmod(d, 0o700)
        (d / "secret").write_text(secret + "\n")
        os.chmod(d / "secret", 0o600)
        yield d, secret
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextmanager
def fio_server(port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["fio", f"--server=ip:127.0.0.1,{port}"], stdout=open(log, "wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        end = time.monotonic() + 15
        while subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True).stdout == "":
            assert proc.poll() is None and time.monotonic() < end, log.read_text()
            time.sleep(0.1)
        yield proc
    finally:
        _kill_server_tree(proc.pid)
        proc.wait(timeout=10)


def _everything_under(paths: list[Path]) -> set[str]:
    out = set()
    for p in paths:
        if p.is_dir():
            out |= {str(q) for q in p.rglob("*")}
    return out


def test_the_attack_works_against_a_bare_fio_client_as_root(tmp_path: Path) -> None:
    """The hostile server is real: against `fio --client` run as root, it reads the canary and writes
    into /root and out of the client's directory. (What iolab must stop.)"""
    with root_canary() as (canary_dir, secret):
        evil = HostileServer(reads=[str(canary_dir / "secret")],
                             writes=[str(canary_dir / "pwned"), "../pwned"], fio_version=fio_version() or "")
        port = evil.listen_tcp()
        work = tmp_path / "work"
        work.mkdir()
        (work / "job.fio").write_text("[x]\nioengine=null\nsize=1m\n")
        try:
            subprocess.run(["fio", f"--client=ip:127.0.0.1,{port}", "--output-format=json", "job.fio"], cwd=work,
                           capture_output=True, timeout=60)
        finally:
            evil.close()
        assert secret.encode() in bytes(evil.received)
        assert (canary_dir / "pwned.127.0.0.1").read_bytes() == evil.payload
        assert (tmp_path / "pwned.127.0.0.1").exists()


def test_a_hostile_server_reads_and_writes_nothing_outside_its_clients_work_dir(lab: Lab, tmp_path: Path) -> None:
    """Through `iolab run`: two hostile hosts (loopback TCP, and a unix socket reached through iolab's
    relay) and one real fio server. Every SENDFILE of a canary fails (the client's user cannot open
    it), no byte of the secret (in a file, in iolab's environment) reaches the server, every write
    outside the work dir fails, the run goes on and keeps the real host's results."""
    data = tmp_path / "data"
    data.mkdir()
    sockdir = tmp_path / "sockets"
    sockdir.mkdir(mode=0o700)
    with root_canary() as (canary_dir, secret):
        lab.env[SECRET_ENV] = secret
        lab.env["PGPASSWORD"] = secret
        lab.data.mkdir(parents=True, exist_ok=True)
        (lab.data / "keep").write_text(secret)
        reads = [str(canary_dir / "secret"), str(lab.data / "keep"), str(lab.db), "/proc/self/environ",
                 "/proc/1/environ", f"/proc/{os.getpid()}/environ", "/etc/shadow", "../../job.fio"]
        # every place a write is tried is one this test made, so a regression harms nothing else: a
        # directory under /root, a root-owned one others may enter but not write, iolab's data and
        # scratch dirs, and `..` out of the client's work dir, which stays inside this test's directory
        # whatever the depth (the scratch dir and $TMPDIR, where the probes before load run, sit deep)
        deep = tmp_path / "d1" / "d2" / "d3"
        lab.scratch.rmdir()  # make_lab's, still empty
        lab.scratch = deep / "scratch"
        lab.scratch.mkdir(parents=True)
        lab.env["IOLAB_SCRATCH"] = str(lab.scratch)
        tmpdir = deep / "tmp"
        tmpdir.mkdir(mode=0o700)
        lab.env["TMPDIR"] = str(tmpdir)
        shared = Path(tempfile.mkdtemp(prefix="iolab-canary-", dir="/var/tmp"))
        os.chmod(shared, 0o755)
        writes = [str(canary_dir / "pwned"), str(shared / "pwned"), str(lab.data / "pwned"),
                  str(lab.scratch / "pwned"), str(data / "pwned"), "../pwned", "../../pwned", "../../../pwned"]
        watched = [canary_dir, shared, lab.data, lab.scratch, data, tmp_path]
        before = _everything_under(watched)
        evils = [HostileServer(reads, writes, fio_version() or "") for _ in range(2)]
        tcp_port = evils[0].listen_tcp()
        evils[1].listen_unix(sockdir / "evil.sock")
        good_port = free_port()
        hosts = (f'[[target.hosts]]\nname = "good"\naddress = "127.0.0.1"\nport = {good_port}\n'
                 f'filename = "{data / "good.dat"}"\n'
                 f'[[target.hosts]]\nname = "evil_tcp"\naddress = "127.0.0.1"\nport = {tcp_port}\n'
                 f'filename = "{data / "evil1.dat"}"\n'
                 f'[[target.hosts]]\nname = "evil_sock"\naddress = "{sockdir / "evil.sock"}"\n'
                 f'filename = "{data / "evil2.dat"}"\n')
        spec = lab.spec(study_table("hostile", repetitions=1, max_repetitions=1)
                        + fio_workload(size="4M", runtime=1, rw="randread") + '[target]\nkind = "fleet"\n' + hosts)
        try:
            with fio_server(good_port, tmp_path / "good-server.log"):
                r = lab.iolab("run", spec, timeout=300)
            after = _everything_under(watched)
        finally:
            for e in evils:
                e.close()
            shutil.rmtree(shared, ignore_errors=True)
        assert r.returncode == 0, r.stdout + r.stderr
        for e in evils:
            assert e.connections >= 2, e.errors  # the probe before load, and the trial
            got = bytes(e.received)
            assert secret.encode() not in got, "a canary reached the hostile server"
            by_path: dict[str, list[Any]] = {}
            for rep in e.replies:
                by_path.setdefault(rep.path, []).append(rep)
            for path in reads:
                assert by_path.get(path), (path, e.errors)
            for path in (str(canary_dir / "secret"), str(lab.data / "keep"), str(lab.db), "/proc/1/environ",
                         f"/proc/{os.getpid()}/environ", "/etc/shadow", "../../job.fio"):
                assert all(rep.error != 0 for rep in by_path[path]), (path, by_path[path])
        assert not [p for p in after - before if "pwned" in p], sorted(after - before)
    (t,) = lab.report_json()["trials"]
    assert t["status"] == "ok", t.get("error")
    assert t["metrics"]["fleet_hosts_ok"] == 1 and t["metrics"]["host:good:iops"] > 0
    failed = t["manifest"]["workload_facts"]["fleet_failed_hosts"]
    assert set(failed) == {"evil_tcp", "evil_sock"}, failed
    assert "Permission denied" in failed["evil_tcp"]  # fio's own words, when the server made it write
    lab.assert_nothing_left()


def _attack_once(tmp_path: Path, reads: list[str], writes: list[str]) -> HostileServer:
    from iolab.fleet.client import run_clients
    from iolab.fleet.hosts import FleetHost

    evil = HostileServer(reads, writes, fio_version() or "")
    port = evil.listen_tcp()
    base = tmp_path / "clients"
    base.mkdir(mode=0o700)
    try:
        run_clients(base, None, [FleetHost(name="evil", address="127.0.0.1", port=port, filename="/nonexistent/x")],
                    {"evil": "[x]\nioengine=null\nsize=1m\n"}, 60)
    finally:
        evil.close()
    return evil


def test_a_world_readable_file_is_not_read(tmp_path: Path) -> None:
    """The client's user may read a 0644 file in a 0755 directory; in its confinement /var/tmp
    is an empty read-only directory, so SENDFILE of it fails."""
    secret = "public-canary-" + secrets.token_hex(8)
    d = Path(tempfile.mkdtemp(prefix="iolab-canary-", dir="/var/tmp"))
    try:
        os.chmod(d, 0o755)
        (d / "public").write_text(secret)
        os.chmod(d / "public", 0o644)
        evil = _attack_once(tmp_path, [str(d / "public")], [])
    finally:
        shutil.rmtree(d, ignore_errors=True)
    assert secret.encode() not in bytes(evil.received)
    (reply,) = [r for r in evil.replies if r.path == str(d / "public")]  # the client ran and answered
    assert reply.error != 0, reply


@pytest.mark.parametrize("where", ["/var/tmp", "/tmp", "/dev/shm"])
def test_nothing_is_written_into_a_world_writable_directory(tmp_path: Path, where: str) -> None:
    """The client's user may write a 1777 directory; in its confinement /tmp and /var/tmp are
    empty read-only directories and /dev/shm a private tmpfs, so the IOLOG lands nowhere."""
    d = Path(tempfile.mkdtemp(prefix="iolab-canary-", dir=where))
    try:
        os.chmod(d, 0o1777)
        evil = _attack_once(tmp_path, ["/nonexistent-iolab-probe"], [str(d / "pwned")])
        written = list(d.iterdir())
    finally:
        shutil.rmtree(d, ignore_errors=True)
    assert not written, written
    assert [r.path for r in evil.replies] == ["/nonexistent-iolab-probe"], (evil.replies, evil.errors)  # it ran


def test_the_client_runs_as_its_own_user_with_nothing_of_the_operators(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """What fleet/client.py starts for each host, with a shell in fio's place: the client's user (no
    supplementary groups, no capabilities, no_new_privs), an environment of its own (none of the
    operator's secrets, HOME=/nonexistent), files capped by RLIMIT_FSIZE, released by its gate."""
    from iolab.fleet import accounts
    from iolab.fleet.client import FILE_SIZE_LIMIT, GATE, client_argv

    monkeypatch.setenv(SECRET_ENV, "operator-secret")
    account, _ = accounts.ensure(accounts.CLIENT_USER)
    work = tmp_path / "work"
    work.mkdir()
    accounts.give(work, account, 0o700)
    os.mkfifo(work / GATE)
    accounts.give(work / GATE, account, 0o600)
    script = "id -u; id -G; ulimit -f; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; env"
    proc = subprocess.Popen(client_argv(account, ["/bin/sh", "-c", script]), cwd=work, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    time.sleep(0.3)
    assert proc.poll() is None  # waiting at its gate
    fd = os.open(work / GATE, os.O_WRONLY)
    os.close(fd)
    out, _ = proc.communicate(timeout=30)
    lines = out.splitlines()
    assert lines[0] == str(account.uid) and lines[1] == str(account.gid), out
    assert int(lines[2]) * 512 == FILE_SIZE_LIMIT, out
    assert "CapEff:\t0000000000000000" in out and "CapBnd:\t0000000000000000" in out and "NoNewPrivs:\t1" in out
    assert "HOME=/nonexistent" in out and "operator-secret" not in out and SECRET_ENV not in out, out


def test_the_client_confinement_keeps_the_directory_of_its_fio_visible(tmp_path: Path) -> None:
    """A fio installed under /opt (hidden for the client otherwise) must stay runnable: its
    directory is not replaced by an empty one; the other data directories still are."""
    from iolab.fleet.client import CLIENT_HIDDEN, client_confinement

    plain = client_confinement()
    present = [d for d in CLIENT_HIDDEN if os.path.isdir(d) and not os.path.islink(d)]
    assert set(present) - {"/etc/iolab"} <= set(plain.hidden), plain.hidden
    if os.path.isdir("/opt"):
        assert "/opt" in plain.hidden
        kept = client_confinement(("/opt/fio-3.38/bin/fio",))
        assert "/opt" not in kept.hidden and "/tmp" in kept.hidden, kept.hidden
    assert plain.share_net and plain.user is None and "CAP_SYS_ADMIN" not in plain.caps
