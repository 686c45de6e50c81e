"""Fixtures for the cgroup tests: a private ledger, a scratch loop device, a fio runner,
and a guard that fails any test leaving an iolab cgroup or a changed scheduler behind."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.core.fixtures import basic_run, canaries, lab  # noqa: F401  (shared: tests/core/fixtures.py)

from iolab.cgroups import detect
from iolab.cgroups.executor import HostExecutor
from iolab.core.exec import ExecRequest
from iolab.core.resources import Ledger

MiB = 1 << 20
LOOP_SIZE = 256 * MiB


def _real_cgroups_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create cgroups and loop devices"
    if detect.mounts().v1_blkio is None:
        return "no cgroup v1 blkio hierarchy mounted"
    return None


REAL_REASON = _real_cgroups_reason()


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    """A ledger in a private state dir, so tests never see the user's ledgers."""
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path / "data"))
    return Ledger()


@pytest.fixture(scope="module")
def loopdev() -> Iterator[str]:
    """A 256 MiB loop device (direct I/O) over a file filled with data, so reads hit the disk."""
    if REAL_REASON:
        pytest.skip(REAL_REASON)
    img = Path("/var/tmp") / f"iolab-test-cgroups-{os.getpid()}.img"
    subprocess.run(["dd", "if=/dev/urandom", f"of={img}", "bs=1M", f"count={LOOP_SIZE // MiB}",
                    "status=none", "conv=fsync"], check=True)
    dev = subprocess.run(["losetup", "--find", "--show", "--direct-io=on", str(img)],
                         check=True, capture_output=True, text=True).stdout.strip()
    try:
        yield dev
    finally:
        subprocess.run(["losetup", "-d", dev], check=False)
        img.unlink(missing_ok=True)


def iolab_groups() -> list[str]:
    """Every iolab-* cgroup under the mounted roots, except those of another live iolab run
    (iolab-<pid>-... or iolab-o<pid>.<start>-... of a process that is not this one and still
    runs): other people may run a cgroup study on this machine at the same time."""
    m = detect.mounts()
    out = []
    for p in (p for r in (m.v1_blkio, m.v2) if r for p in r.glob("iolab-*")):
        owner = re.match(r"iolab-o?(\d+)[.-]", p.name)
        if owner and int(owner.group(1)) != os.getpid() and Path(f"/proc/{owner.group(1)}").exists():
            continue
        out.append(str(p))
    return out


def scheduler_state(dev: str) -> tuple[str, str]:
    q = Path("/sys/block") / os.path.basename(dev) / "queue"
    ll = q / "iosched" / "low_latency"
    return q.joinpath("scheduler").read_text().strip(), ll.read_text().strip() if ll.exists() else ""


@pytest.fixture
def no_leftovers(loopdev: str) -> Iterator[None]:
    """Fail the test if it leaves an iolab cgroup or a changed scheduler/tunable behind."""
    before = scheduler_state(loopdev)
    assert iolab_groups() == [], "iolab cgroups existed before the test"
    yield
    assert iolab_groups() == [], "iolab cgroups left behind"
    assert scheduler_state(loopdev) == before, "scheduler or tunables not restored"


FioResult = dict[str, float]


def run_fio_groups(device: str, procs: dict[str, str], runtime_s: int = 8, iodepth: int = 32,
                   sample: Callable[[], None] | None = None) -> dict[str, FioResult]:
    """One fio process per group, each joined to its cgroup before exec; returns
    {group: {"iops", "ios", "cpu"}} from fio's JSON.

    All processes wait at a gate (a file appearing) and exec fio together: started one
    after another, the first gets the device alone for a few hundred ms on a busy
    machine and the last alone at the end, which pulls fio's whole-run ratios toward 1.
    """
    ex = HostExecutor()
    gate = ex.workdir / "go"
    try:
        running = {}
        for name, procs_file in procs.items():
            argv = ["sh", "-c", 'while [ ! -e "$0" ]; do sleep 0.005; done; exec "$@"', str(gate),
                    "fio", f"--name={name}", f"--filename={device}", "--rw=randread", "--bs=4k",
                    "--ioengine=libaio", f"--iodepth={iodepth}", "--direct=1", "--time_based",
                    f"--runtime={runtime_s}", "--randrepeat=0", "--output-format=json",
                    f"--output={name}.json"]
            running[name] = ex.spawn(ExecRequest(argv=argv, timeout_s=runtime_s + 30,
                                                 cgroup_procs=[procs_file], collect=[f"{name}.json"]))
        if sample:
            sample()
        gate.touch()
        out = {}
        for name, r in running.items():
            res = r.wait()
            assert res.returncode == 0, res.tail()
            job = json.loads(res.collected[f"{name}.json"])["jobs"][0]
            out[name] = {"iops": job["read"]["iops"], "ios": job["read"]["total_ios"],
                         "cpu": res.cpu_busy}
        return out
    finally:
        ex.close()


@pytest.fixture
def fio_groups() -> Callable[..., dict[str, FioResult]]:
    if shutil.which("fio") is None:
        pytest.skip("fio not installed")
    return run_fio_groups


@pytest.fixture
def leftovers() -> Callable[[], list[str]]:
    return iolab_groups
