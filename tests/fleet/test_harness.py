"""The namespace fleet itself: real servers answer on their own address only, and nothing is left."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.fleet.netns_hosts import links, namespaces, ns_fleet, port_open


def _probe(address: str, port: int, job: Path) -> str:
    job.write_text("[p]\nioengine=null\nsize=4k\n")
    r = subprocess.run(["fio", f"--client=ip:{address},{port}", "--output-format=normal", str(job)],
                       capture_output=True, text=True, timeout=60)
    return r.stdout + r.stderr


def test_three_servers_answer_and_everything_is_removed(tmp_path: Path) -> None:
    with ns_fleet(tmp_path / "f", 3) as hosts:
        made_ns = [h.netns for h in hosts]
        made_links = [h.veth for h in hosts]
        devices = [h.device for h in hosts]
        assert len({h.address for h in hosts}) == 3 and len(set(devices)) == 3
        assert all(ns in namespaces() for ns in made_ns)
        for h in hosts:
            assert port_open(h.address, h.port), h
            assert "fio=fio-" in _probe(h.address, h.port, tmp_path / "probe.fio")
            # bound to the namespace address only: nothing listens on the host side's loopback
            assert not port_open("127.0.0.1", h.port) or h.port == 0
    assert not set(made_ns) & set(namespaces())
    assert not set(made_links) & set(links())
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert not any(f"{d}:" in loops for d in devices if str(tmp_path) in loops)
    assert str(tmp_path) not in loops
    assert all(h.server is not None and h.server.poll() is not None for h in hosts)
    assert not list((tmp_path / "f" / "ledger").glob("*.json"))


def test_failure_inside_still_removes_everything(tmp_path: Path) -> None:
    made: list[str] = []
    try:
        with ns_fleet(tmp_path / "f", 3) as hosts:
            made = [h.netns for h in hosts]
            raise KeyError("boom")
    except KeyError:
        pass
    assert made and not set(made) & set(namespaces())
    assert str(tmp_path) not in subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout


KILLED = """
import os, sys
from pathlib import Path
from tests.fleet.netns_hosts import ns_fleet
with ns_fleet(Path(sys.argv[1]), n=2, start_servers=False) as hosts:
    print(" ".join(h.device for h in hosts), flush=True)
    os._exit(0)  # as a worker killed mid-test: no finally runs
"""


def test_what_a_killed_test_process_left_is_swept_by_the_next_fleet(tmp_path: Path) -> None:
    """A pytest worker killed mid-test (a CI timeout, a Ctrl-C of the suite) left its hosts' loop
    devices attached: their images were untagged, so neither the harness nor `iolab clean --all`
    knew whose they were. Made for real: a process makes two hosts and dies; the next fleet's
    sweep removes its namespaces and detaches its loop devices."""
    import os
    import sys

    from iolab.core.cleaners import attached_loops
    from tests.fleet.netns_hosts import sweep_dead

    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-c", KILLED, str(tmp_path / "f")], capture_output=True, text=True,
                       timeout=120, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    devices = r.stdout.split()
    assert r.returncode == 0 and len(devices) == 2, r.stderr
    assert set(devices) <= {d for d, _ in attached_loops()}
    gone = sweep_dead()
    assert not set(devices) & {d for d, backing in attached_loops() if str(tmp_path) in backing}, gone
    assert sum("-fleet-" in g and "/dev/" not in g for g in gone) == 2, gone
