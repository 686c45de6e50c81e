"""Bounds on everything a job can ask for: refused when the spec is read, held at run time.

The parser's refusals (fio_bounds) are checked on the exact inputs issue 23 found; the run-time
bounds are done for real: a fork bomb and a memory bomb inside a trial cgroup, a process that
floods its stdout, a job whose runtime would make a timeout that never comes.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.core.helpers import LOOP_TARGET, Lab, needs_root, one_line, study_table

from iolab.cgroups import executor as host_exec  # MAX_OUTPUT as the host executor reads it
from iolab.cgroups.executor import HostExecutor
from iolab.cgroups.trial import Bounds, TrialCgroup
from iolab.core.confine import Confinement
from iolab.core.exec import ExecRequest
from iolab.fio import sandbox as fio_sandbox
from iolab.workloads import fio_bounds

GIB = 1 << 30


def _refused(text: str, available: int = 16 * GIB) -> str:
    with pytest.raises(fio_sandbox.JobFileRefused) as info:
        fio_bounds.check(fio_sandbox.parse(text, "t.fio", env={}), available)
    return str(info.value)


def _accepted(text: str, available: int = 16 * GIB) -> None:
    fio_bounds.check(fio_sandbox.parse(text, "t.fio", env={}), available)


def test_processes_are_bounded_over_the_whole_file() -> None:
    bomb = "".join(f"[s{i}]\nnumjobs=256\nsize=1m\n" for i in range(16))
    msg = _refused(bomb)
    assert "[s2] start 768 processes" in msg and "at most 512 per trial" in msg and msg.startswith("t.fio:8:"), msg
    _accepted("[a]\nnumjobs=256\n[b]\nnumjobs=256\n")
    msg = _refused("[global]\nnumjobs=171\n[a]\n[b]\n[c]\nnumjobs=1\n[d]\n")
    assert msg.startswith("t.fio:2: refused: the jobs up to [d] start 514"), msg


def test_buffers_are_checked_against_available_memory() -> None:
    msg = _refused("[j]\nbs=64m\niodepth=256\n", available=16 * GIB)
    assert "need 16g of I/O buffers" in msg and "has 16g available" in msg, msg
    for text in ("[j]\nbsrange=4k-64m\niodepth=256\n", "[j]\nbssplit=4k/10:64m/90\niodepth=256\n",
                 "[j]\nbs=4k,64m\niodepth=256\n", "[j]\nblocksize=64m\niodepth=128\nnumjobs=2\n"):
        assert "I/O buffers" in _refused(text), text
    _accepted("[j]\nbs=1m\niodepth=32\nnumjobs=4\n")


def test_durations_over_30_days_are_refused() -> None:
    for opt in ("runtime=99999999999999d", "timeout=31d", "ramp_time=744h", "startdelay=2678401"):
        assert "longer than 30 days" in _refused(f"[j]\n{opt}\n"), opt
    _accepted("[j]\nruntime=29d\n")


def test_cmdprio_is_treated_like_prioclass() -> None:
    """cmdprio_class defaults to the highest class, real-time (fio's HOWTO)."""
    for text in ("[j]\nioengine=libaio\ncmdprio_percentage=100\n",
                 "[j]\nioengine=io_uring\ncmdprio_bssplit=4k/100\n",
                 "[j]\nioengine=libaio\ncmdprio_percentage=50\ncmdprio_class=1\n",
                 "[j]\nioengine=libaio\ncmdprio_percentage=50\ncmdprio_class=2,1\n",
                 "[j]\nioengine=libaio\ncmdprio_bssplit=4k/50/1/0:64k/50\ncmdprio_class=3\n"):
        assert "real-time" in _refused(text) or "best-effort (2) and idle (3)" in _refused(text), text
    _accepted("[j]\nioengine=libaio\ncmdprio_percentage=50\ncmdprio_class=3\n")
    _accepted("[j]\nioengine=libaio\ncmdprio_bssplit=4k/50/2/0\ncmdprio_class=2\n")


def test_filename_dash_is_refused_everywhere() -> None:
    for text in ("[j]\nfilename=-\n", "[global]\ndirectory=d\n[j]\nfilename=a:-\n",
                 "[j]\nreadwrite=read\nfilename=-\n"):
        with pytest.raises(fio_sandbox.JobFileRefused, match="standard input or output"):
            fio_sandbox.parse(text, "t.fio", env={})


@needs_root
def test_a_derived_timeout_is_capped_at_30_days(lab: Lab) -> None:
    """Ten stonewalled groups of 29 days each: 3x the estimate would be 870 days."""
    job = lab.root / "long.fio"
    job.write_text("".join(f"[g{i}]\nstonewall\nruntime=29d\ntime_based\n" for i in range(10)))
    r = lab.iolab("run", job, "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "[timeout 2592000 s" in one_line(r.stdout), r.stdout


# -- at run time: the trial cgroup and the executor hold the line -------------------------------------

@pytest.fixture
def small_trial() -> Iterator[TrialCgroup]:
    cg = TrialCgroup.create(None, bounds=Bounds(pids=64, memory=256 << 20))
    try:
        yield cg
    finally:
        cg.close()


@needs_root
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
def test_a_fork_bomb_stops_at_the_trial_pids_bound(tmp_path: Path, small_trial: TrialCgroup) -> None:
    if small_trial.bounds["pids"] is None:
        pytest.skip("no pids controller on this machine: the trial runs unbounded (its manifest says so)")
    ex = HostExecutor(tmp_path, confinement=Confinement()).within(small_trial)
    try:
        running = ex.spawn(ExecRequest(["sh", "-c", "for i in $(seq 300); do sleep 20 & done; wait"],
                                       timeout_s=60))
        deadline = time.monotonic() + 15
        most = 0
        while time.monotonic() < deadline and running.proc.poll() is None:  # type: ignore[attr-defined]
            most = max(most, len(small_trial.pids()))
            time.sleep(0.05)
        assert 0 < most <= 64, most
        small_trial.kill()
        running.wait()
        assert small_trial.peaks().get("pids_peak", 0) <= 64
    finally:
        ex.close()


@needs_root
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
def test_a_memory_bomb_is_killed_inside_its_trial(tmp_path: Path, small_trial: TrialCgroup) -> None:
    if small_trial.bounds["memory"] is None:
        pytest.skip("no memory controller on this machine: the trial runs unbounded (its manifest says so)")
    ex = HostExecutor(tmp_path, confinement=Confinement()).within(small_trial)
    try:
        r = ex.run(ExecRequest(["python3", "-c", "b = bytearray(600 << 20); b[::4096] = b'x' * len(b[::4096]); "
                                                  "print('survived')"], timeout_s=120))
        assert "survived" not in r.stdout and r.returncode != 0, (r.returncode, r.stdout, r.stderr)
        assert small_trial.peaks().get("memory_peak", 0) <= 256 << 20
    finally:
        ex.close()


@needs_root
def test_a_process_flooding_its_output_is_killed_and_read_with_a_cap(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_exec, "MAX_OUTPUT", 1 << 20)
    cg = TrialCgroup.create(None)
    ex = HostExecutor(tmp_path, confinement=Confinement()).within(cg)
    try:
        r = ex.run(ExecRequest(["sh", "-c", "yes iolab; echo done"], timeout_s=60, collect=["big.txt"]))
        assert r.output_exceeded and not r.timed_out and r.wall_s < 30
        assert len(r.stdout) <= 1 << 20
        r = ex.run(ExecRequest(["sh", "-c", "head -c 3000000 /dev/zero > big.txt; ln -s /dev/zero link.txt"],
                               timeout_s=60, collect=["big.txt", "link.txt"]))
        assert len(r.collected["big.txt"]) < (1 << 20) + 100 and "cut at 1 MiB" in r.collected["big.txt"]
        assert "link.txt" not in r.collected, "a link planted at a collected name is not followed"
    finally:
        ex.close()
        cg.close()


@needs_root
def test_dry_run_reads_each_job_text_once(lab: Lab) -> None:
    """A 300 KiB job file under an axis of 20 000 max_runtime values: issue 23 measured ~60 h for 90 000."""
    text = "[global]\nrw=randread\nsize=1m\n" + "".join(f"[j{i}]\n" + ("description=" + "x" * 200 + "\n") * 3
                                                       for i in range(400))
    values = ", ".join(str(i + 1) for i in range(20000))
    import json
    spec = lab.spec(study_table("bigdry") + LOOP_TARGET + '[workload]\nkind = "fio-jobfile"\njob_file = "big.fio"\n'
                    f"job_text = {json.dumps(text)}\nmax_runtime = [{values}]\n")
    t0 = time.monotonic()
    r = lab.iolab("run", spec, "--dry-run", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("max_runtime=") == 20000
    assert time.monotonic() - t0 < 300, "generous for a loaded machine; it was hours"
