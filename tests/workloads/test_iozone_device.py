"""iozone's tests on a block device (issue 10 point 4): they run on the device itself, the
device node is never removed, and the host's disk counters see the bytes."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from iolab.cgroups.executor import HostExecutor
from iolab.core.errors import TrialFailed
from iolab.core.resources import Ledger
from iolab.probes.diskstats import HostDiskStats
from iolab.targets.base import Placement
from iolab.targets.loop import LoopParams, LoopTarget
from iolab.workloads.iozone import FILE, IozoneParams, IozoneWorkload, _own_file

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="loop devices need root")
MiB = 1 << 20
FILE_SIZE = 16 * MiB


@pytest.fixture
def loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Placement]:
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("IOLAB_SCRATCH", str(tmp_path / "scratch"))
    target = LoopTarget(LoopParams(size="64M"), Ledger())
    target.preflight()
    placement = target.setup()
    try:
        yield placement
    finally:
        target.teardown()
        assert str(tmp_path) not in subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout


def _node(path: str) -> tuple[bool, int]:
    st = os.stat(path)
    return stat.S_ISBLK(st.st_mode), st.st_rdev


def _measured(placement: Placement, test: str) -> tuple[dict, dict, list[str]]:
    probe = HostDiskStats()
    probe.start(placement)
    r = IozoneWorkload(IozoneParams(test=test, record="1M", file_size=FILE_SIZE)).run(placement, timeout_s=120)
    return r.metrics, probe.stop(), r.flags


def test_write_on_a_loop_device_measures_the_device_and_keeps_the_node(loop: Placement) -> None:
    assert loop.is_block_device and loop.path and loop.path.startswith("/dev/loop")
    before = _node(loop.path)
    assert before[0]
    metrics, disk, flags = _measured(loop, "write")
    assert _node(loop.path) == before, "the device node was removed or replaced"
    assert metrics["write_bytes"] == FILE_SIZE and metrics["kbps"] > 0
    assert disk["write_bytes"] >= FILE_SIZE, f"the device saw {disk['write_bytes']} of {FILE_SIZE} bytes"
    assert any(f.startswith(f"iozone_write_on_device: {loop.path} is a block device") for f in flags), flags
    assert not Path("/dev", FILE).exists()

    metrics, disk, flags = _measured(loop, "read")  # one untimed priming pass, then the timed one
    assert _node(loop.path) == before
    assert metrics["read_bytes"] == FILE_SIZE and disk["read_bytes"] >= 2 * FILE_SIZE
    assert not any(f.startswith("iozone_write_on_device") for f in flags)


def test_file_larger_than_the_device_fails_before_any_io(loop: Placement) -> None:
    probe = HostDiskStats()
    probe.start(loop)
    with pytest.raises(TrialFailed, match=r"file_size 128m is larger than the device /dev/loop\d+ \(64m\)"):
        IozoneWorkload(IozoneParams(test="write", record="1M", file_size="128M")).run(loop, timeout_s=60)
    assert probe.stop()["write_bytes"] == 0


def test_write_removes_only_its_own_file(tmp_path: Path) -> None:
    ex = HostExecutor()
    try:
        d = Placement(executor=ex, directory=str(tmp_path))
        assert _own_file(d, f"{tmp_path}/{FILE}") == f"{tmp_path}/{FILE}"
        for other in ("/dev/sda", f"{tmp_path}/other", f"{tmp_path}/../{FILE}"):
            with pytest.raises(TrialFailed, match="refusing to remove"):
                _own_file(d, other)
        with pytest.raises(TrialFailed, match="refusing to remove"):
            _own_file(Placement(executor=ex, path="/dev/loop0", is_block_device=True), "/dev/loop0")
        # a real write test in a directory replaces its file and leaves everything else alone
        (tmp_path / "keep").write_text("x")
        r = IozoneWorkload(IozoneParams(test="write", record="64k", file_size="1M", direct=False)).run(d, 60)
        assert (tmp_path / FILE).stat().st_size == 1 << 20 and (tmp_path / "keep").read_text() == "x"
        assert r.metrics["write_bytes"] == 1 << 20 and not any(f.startswith("iozone_write_on") for f in r.flags)
    finally:
        ex.close()
