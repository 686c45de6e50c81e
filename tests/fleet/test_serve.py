"""`iolab fleet serve`: fio's server where asked and nowhere else, and a fleet run through it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from iolab.core.net import free_port
from tests.core.helpers import IOLAB, Lab, fio_workload, make_lab, study_table


@pytest.fixture
def lab(tmp_path: Path) -> Any:
    lab = make_lab(tmp_path / "lab")
    try:
        yield lab
    finally:
        lab.force_cleanup()


@contextmanager
def serving(*args: str) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([str(IOLAB), "fleet", "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)


def _listeners(pid: int) -> list[str]:
    """Local addresses the process listens on (ss), TCP and unix."""
    out = subprocess.run(["ss", "-Hlpn"], capture_output=True, text=True).stdout
    return [line.split()[4] for line in out.splitlines() if f"pid={pid}," in line]


def _wait(cond: Any, proc: subprocess.Popen[str]) -> None:
    end = time.monotonic() + 15
    while not cond():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end
        time.sleep(0.05)


def test_serve_binds_loopback_only_and_warns() -> None:
    port = free_port()
    with serving("--bind", f"127.0.0.1:{port}") as proc:
        _wait(lambda: _listeners(proc.pid), proc)
        assert _listeners(proc.pid) == [f"127.0.0.1:{port}"]
        os.killpg(proc.pid, signal.SIGKILL)
        _out, err = proc.communicate(timeout=10)
    assert "no authentication" in err and "--trigger-remote" in err


def test_serve_default_is_loopback_and_wildcards_need_asking() -> None:
    r = subprocess.run([str(IOLAB), "fleet", "serve", "--print"], capture_output=True, text=True)
    assert r.stdout.strip() == "fio --server=ip:127.0.0.1,8765"
    for bind in ("0.0.0.0", "0.0.0.0:8765", "[::]:8765", "::"):
        r = subprocess.run([str(IOLAB), "fleet", "serve", "--bind", bind, "--print"], capture_output=True, text=True)
        assert r.returncode == 2 and "--all-interfaces" in r.stderr, (bind, r.stderr)
    r = subprocess.run([str(IOLAB), "fleet", "serve", "--bind", "0.0.0.0", "--all-interfaces", "--print"],
                       capture_output=True, text=True)
    assert r.stdout.strip() == "fio --server=ip:0.0.0.0,8765"
    for bad in ("example.com", "1.2.3.4:0", "1.2.3.4:99999", "/tmp/../etc/x", "/tmp/a b", "x" * 5000):
        r = subprocess.run([str(IOLAB), "fleet", "serve", "--bind", bad, "--print"], capture_output=True, text=True)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (bad, r.stderr)


def test_fleet_run_through_a_unix_socket_server_on_a_file(lab: Lab, tmp_path: Path) -> None:
    sock = tmp_path / "fio.sock"
    data = tmp_path / "data.bin"
    with serving("--bind", str(sock)) as proc:
        _wait(sock.exists, proc)
        spec = lab.spec(study_table("sock", repetitions=1, max_repetitions=1)
                        + fio_workload(size="8M", runtime=1)
                        + f'[target]\nkind = "fleet"\n[[target.hosts]]\nname = "local"\naddress = "{sock}"\n'
                          f'filename = "{data}"\n')
        r = lab.iolab("run", spec, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
    (t,) = lab.report_json()["trials"]
    assert t["status"] == "ok", t.get("error")
    print(t["flags"], t["manifest"]["workload_facts"])
    assert t["metrics"]["host:local:iops"] > 0 and t["metrics"]["fleet_hosts_ok"] == 1
    assert data.stat().st_size == 8 << 20  # prefilled: reads of a sparse file never reach the disk
    lab.assert_nothing_left()


def test_security_decisions() -> None:
    from iolab.fleet.serve import security_line

    assert security_line([])[0] == "ok" and "no authentication" in security_line([])[1]
    for local in ("ip:127.0.0.1,8765", "sock:/run/fio.sock", "ip6:::1,8765"):
        assert security_line([local])[0] == "ok", local
    for open_ in ("ip:10.0.0.5,8765", "ip:0.0.0.0,8765", "ip6:::,8765", "ip:fio.example,8765"):
        state, detail = security_line(["sock:/x", open_])
        assert state == "warn" and open_ in detail and "sock:/x" not in detail, open_


def test_doctor_warns_about_a_reachable_server(fleet3: list[Any]) -> None:
    import json

    r = subprocess.run([str(IOLAB), "doctor", "--json"], capture_output=True, text=True, timeout=300)
    (line,) = [c for c in json.loads(r.stdout)["checks"] if c["name"] == "fio-server"]
    assert line["state"] == "warn" and all(h.address in line["detail"] for h in fleet3)
