"""One host failing is that host's failure; what cannot work is refused before any load."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.core.helpers import Lab, make_lab, one_line
from tests.fleet.netns_hosts import NsHost
from tests.fleet.specs import fleet_spec, fleet_target


@pytest.fixture
def lab(tmp_path: Path) -> Any:
    lab = make_lab(tmp_path / "lab")
    try:
        yield lab
    finally:
        lab.force_cleanup()


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        pid = _parent(pid)
    return False


def _device_open(device: str, server: int | None = None) -> bool:
    """Some process holds the device open; with server, only a job that server forked.

    Waiting for the load needs the server: iolab's disk guard opens the device too (signature
    check) before the probes, and acting then would hit the run before load, another test's
    case. fio's server forks each job into a new session, so ancestry, not the process group.
    """
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if server is not None and not _descends_from(int(pid), server):
                continue
            fds = os.listdir(f"/proc/{pid}/fd")
        except (OSError, ValueError, IndexError):
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == device:
                    return True
            except OSError:
                continue
    return False


def test_server_killed_mid_trial_fails_only_that_host(lab: Lab, fleet3: list[NsHost]) -> None:
    victim = fleet3[1]
    proc = lab.popen("run", lab.spec(fleet_spec(fleet3, runtime=3, reps=1)))
    deadline = time.monotonic() + 120
    assert victim.server is not None
    while not _device_open(victim.device, victim.server.pid):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    time.sleep(0.7)
    victim.kill_server()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    (t,) = lab.report_json()["trials"]
    assert t["status"] == "ok"
    m = t["metrics"]
    assert m["fleet_hosts"] == 3 and m["fleet_hosts_ok"] == 2
    assert not any(k.startswith(f"host:{victim.name}:") for k in m)
    assert all(m[f"host:{h.name}:iops"] > 0 for h in fleet3 if h is not victim)
    assert m["iops"] > 0
    flag = next(f for f in t["flags"] if f.startswith("fleet_partial"))
    assert "2 of 3" in flag and victim.name in flag
    failed = t["manifest"]["workload_facts"]["fleet_failed_hosts"]
    assert list(failed) == [victim.name] and victim.address in failed[victim.name]
    lab.assert_nothing_left()


def test_unreachable_host_is_refused_before_load(lab: Lab, fleet3: list[NsHost]) -> None:
    fleet3[2].kill_server()
    r = lab.iolab("run", lab.spec(fleet_spec(fleet3)))
    assert r.returncode == 2, r.stdout + r.stderr
    text = one_line(r.stderr)
    assert "not reachable" in text and f"{fleet3[2].name} ({fleet3[2].address}:{fleet3[2].port}" in text
    assert fleet3[0].name + " (" not in text  # only the unreachable host is named
    assert not lab.trial_rows() and "Traceback" not in r.stderr


def test_a_host_hung_before_the_run_is_refused_at_the_checks_and_named_once(lab: Lab, fleet3: list[NsHost]) -> None:
    """A server that accepts the connection and then never answers (stopped before the run): the
    probe gives up on it within its limit, nothing is created, and the reason names it once."""
    hung = fleet3[1]
    hung.freeze()
    started = time.monotonic()
    r = lab.iolab("run", lab.spec(fleet_spec(fleet3, reps=1)))
    took = time.monotonic() - started
    assert r.returncode == 2, r.stdout + r.stderr
    text = one_line(r.stderr)
    assert "did not answer fio's probe" in text and "hangs or stopped answering" in text, text
    assert text.count(f"{hung.name} ({hung.address}:{hung.port}") == 1, text
    assert f"{fleet3[0].name} (" not in text and f"{fleet3[2].name} (" not in text
    assert not lab.trial_rows() and "Traceback" not in r.stderr
    assert took < 120, took  # the probe's own limit (15 s) and the start, not the run's timeout


def test_device_holding_a_filesystem_is_refused_unless_named(lab: Lab, fleet3: list[NsHost]) -> None:
    subprocess.run(["mkfs.ext4", "-q", "-F", fleet3[0].device], check=True, capture_output=True)
    spec = lab.spec(fleet_spec(fleet3, reps=1))
    r = lab.iolab("run", spec)
    assert r.returncode == 2, r.stdout + r.stderr
    text = one_line(r.stderr)
    assert "ext4" in text and f"--destroy-data {fleet3[0].name}:{fleet3[0].device}" in text
    assert not lab.trial_rows()
    # the plain device name is not enough: the permission names the host
    r = lab.iolab("run", spec, "--destroy-data", f"{fleet3[1].name}:{fleet3[0].device}")
    assert r.returncode == 2
    r = lab.iolab("run", spec, "--destroy-data", f"{fleet3[0].name}:{fleet3[0].device}")
    assert r.returncode == 0, r.stdout + r.stderr


def test_remote_device_needs_explicit_permission(lab: Lab, fleet3: list[NsHost]) -> None:
    spec = lab.spec("[study]\nname = \"f\"\n" + "[workload]\nkind = \"fio\"\nruntime = 1\nramp_time = 0\n"
                    + fleet_target(fleet3[:1], same_machine=False))
    r = lab.iolab("run", spec, "--dry-run")
    assert r.returncode == 2 and "cannot be examined from here" in one_line(r.stderr), r.stderr


@pytest.mark.parametrize("hosts, why", [
    ('[{name = "a b", address = "192.0.2.1", device = "/dev/x"}]', "host name"),
    ('[{name = "a", address = "192.0.2.1;rm", device = "/dev/x"}]', "neither"),
    ('[{name = "a", address = "192.0.2.1", device = "/dev/x", filename = "/f"}]', "exactly one"),
    ('[{name = "a", address = "192.0.2.1", device = "/dev/../etc/passwd"}]', "no '..'"),
    ('[{name = "a", address = "192.0.2.1", port = 70000, device = "/dev/x"}]', "port"),
    ('[{name = "a", address = "192.0.2.1", device = "/dev/x"}, {name = "a", address = "192.0.2.2", '
     'device = "/dev/x"}]', "unique"),
    ('[]', "hosts"),
])
def test_bad_host_lists_are_input_errors(lab: Lab, hosts: str, why: str) -> None:
    spec = lab.spec("[study]\nname = \"f\"\n[workload]\nkind = \"fio\"\n[target]\nkind = \"fleet\"\n"
                    f"hosts = {hosts}\n")
    r = lab.iolab("run", spec, "--dry-run")
    assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_ctrl_c_stops_every_hosts_job(lab: Lab, fleet3: list[NsHost]) -> None:
    import signal

    proc = lab.popen("run", lab.spec(fleet_spec(fleet3, runtime=30, reps=1)))
    deadline = time.monotonic() + 120
    while not all(h.server is not None and _device_open(h.device, h.server.pid) for h in fleet3):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    stopped = time.monotonic() + 10  # fio's servers keep running; their jobs must not
    while any(_device_open(h.device) for h in fleet3) and time.monotonic() < stopped:
        time.sleep(0.1)
    assert not [h.name for h in fleet3 if _device_open(h.device)]
    assert all(h.server is not None and h.server.poll() is None for h in fleet3)
    lab.assert_nothing_left()


def test_mismatched_fio_names_each_hosts_version(fleet3: list[NsHost], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Real servers, real probes; only this machine's version is pretended (one fio is installed
    here, so a second protocol version cannot be started for real)."""
    from iolab.core.errors import RefusedError
    from iolab.fio import engine as fio_engine
    from iolab.fleet import checks
    from iolab.fleet.hosts import FleetHost

    hosts = [FleetHost(name=h.name, address=h.address, port=h.port, device=h.device) for h in fleet3]
    run = checks.runner(tmp_path)
    facts = checks.check(run, hosts)  # the same fio everywhere: accepted
    assert {f.fio for f in facts.values()} == {fio_engine.fio_version()}
    monkeypatch.setattr(fio_engine, "fio_version", lambda: "fio-9.99")
    with pytest.raises(RefusedError) as exc:
        checks.check(run, hosts)
    text = str(exc.value)
    assert "fio versions differ" in text and "this machine (fio --client): fio-9.99" in text
    assert all(f"{h.name} ({h.address}:{h.port}, {h.device}): {facts[h.name].fio}" in text for h in fleet3)


