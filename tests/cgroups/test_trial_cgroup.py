"""Issue 12 point 5: every process a trial starts on the host lives in the trial's cgroup,
its CPU time is read there, and its processes are ended through it. Real cgroups, real
processes, both flavours where the machine has them (v1: cpuacct + freezer; v2: cgroup2).

What is checked against what: membership against the processes that carry a marker in
their environment (inherited by every descendant, read from /proc, not through iolab);
CPU time against the kernel's rusage of the same processes; death against /proc (pid and
start time); removal against the cgroup file system.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from tests.core import leaving_workload, owned
from tests.core.helpers import Lab, fio_workload, needs_fio, needs_root, study_table

from iolab.cgroups import detect, processes, trial
from iolab.cgroups.executor import HostExecutor
from iolab.cgroups.trial import SpawnCgroup, TrialCgroup
from iolab.core import owner, registry, resources
from iolab.core.exec import ExecRequest
from iolab.runner.runner import Runner
from iolab.spec.study import from_dict
from iolab.store.registry import open_store

# kills iolab or runs `iolab clean`, which takes what any dead owner left: never beside another such test
pytestmark = [needs_root, pytest.mark.dead_owners]

REASONS = trial.reasons(detect.mounts())


@pytest.fixture(params=["v1", "v2"])
def flavour(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each flavour this machine has; the other is skipped with the reason."""
    f = str(request.param)
    if REASONS[f] is not None:
        pytest.skip(f"trial cgroups {f}: {REASONS[f]}")
    monkeypatch.setenv(trial.FLAVOUR_ENV, f)
    return f


@pytest.fixture
def cgroup(flavour: str) -> Iterator[TrialCgroup]:
    cg = TrialCgroup.create(None)
    try:
        yield cg
    finally:
        cg.close()
    assert not any(d.exists() for d in cg.dirs)


@pytest.fixture
def executor(tmp_path: Path, cgroup: TrialCgroup) -> Iterator[HostExecutor]:
    ex = HostExecutor(tmp_path)
    try:
        yield ex.within(cgroup)
    finally:
        ex.close()


def _marked(mark: str) -> set[int]:
    """Live processes whose environment carries TEST_MARK=<mark> (every descendant inherits it)."""
    needle = f"TEST_MARK={mark}".encode()
    out = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if needle in (d / "environ").read_bytes().split(b"\0") and (d / "stat").read_text().rsplit(
                    ")", 1)[1].split()[0] != "Z":
                out.add(int(d.name))
        except OSError:
            continue
    return out


def _cgroup_paths(pid: int) -> list[str]:
    """The process's cgroup path in the hierarchies trial cgroups use, from /proc/<pid>/cgroup."""
    lay = trial.layout()
    lines = [line.split(":", 2) for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()]
    if lay.flavour == "v2":
        return [path for hid, _ctl, path in lines if hid == "0"]
    return [path for _hid, ctl, path in lines if {"cpuacct", "freezer"} & set(ctl.split(","))]


def _alive(pid: int, start: int | None) -> bool:
    return start is not None and owner.is_alive(pid, start)


