"""`iolab fleet serve`: fio's server as an unprivileged user that may write only its device or
directory, on a unix socket only the operator reaches; and a fleet run through it."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.core.helpers import IOLAB, Lab, fio_workload, make_lab, study_table


@pytest.fixture
def lab(tmp_path: Path) -> Any:
    lab = make_lab(tmp_path / "lab")
    try:
        yield lab
    finally:
        lab.force_cleanup()


@contextmanager
def serving(*args: str, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    """`iolab fleet serve ARGS` until the block ends; then it and every job it forked are killed."""
    from tests.fleet.netns_hosts import _kill_server_tree

    proc = subprocess.Popen([str(IOLAB), "fleet", "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            _kill_server_tree(proc.pid)
        proc.communicate(timeout=10)


def _wait(cond: Any, proc: subprocess.Popen[str]) -> None:
    end = time.monotonic() + 15
    while not cond():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end
        time.sleep(0.05)


@contextmanager
def served_place(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A directory the server's user can reach (root-owned, 0711: it may pass, not list or write) and a
    scratch loop device; the loop device's ACL entry for the server user is taken back at the end."""
    from iolab.fleet import accounts, acl

    parent = Path(tempfile.mkdtemp(prefix="iolab-serve-", dir="/var/tmp"))
    os.chmod(parent, 0o711)
    image = tmp_path / "dev.img"
    image.write_bytes(b"")
    os.truncate(image, 64 << 20)
    dev = subprocess.run(["losetup", "-f", "--show", str(image)], capture_output=True, text=True, check=True,
                         timeout=30).stdout.strip()
    try:
        yield parent, dev
    finally:
        server = accounts.lookup(accounts.SERVER_USER)
        if server is not None:
            acl.revoke(dev, server.uid)
        subprocess.run(["losetup", "-d", dev], capture_output=True, timeout=30)
        shutil.rmtree(parent, ignore_errors=True)


def _status(pid: int) -> dict[str, str]:
    return dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)


def _fio_below(pid: int) -> int | None:
    """The pid of fio's server: the serve command replaced itself with setpriv, which became fio."""
    exe = os.path.realpath(f"/proc/{pid}/exe")
    return pid if os.path.basename(exe) == "fio" else None


def _connect_as(user: str, sock: Path) -> str:
    """Try to connect to a unix socket as another unprivileged user; what happened."""
    code = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect(sys.argv[1]); print('connected')\n"
            "except OSError as e:\n print(type(e).__name__)")
    pw = pwd.getpwnam(user)
    r = subprocess.run(["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups",
                        "/usr/bin/python3", "-c", code, str(sock)], capture_output=True, text=True, timeout=30)
    return (r.stdout + r.stderr).strip()