def test_skew_of_hosts_on_another_clock_is_the_best_of_several_probes(fleet3: list[NsHost], tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Hosts declared on another machine (same_machine = false; really on this clock, so the truth is
    0): each is probed skew.PROBES times and its skew is the highest lower bound, a few ms below 0
    and far tighter than one probe's; a probe whose log comes back empty is just one bound fewer; a
    host whose logs never come back has an unknown skew. Hosts on this machine's clock are not
    probed for it at all (exactly 0)."""
    from iolab.fleet import checks, skew
    from iolab.fleet import client as fleet_client
    from iolab.fleet.hosts import FleetHost

    remote = [FleetHost(name=h.name, address=h.address, port=h.port, device=h.device, same_machine=False)
              for h in fleet3]
    real, calls = fleet_client.parse_log, {"n": 0}

    def first_empty(text: str) -> list:
        calls["n"] += 1
        return [] if calls["n"] == 1 else real(text)

    monkeypatch.setattr(fleet_client, "parse_log", first_empty)
    facts = checks.probe(checks.runner(tmp_path), remote)
    for f in facts.values():
        s = f.skew
        print(f.name, s.ms, s.spread_ms, s.bounds)
        assert s.ms is not None and -60 < s.ms <= 5, s  # true skew 0; the estimate is low by the delivery
        assert s.ms == max(s.bounds) and len(s.bounds) >= skew.PROBES - 1
        assert "minimum-delay" in s.method and not s.exact
    assert sum(len(f.skew.bounds) for f in facts.values()) == 3 * skew.PROBES - 1  # one came back empty
    local = [FleetHost(name=h.name, address=h.address, port=h.port, device=h.device, same_machine=True)
             for h in fleet3]
    calls["n"] = -10**9  # would count every log read
    facts = checks.probe(checks.runner(tmp_path), local)
    assert all(f.skew.exact and f.skew.ms == 0.0 for f in facts.values())
    assert calls["n"] == -10**9 + 3  # one version probe per host, no skew probes
    monkeypatch.setattr(fleet_client, "parse_log", lambda text: [])
    lost = checks.probe(checks.runner(tmp_path), remote[:1])[remote[0].name]
    assert lost.skew.ms is None and lost.problem is None and lost.fio  # answered, clock unknown


def _own_metrics(lab: Lab, t: dict[str, Any], host: str) -> dict[str, float]:
    """The host's own metrics recomputed from the fio document stored for it."""
    import json as _json

    from iolab.fio.engine import job_metrics

    (raw,) = lab.query("SELECT raw_json FROM trials WHERE trial_id = ?", t["id"])
    doc = _json.loads(raw[0])["hosts"][host]
    entries = [e for e in doc["client_stats"] if e.get("jobname") != "All clients"]
    assert len(entries) == 1
    return job_metrics(entries[0])


def test_a_hung_host_and_a_babbling_host_fail_alone_in_about_the_trials_time(lab: Lab,
                                                                             fleet3: list[NsHost]) -> None:
    """Three real fio servers: h1 SIGSTOPped (it and every process it forked) mid-trial, h2 behind a
    proxy that slips text imitating fio's JSON and then bytes that are no fio frame into its stream
    mid-trial. h0's result is complete and exactly its own fio's; h1 and h2 fail with their reasons;
    the trial ends about its own time after the load began, not at its timeout plus a grace."""
    healthy, hung, babbler = fleet3
    babbler.babble("garbage", after=1.0)
    runtime = 4.0
    proc = lab.popen("run", lab.spec(fleet_spec(fleet3, runtime=runtime, reps=1)))
    deadline = time.monotonic() + 120
    assert hung.server is not None
    while not _device_open(hung.device, hung.server.pid):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    load_began = time.monotonic()
    time.sleep(1.0)
    hung.freeze()
    out, err = proc.communicate(timeout=300)
    took = time.monotonic() - load_began
    assert proc.returncode == 0, out + err
    (t,) = lab.report_json()["trials"]
    assert t["status"] == "ok", t.get("error")
    m = t["metrics"]
    print(f"load began -> iolab done: {took:.1f} s (job {runtime:.0f} s)", t["flags"])
    # about the trial's own time: the job, a peer lag, a stop grace; the old single client waited for
    # the trial timeout (3 x estimate + 60 s = 78 s here) plus 15 s
    assert took < runtime + 25, took
    assert m["fleet_hosts"] == 3 and m["fleet_hosts_ok"] == 1
    failed = t["manifest"]["workload_facts"]["fleet_failed_hosts"]
    assert set(failed) == {hung.name, babbler.name}, failed
    assert "hangs or stopped answering" in failed[hung.name] and hung.address in failed[hung.name]
    assert "bad crc" in failed[babbler.name] or "disconnected" in failed[babbler.name], failed[babbler.name]
    assert not any(k.startswith((f"host:{hung.name}:", f"host:{babbler.name}:")) for k in m)
    # the healthy host: complete, and exactly what its own fio reported
    own = _own_metrics(lab, t, healthy.name)
    for k, v in own.items():
        assert m[f"host:{healthy.name}:{k}"] == pytest.approx(v), k
    assert own["read_iops"] > 0 and own["runtime_s"] >= runtime * 0.9
    # its logs came back: the aggregate is over its own samples, not a whole-run fallback
    assert not [f for f in t["flags"] if f.startswith("fleet_window_unmeasured")], t["flags"]
    assert m["iops"] == pytest.approx(own["iops"], rel=0.35)
    flag = next(f for f in t["flags"] if f.startswith("fleet_partial"))
    assert "1 of 3" in flag and hung.name in flag and babbler.name in flag
    lab.assert_nothing_left()


def test_stray_text_before_fio_json_fails_no_host(lab: Lab, fleet3: list[NsHost]) -> None:
    """A server whose text imitates fio's JSON (`hello\\n{not json`, a fake header claiming 1e12 IOPS)
    before the real document: every host's result is its real one, read from fio's own header."""
    talker = fleet3[1]
    talker.babble("text", after=0.5)
    r = lab.iolab("run", lab.spec(fleet_spec(fleet3, runtime=2, reps=1)), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    (t,) = lab.report_json()["trials"]
    assert t["status"] == "ok" and t["metrics"]["fleet_hosts_ok"] == 3, t.get("flags")
    for h in fleet3:
        own = _own_metrics(lab, t, h.name)
        assert t["metrics"][f"host:{h.name}:iops"] == pytest.approx(own["iops"]) and own["iops"] < 1e9
    said = t["manifest"]["workload_facts"]["fleet_host_messages"]
    assert "not json" in said[talker.name]
    lab.assert_nothing_left()


def test_a_slow_host_of_a_job_that_ends_by_size_is_not_taken_for_hung(tmp_path: Path) -> None:
    """Peers' results tell when a host hangs only for a time-based job (same length everywhere). A job
    that ends by size (a prefill) takes as long as its host's disk needs: a host 8 s slower than the
    other is waited for, not stopped 5 s after the other's result came back."""
    from iolab.core.net import free_port
    from iolab.fleet import client as fleet_client
    from iolab.fleet.hosts import FleetHost
    from tests.fleet.netns_hosts import _kill_server_tree

    ports = [free_port(), free_port()]
    servers = [subprocess.Popen(["fio", f"--server=ip:127.0.0.1,{p}"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True) for p in ports]
    try:
        for p in ports:
            end = time.monotonic() + 15
            while subprocess.run(["ss", "-Hltn", f"sport = :{p}"], capture_output=True, text=True).stdout == "":
                assert time.monotonic() < end
                time.sleep(0.1)
        hosts = [FleetHost(name=f"h{i}", address="127.0.0.1", port=p, filename=f"/nonexistent/{i}")
                 for i, p in enumerate(ports)]
        jobs = {"h0": "[fast]\nioengine=null\nsize=4m\nbs=4k\n",
                "h1": "[slow]\nioengine=null\nsize=40k\nbs=4k\nrate_iops=1\n"}  # 10 I/Os at 1 per second
        assert fleet_client.expected_seconds(jobs["h1"]) is None
        base = tmp_path / "clients"
        base.mkdir(mode=0o700)
        t0 = time.monotonic()
        run = fleet_client.run_clients(base, None, hosts, jobs, timeout_s=120)
        took = time.monotonic() - t0
    finally:
        for s in servers:
            _kill_server_tree(s.pid)
            s.wait(timeout=10)
    assert run.failed == {}, run.failed
    assert {r.name for r in run.ok} == {"h0", "h1"} and took > 8, took
