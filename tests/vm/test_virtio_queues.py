"""A guest command that times out says which layer holds its I/O (vm/virtio_queues.py).

The classification is checked on the counters of each case; the wiring on a real guest whose
disk QEMU is made to hold: an I/O throttle of 1 request a second (QMP block_set_io_throttle)
keeps fio's requests inside QEMU, the command times out in the guest, and its failure must
name the host side, with QEMU's counters.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from iolab.core.exec import ExecRequest
from iolab.core.resources import Ledger
from iolab.targets.qemu_guest import QemuGuestParams, QemuGuestTarget
from iolab.vm.disk import DISK_ID
from iolab.vm.virtio_queues import describe


def _st(avail: int, taken: int, inuse: int, used: int) -> dict[str, int | bool]:
    return {"shadow-avail-idx": avail, "last-avail-idx": taken, "inuse": inuse, "used-idx": used,
            "signalled-used": used, "signalled-used-valid": True, "vring-avail": 0x1000}


@pytest.mark.parametrize(("st", "guest_avail", "layer"), [
    (_st(20, 20, 8, 12), 20, "QEMU still holds 8 request(s): the host side"),
    (_st(12, 12, 0, 12), 20, "8 posted request(s) QEMU never took: a lost notification"),
    (_st(20, 20, 0, 20), 20, "their completion (the interrupt) was lost"),
    (_st(65535, 65535, 0, 65535), 3, "4 posted request(s) QEMU never took"),  # the 16-bit index wrapped
    (_st(20, 20, 0, 20), None, "guest posted 20 (QEMU's last look)"),  # no HMP: QEMU's own view stands in
])
def test_each_stall_is_put_on_its_layer(st: dict[str, int | bool], guest_avail: int | None, layer: str) -> None:
    assert layer in describe("virtio-blk", 0, st, guest_avail)


def test_a_queue_never_used_says_nothing() -> None:
    assert describe("virtio-blk", 1, _st(0, 0, 0, 0), 0) == ""


@pytest.fixture()
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path / "data"))
    yield tmp_path


@pytest.mark.vm
@pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="QEMU not installed")
@pytest.mark.skipif(os.geteuid() != 0, reason="the scratch loop device needs root")
def test_a_guest_command_that_times_out_names_the_layer_holding_its_io(data: Path) -> None:
    target = QemuGuestTarget(QemuGuestParams(disk_size="64M"), Ledger())
    try:
        pl = target.setup()
        qmp = pl.extras["qmp"]
        backend = f"/machine/peripheral/{DISK_ID}/virtio-backend"  # the device that has the block backend
        throttle = {"bps": 0, "bps_rd": 0, "bps_wr": 0, "iops_rd": 0, "iops_wr": 0}
        qmp.cmd("block_set_io_throttle", id=backend, iops=1, **throttle)
        res = pl.executor.run(ExecRequest(["fio", "--name=held", f"--filename={pl.path}", "--rw=randread",
                                           "--bs=4k", "--size=16M", "--ioengine=libaio", "--iodepth=8",
                                           "--direct=1", "--time_based", "--runtime=60"], timeout_s=4))
        assert res.timed_out, res
        assert "QEMU's view of the disk's queues at the timeout" in res.stderr, res.stderr
        assert "virtio-blk queue 0:" in res.stderr and "QEMU still holds" in res.stderr, res.stderr
        # released, the disk drains; a command that times out on an idle disk is not blamed on the host
        qmp.cmd("block_set_io_throttle", id=backend, iops=0, **throttle)
        wait = (f"while [ \"$(cat /sys/block/{pl.guest_device}/inflight)\" != '       0        0' ]; "
                "do sleep 0.2; done")
        drained = pl.executor.run(ExecRequest(["sh", "-c", wait], timeout_s=60))
        assert drained.returncode == 0, drained.stderr
        idle = pl.executor.run(ExecRequest(["sh", "-c", "sleep 5"], timeout_s=1))
        assert idle.timed_out and "QEMU completed every request the guest posted" in idle.stderr, idle.stderr
    finally:
        target.teardown()