def _wait_for(cond, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


# ---------------------------------------------------------------- membership

@needs_fio
def test_every_process_of_a_trial_is_in_its_cgroup_fio_job_processes_too(
        executor: HostExecutor, cgroup: TrialCgroup, tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    job = (f"[global]\nfilename={tmp_path}/data\nsize=4M\nrw=randread\nioengine=psync\ntime_based\nruntime=4\n"
           "rate_iops=50\n[j]\nnumjobs=3\n")
    running = executor.spawn(ExecRequest(["fio", "j.fio"], timeout_s=60, files={"j.fio": job},
                                         env={"TEST_MARK": mark}))
    try:
        _wait_for(lambda: len(_marked(mark)) >= 4, 30, "fio and its 3 job processes")
        marked = _marked(mark)
        comms = sorted(Path(f"/proc/{p}/comm").read_text().strip() for p in marked)
        assert comms.count("fio") >= 4, comms
        members = set(cgroup.pids())
        assert marked <= members, f"not in the trial cgroup: {marked - members}"
        assert members <= marked, f"in the trial cgroup but not the trial's: {members - marked}"
        for pid in marked:  # in the trial's own leaf, in every hierarchy the flavour uses
            paths = _cgroup_paths(pid)
            assert paths and all(p.startswith(f"/{cgroup.name}/s-") for p in paths), (pid, paths)
        res = running.wait()
        assert res.returncode == 0, res.tail()
        assert res.cpu_user_s + res.cpu_sys_s > 0
    finally:
        running.kill()
        running.wait()
    assert _marked(mark) == set()
    assert cgroup.pids() == []
    assert [d.name for d in cgroup.cpu_dir.iterdir() if d.is_dir()] == [], "the process's leaf stayed"


# ---------------------------------------------------------------- CPU time

# user-space arithmetic, with a clock read (a system call) only every 200000 iterations
BUSY = ("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.8:\n"
        "    for _ in range(200000):\n        pass\n")
WRAPPER = f"""
import resource, subprocess, sys, time
subprocess.run([sys.executable, "-c", {BUSY!r}], check=True)
time.sleep(0.6)
c, s = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
print(c.ru_utime + s.ru_utime, c.ru_stime + s.ru_stime)
"""


def test_cpu_seconds_come_from_the_cgroup_and_agree_with_rusage(executor: HostExecutor,
                                                                  cgroup: TrialCgroup) -> None:
    """A CPU-bound child (0.8 s of CPU) under a wrapper that sleeps 0.6 s and reports the rusage of
    itself and its child: the cgroup's CPU time is that, not the wall time, and user time dominates."""
    res = executor.run(ExecRequest([sys.executable, "-c", WRAPPER], timeout_s=60))
    assert res.returncode == 0, res.tail()
    ru_user, ru_sys = (float(x) for x in res.stdout.split())
    ru = ru_user + ru_sys
    cg = res.cpu_user_s + res.cpu_sys_s
    print(f"\ncgroup {cg:.3f} s (user {res.cpu_user_s:.3f}), rusage {ru:.3f} s (user {ru_user:.3f}), "
          f"wall {res.wall_s:.3f} s")
    assert ru >= 0.8
    assert abs(cg - ru) <= 0.05 * ru + 0.05, (cg, ru)
    assert res.wall_s - cg >= 0.5, "the sleep was counted as CPU time"
    assert res.cpu_user_s > 3 * res.cpu_sys_s, (res.cpu_user_s, res.cpu_sys_s)
    assert abs(res.cpu_user_s - ru_user) <= 0.1 * ru + 0.05, (res.cpu_user_s, ru_user)  # the same split
    # the trial's total holds this process (its leaf is gone by now) and nothing else
    assert abs(cgroup.cpu_seconds() - cg) <= 0.01, (cgroup.cpu_seconds(), cg)
    second = executor.run(ExecRequest([sys.executable, "-c", BUSY], timeout_s=60))
    total = cg + second.cpu_user_s + second.cpu_sys_s
    assert abs(cgroup.cpu_seconds() - total) <= 0.01, (cgroup.cpu_seconds(), total)


# ---------------------------------------------------------------- ending processes

def test_a_process_left_behind_by_its_leader_is_killed_through_the_cgroup(executor: HostExecutor,
                                                                           cgroup: TrialCgroup) -> None:
    """The leader exits at once; the sleeper it forked left its session and was reparented.
    The executor ends it (it is the tree of that process) and removes the process's leaf."""
    mark = uuid.uuid4().hex
    res = executor.run(ExecRequest(["sh", "-c", "(setsid sleep 600 >/dev/null 2>&1 & echo $!)"], timeout_s=30,
                                   env={"TEST_MARK": mark}))
    assert res.returncode == 0 and res.stdout.strip().isdigit(), res.stdout
    assert _marked(mark) == set(), f"the sleeper {res.stdout.strip()} outlived its leader"
    assert cgroup.pids() == []
    assert [d for d in cgroup.kill_dir.iterdir() if d.is_dir()] == []


def test_a_timeout_ends_the_whole_tree_and_only_that_tree(executor: HostExecutor, cgroup: TrialCgroup) -> None:
    mark_other = uuid.uuid4().hex
    other = executor.spawn(ExecRequest(["sleep", "600"], timeout_s=600, env={"TEST_MARK": mark_other}))
    try:
        mark = uuid.uuid4().hex
        t0 = time.monotonic()
        res = executor.run(ExecRequest(["sh", "-c", "sleep 600 & setsid sleep 600 & wait"], timeout_s=0.5,
                                       env={"TEST_MARK": mark}))
        assert res.timed_out and time.monotonic() - t0 < 15
        assert _marked(mark) == set(), "a process of the timed-out tree survived"
        assert len(_marked(mark_other)) == 1, "another process of the same trial was killed with it"
    finally:
        other.kill()
        other.wait()
    assert cgroup.pids() == []


@pytest.fixture
def runner_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flavour: str) -> Path:
    monkeypatch.setitem(registry.WORKLOADS, leaving_workload.KIND, leaving_workload.REF)
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("IOLAB_SCRATCH", str(tmp_path / "scratch"))
    return tmp_path


def test_a_trial_that_leaves_a_process_behind_has_it_killed_and_its_cgroup_removed(runner_env: Path) -> None:
    spec = from_dict({"study": {"name": "leaving", "repetitions": 2, "max_repetitions": 2},
                      "target": {"kind": "host"}, "workloads": [{"name": "a", "kind": "leaving"}]}, "test.toml")
    store = open_store(runner_env / "data" / "results.sqlite")
    try:
        runner = Runner(spec, store, Console(file=open("/dev/null", "w")))
        runner.instantiate()
        runner.start()
        assert runner.run() == "complete"
        trials = store.trials(runner.run_id)
        assert len(trials) == 2 and all(t.status == "ok" for t in trials)
        for t in trials:
            raw = store.raw(runner.run_id, t.trial_id)
            assert not _alive(raw["pid"], raw["start"]), f"trial {t.trial_id} left its sleeper {raw['pid']} running"
            cg = t.manifest["trial_cgroup"]
            assert cg["flavour"] == trial.layout().flavour and cg["cpu_s"] >= 0
            lay = trial.layout()
            assert not any((root / cg["name"]).exists() for root in lay.roots), f"{cg['name']} was not removed"
    finally:
        store.close()
    assert list((runner_env / "data" / "ledger").glob("*.json")) == []


# ---------------------------------------------------------------- clean after kill -9

def _untagged_sleeper(cgroup_procs: list[str]) -> subprocess.Popen[bytes]:
    """A process without IOLAB_OWNER (so the owner cleaner cannot find it by its tag): only its
    cgroup says whose it is."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOLAB_")}

    def join() -> None:
        for f in cgroup_procs:
            with open(f, "w") as fh:
                fh.write(str(os.getpid()))

    return subprocess.Popen(["sleep", "600"], env=env, preexec_fn=join, start_new_session=True)


def _dead_owner_ledger(data: Path, items: list[dict]) -> None:
    p = subprocess.Popen(["sleep", "0"])
    start = owner.start_time(p.pid)
    p.wait()
    d = data / "ledger"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{owner.Owner(p.pid, start).token}.json").write_text(json.dumps(items))  # type: ignore[arg-type]


@pytest.mark.parametrize("state", ["live", "pending"])
def test_clean_ends_a_dead_owners_trial_cgroup_through_the_cgroup(
        flavour: str, state: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path / "data"))
    cg = TrialCgroup.create(None)
    leaf = cg.spawn_group("abc")
    leaf.make()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(_untagged_sleeper(leaf.procs_files()))  # in a process's leaf
        procs.append(_untagged_sleeper([str(d / "cgroup.procs") for d in cg.dirs]))  # in the trial cgroup itself
        _wait_for(lambda: len(cg.pids()) == 2, 10, "two sleepers in the trial cgroup")
        _dead_owner_ledger(tmp_path / "data", [
            {"kind": "pgroup", "ident": "", "info": {"spawn": "abc", **leaf.ledger_info()}, "rid": "p", "state": state},
            {"kind": "cgroup", "ident": str(cg.kill_dir), "info": {"action": "kill", "dirs": [str(d) for d in cg.dirs]},
             "rid": "c", "state": state},
        ])
        cleaned, errors = resources.clean_orphans()
        assert errors == []
        for p in procs:
            assert p.wait(timeout=10) == -signal.SIGKILL
        assert not any(d.exists() for d in cg.dirs), "the trial cgroup is still there"
        assert f"cgroup {cg.kill_dir}" in cleaned, cleaned
        assert list((tmp_path / "data" / "ledger").glob("*.json")) == []
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        cg.close()


@needs_fio
def test_sigkill_of_iolab_mid_trial_then_clean_removes_the_trial_cgroup_and_its_processes(
        flavour: str, lab: Lab) -> None:
    lab.env[trial.FLAVOUR_ENV] = flavour
    spec = lab.spec(study_table("kill-trial-cgroup", repetitions=3, max_repetitions=3)
                    + '[target]\nkind = "host"\n' + fio_workload(runtime=30, size="4M"))
    proc = lab.popen("run", spec)
    token = owned.token_of(proc.pid)
    lay = trial.layout()
    try:
        def fio_in_trial() -> bool:
            return any("-trial-" in g and processes.pids(lay.kill_root / Path(g).name) for g in owned.cgroups(token))
        lab.wait_until(fio_in_trial, 60, "fio in a trial cgroup", proc)
        groups = [g for g in owned.cgroups(token) if "-trial-" in g]
        inside = {p: owner.start_time(p) for g in groups for p in processes.pids(lay.kill_root / Path(g).name)}
        proc.kill()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert any(_alive(p, s) for p, s in inside.items()), "fio died with iolab: nothing for clean to do"
    r = lab.iolab("clean")
    assert r.returncode == 0, r.stderr
    print(r.stdout)
    for g in groups:  # each through its ledger entry, by name
        assert f"cgroup {lay.kill_root / Path(g).name}" in r.stdout, r.stdout
    assert not [p for p, s in inside.items() if _alive(p, s)], "a trial process survived `iolab clean`"
    assert owned.nothing(token, lab.scratch) == {}
    lab.assert_nothing_left()


# ---------------------------------------------------------------- v2: groups inside the trial

def test_v2_a_group_inside_the_trial_takes_the_process_and_one_outside_is_refused(
        flavour: str, executor: HostExecutor, cgroup: TrialCgroup) -> None:
    if flavour != "v2":
        pytest.skip("one hierarchy only on v2: on v1 the weighted groups are in blkio, never in a trial's")
    root = trial.layout().kill_root
    assert cgroup.groups_parent(root) == root / cgroup.name
    blkio = detect.mounts().v1_blkio
    if blkio is not None:
        assert cgroup.groups_parent(blkio) is None
    inside = root / cgroup.name / "t00001-g000"  # as Backend.create_group makes a weighted group there
    inside.mkdir()
    outside = root / owner.tag("test", uuid.uuid4().hex[:6])
    outside.mkdir()
    try:
        running = executor.spawn(ExecRequest(["sleep", "600"], timeout_s=600,
                                             cgroup_procs=[str(inside / "cgroup.procs")]))
        pid = running.proc.pid  # type: ignore[attr-defined]
        _wait_for(lambda: processes.pids(inside) == [pid], 10, "the process in the group inside the trial")
        assert pid in cgroup.pids()
        running.kill()
        assert running.wait().returncode == -signal.SIGKILL
        with pytest.raises(ValueError, match="outside the trial cgroup"):
            executor.spawn(ExecRequest(["sleep", "600"], timeout_s=600, cgroup_procs=[str(outside / "cgroup.procs")]))
        assert processes.pids(outside) == [] and cgroup.pids() == []
    finally:
        processes.destroy([outside])


def test_a_group_of_the_trials_hierarchy_outside_it_is_refused_however_it_is_spelled(cgroup: TrialCgroup) -> None:
    """Nothing is created by place(): the check is on the names, after normalising them."""
    lay = trial.layout()
    leaf = cgroup.spawn_group("x")
    for f in (lay.kill_root / "elsewhere" / "cgroup.procs",
              lay.kill_root / cgroup.name / ".." / "elsewhere" / "cgroup.procs",
              lay.cpu_root / cgroup.name / "s-x" / ".." / ".." / "elsewhere" / "cgroup.procs"):
        with pytest.raises(ValueError, match="outside the trial cgroup"):
            leaf.place([str(f)])
    inside = lay.kill_root / cgroup.name / "g" / "cgroup.procs"
    leaf.place([str(inside)])
    assert leaf.kill_dir == inside.parent, "a group inside the trial takes the process: it is ended there"
    blkio = detect.mounts().v1_blkio  # a hierarchy trials do not use (v1 and hybrid: the weighted groups)
    if blkio is not None:
        other_hierarchy = blkio / "iolab-x" / "g" / "cgroup.procs"
        leaf = cgroup.spawn_group("y")
        leaf.place([str(other_hierarchy)])
        assert leaf.kill_dir == lay.kill_root / cgroup.name / "s-y"
        assert leaf.procs_files()[-1] == str(other_hierarchy)
    assert not (lay.kill_root / cgroup.name / "s-x").exists(), "place() created something"


def test_standalone_processes_get_a_tagged_leaf_at_the_root_that_goes_with_them(flavour: str, tmp_path: Path) -> None:
    ex = HostExecutor(tmp_path)
    try:
        running = ex.spawn(ExecRequest(["sleep", "600"], timeout_s=600))
        leaf: SpawnCgroup = running.leaf  # type: ignore[attr-defined]
        assert all(d.parent in trial.layout().roots and d.name.startswith(f"iolab-{owner.me().token}-spawn-")
                   for d in leaf.dirs), leaf.dirs
        assert leaf.populated()
        running.kill()
        running.wait()
        assert not any(d.exists() for d in leaf.dirs)
    finally:
        ex.close()


def test_an_unknown_flavour_is_an_input_error_before_any_trial_or_ledger(lab: Lab) -> None:
    lab.env[trial.FLAVOUR_ENV] = "v3"
    spec = lab.spec(study_table("bad-flavour") + '[target]\nkind = "host"\n' + fio_workload())
    r = lab.iolab("run", spec)
    assert r.returncode == 2, r.stderr
    assert trial.FLAVOUR_ENV in r.stderr and "Traceback" not in r.stderr
    assert lab.ledger_entries() == [] and lab.run_rows() == []