def test_serve_runs_fio_as_its_own_user_that_may_write_only_its_device(tmp_path: Path) -> None:
    """`iolab fleet serve` as root: fio runs as iolab-fio without capabilities, on a socket in a
    directory (2710, its user's) nobody else can enter: another user cannot even connect; fio can
    write the device it was given and nothing else (a job writing elsewhere fails: that is what a
    stranger's job or --trigger-remote command could do)."""
    from iolab.fleet import accounts, acl

    with served_place(tmp_path) as (parent, dev):
        sock = parent / "sock" / "fio.sock"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SUDO_")}
        with serving("--bind", str(sock), "--device", dev, env=env) as proc:
            _wait(sock.exists, proc)
            user = accounts.lookup(accounts.SERVER_USER)
            assert user is not None and user.uid != 0
            fio_pid = _fio_below(proc.pid)
            assert fio_pid is not None
            st = _status(fio_pid)
            assert st["Uid"].split()[:2] == [str(user.uid)] * 2 and st["Gid"].split()[0] == str(user.gid)
            assert int(st["CapEff"], 16) == 0 and int(st["CapBnd"], 16) == 0 and st["NoNewPrivs"].strip() == "1"
            assert st["Groups"].strip() == ""
            d = os.stat(sock.parent)
            assert d.st_uid == user.uid and stat.S_IMODE(d.st_mode) == 0o2710 and d.st_gid == user.gid
            # fio makes its socket 0777 whatever the umask: the directory is what keeps others out
            assert _connect_as("nobody", sock) == "PermissionError"
            accounts.ensure(accounts.CLIENT_USER)
            assert _connect_as(accounts.CLIENT_USER, sock) == "PermissionError"  # iolab relays for its clients
            assert acl.user_perm(dev, user.uid) == 6
            # what a job sent to it can write: its device, not the place it runs in nor root's files
            results = {}
            for name, target in (("device", dev), ("beside", str(parent / "beside.dat")),
                                 ("root", "/root/iolab-serve-test.dat")):
                job = tmp_path / f"{name}.fio"
                job.write_text(f"[w]\nfilename={target}\nrw=write\nbs=4k\nsize=64k\nioengine=psync\n")
                r = subprocess.run(["fio", f"--client=sock:{sock}", "--output-format=json", str(job)],
                                   capture_output=True, text=True, timeout=120)
                results[name] = r.stdout + r.stderr
            assert '"error" : 0' in results["device"] and '"io_bytes" : 65536' in results["device"], results["device"]
            for name in ("beside", "root"):
                assert "Permission denied" in results[name], (name, results[name])
            assert not (parent / "beside.dat").exists() and not Path("/root/iolab-serve-test.dat").exists()
        r = subprocess.run([str(IOLAB), "fleet", "serve", "--revoke", "--device", dev], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0 and acl.user_perm(dev, user.uid) is None, r.stderr


def test_serve_refuses_before_changing_anything(tmp_path: Path) -> None:
    """A device holding data (unless --destroy-data), a system directory, a wildcard address, a socket
    directory others can enter: exit 2, nothing granted, no socket."""
    from iolab.fleet import accounts, acl

    with served_place(tmp_path) as (parent, dev):
        subprocess.run(["mkfs.ext4", "-q", "-F", dev], check=True, capture_output=True, timeout=120)
        sock = parent / "sock" / "fio.sock"
        for args, said in ((["--device", dev], "--destroy-data"), (["--directory", "/etc"], "system directory"),
                           (["--directory", "/var/lib"], "system directory"),
                           (["--directory", str(parent / "missing")], "No such file")):
            r = subprocess.run([str(IOLAB), "fleet", "serve", "--bind", str(sock), *args], capture_output=True,
                               text=True, timeout=60)
            assert r.returncode == 2 and said in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        assert not sock.parent.exists()
        user = accounts.lookup(accounts.SERVER_USER)
        assert user is None or acl.user_perm(dev, user.uid) is None
        open_dir = parent / "open"
        open_dir.mkdir(mode=0o777)
        os.chmod(open_dir, 0o777)
        r = subprocess.run([str(IOLAB), "fleet", "serve", "--bind", str(open_dir / "fio.sock")], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 2 and "lets every user in" in r.stderr, r.stderr
        assert not (open_dir / "fio.sock").exists()


def test_serve_default_is_a_unix_socket_and_wildcards_need_asking() -> None:
    r = subprocess.run([str(IOLAB), "fleet", "serve", "--print"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith("setpriv --reuid=") and r.stdout.strip().endswith(
        "fio --server=sock:/run/iolab-fio/fio.sock"), r.stdout
    for bind in ("0.0.0.0", "0.0.0.0:8765", "[::]:8765", "::"):
        r = subprocess.run([str(IOLAB), "fleet", "serve", "--bind", bind, "--print"], capture_output=True, text=True)
        assert r.returncode == 2 and "--all-interfaces" in r.stderr, (bind, r.stderr)
    r = subprocess.run([str(IOLAB), "fleet", "serve", "--bind", "0.0.0.0", "--all-interfaces", "--print"],
                       capture_output=True, text=True)
    assert r.stdout.strip().endswith("fio --server=ip:0.0.0.0,8765")
    for bad in ("example.com", "192.0.2.4:0", "192.0.2.4:99999", "/tmp/../etc/x", "/tmp/a b", "x" * 5000):
        r = subprocess.run([str(IOLAB), "fleet", "serve", "--bind", bad, "--print"], capture_output=True, text=True)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (bad, r.stderr)


def test_fleet_run_through_a_served_unix_socket_gets_its_logs_back(lab: Lab, tmp_path: Path) -> None:
    """A host served by `iolab fleet serve --directory` on a unix socket: iolab (the operator) reaches it,
    its fio client (another unprivileged user) reaches it through iolab's relay, its logs come back
    (fio names them after the socket), so the aggregate is over the common window and not flagged
    `fleet_window_unmeasured`; the skew of a host on this machine's clock is exactly 0; the file is
    the server user's and is removed after the run."""
    from iolab.fleet import accounts, acl

    with served_place(tmp_path) as (parent, _dev):
        data_dir = parent / "data"
        data_dir.mkdir(mode=0o700)
        sock = parent / "sock" / "fio.sock"
        data = data_dir / "iolab.dat"
        owners: list[int] = []
        with serving("--bind", str(sock), "--directory", str(data_dir)) as proc:
            _wait(sock.exists, proc)
            spec = lab.spec(study_table("sock", repetitions=2, max_repetitions=2)
                            + fio_workload(size="8M", runtime=2)
                            + f'[target]\nkind = "fleet"\n[[target.hosts]]\nname = "local"\naddress = "{sock}"\n'
                              f'filename = "{data}"\n')
            run = lab.popen("run", spec)
            while run.poll() is None:
                if data.exists():
                    owners.append(os.stat(data).st_uid)
                time.sleep(0.2)
            out, err = run.communicate()
            assert run.returncode == 0, out + err
        user = accounts.lookup(accounts.SERVER_USER)
        assert user is not None and owners and set(owners) == {user.uid}
        assert not data.exists()  # iolab made it (prefill), iolab removed it
        acl.revoke(str(data_dir), user.uid)
    trials = lab.report_json()["trials"]
    assert len(trials) == 2
    for t in trials:
        assert t["status"] == "ok", t.get("error")
        m = t["metrics"]
        assert m["host:local:iops"] > 0 and m["fleet_hosts_ok"] == 1 and m["host:local:read_bytes"] > 0
        assert not [f for f in t["flags"] if f.startswith(("fleet_window_unmeasured", "fleet_skew"))], t["flags"]
        assert 0 < m["fleet_window_s"] <= 2.5
        facts = t["manifest"]["workload_facts"]
        assert facts["fleet_clock_skew_ms"] == {"local": 0.0}
        host = t["manifest"]["target"]["hosts"]["local"]
        assert host["clock_skew_ms"] == 0.0 and host["clock_skew_method"] == "same clock as this machine"
    lab.assert_nothing_left()


def test_security_decisions() -> None:
    from iolab.fleet.serve import security_line

    assert security_line([])[0] == "ok" and "no authentication" in security_line([])[1]
    for local in ("ip:127.0.0.1,8765", "sock:/run/fio.sock", "ip6:::1,8765"):
        assert security_line([local])[0] == "ok", local
        state, detail = security_line([local], as_root=[local])
        assert state == "warn" and "root" in detail and local in detail
    for open_ in ("ip:192.0.2.5,8765", "ip:0.0.0.0,8765", "ip6:::,8765", "ip6:2001:db8::5,8765",
                  "ip:fio.example,8765"):
        state, detail = security_line(["sock:/x", open_])
        assert state == "warn" and open_ in detail and "sock:/x" not in detail, open_


def test_doctor_warns_about_a_reachable_server(fleet3: list[Any]) -> None:
    import json

    r = subprocess.run([str(IOLAB), "doctor", "--json"], capture_output=True, text=True, timeout=300)
    (line,) = [c for c in json.loads(r.stdout)["checks"] if c["name"] == "fio-server"]
    assert line["state"] == "warn" and all(h.address in line["detail"] for h in fleet3)
