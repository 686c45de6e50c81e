"""Probe guest_blocktrace: the rwbs parser on real guest traces, and the probe in real guests.

Fixtures (tests/vm/data/blocktrace-*.txt) are the `trace` file of the built-in guest
(Linux 6.1, QEMU, raw 64M disk, write-back cache) for, in order: busybox
`dd bs=64k count=4 conv=fsync`; fio 4 × 64 KiB buffered writes with fdatasync=1 (3 syncs:
none after the last write); fio 4 × 64 KiB O_DIRECT|O_DSYNC writes.
nvme has queue/fua = 1, virtio-scsi (QEMU scsi-hd, dpofua off) queue/fua = 0.
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest

from iolab.core.exec import ExecRequest
from iolab.core.resources import Ledger
from iolab.probes.guest_blocktrace import GuestBlockTrace, count_rwbs, lost_from_stats, parse_rwbs

DATA = Path(__file__).parent / "data"


def _fixture(name: str) -> str:
    return (DATA / name).read_text()


# ---------------------------------------------------------------- pure parser


@pytest.mark.parametrize("rwbs,expected", [
    ("WS", (False, "W", "S")), ("WFS", (False, "W", "FS")), ("FF", (True, "F", "")), ("F", (False, "F", "")),
    ("FWFS", (True, "W", "FS")), ("FN", (True, "N", "")), ("RA", (False, "R", "A")), ("FS", (False, "F", "S")),
    ("DE", (False, "DE", "")), ("WSM", (False, "W", "SM")),
])
def test_parse_rwbs(rwbs: str, expected: tuple[bool, str, str]) -> None:
    assert parse_rwbs(rwbs) == expected


def test_counts_nvme_fua_writes() -> None:
    c = count_rwbs(_fixture("blocktrace-nvme-6.1.txt"), "259,0")
    # dd: WS+FF; fdatasync: 4 WS + 3 FF; O_DSYNC: 4 × (WFS + FF)
    assert c["by_rwbs"] == {"FF": 8, "WFS": 4, "WS": 5}
    assert (c["writes"], c["fua_writes"], c["flushes"], c["preflush"]) == (9, 4, 8, 8)
    assert c["preflush_writes"] == 0 and c["reads"] == 0 and c["other"] == 0
    assert c["write_bytes"] == 262144 + 8 * 65536
    assert c["requests"] == 17 and c["lost_events"] == 0


def test_counts_virtio_scsi_no_fua() -> None:
    c = count_rwbs(_fixture("blocktrace-virtio-scsi-6.1.txt"), "8,0")
    # no FUA on the disk: each O_DSYNC write is WS + FF (emulated FUA) + FF (blkdev_fsync)
    assert c["by_rwbs"] == {"FF": 12, "WS": 9}
    assert (c["writes"], c["fua_writes"], c["flushes"]) == (9, 0, 12)
    assert c["requests"] == 21 and c["lost_events"] == 0


def test_other_devices_are_ignored_and_lost_events_found() -> None:
    text = _fixture("blocktrace-nvme-6.1.txt")
    assert count_rwbs(text, "8,0")["requests"] == 0
    lossy = text.replace("entries-written: 17/17", "entries-written: 17/20")
    assert count_rwbs(lossy, "259,0")["lost_events"] == 3
    stats = "entries: 17\noverrun: 2\ncommit overrun: 0\nbytes: 1240\ndropped events: 1\nread events: 0\n"
    assert lost_from_stats(stats * 2) == 6


def test_opt_in() -> None:
    assert GuestBlockTrace.default is False and GuestBlockTrace.name == "guest_blocktrace"


# ---------------------------------------------------------------- real guests

N = 8


def _vm(f):
    for m in (pytest.mark.vm, pytest.mark.usefixtures("iolab_data"),
              pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="QEMU not installed"),
              pytest.mark.skipif(os.geteuid() != 0, reason="the scratch loop device needs root")):
        f = m(f)
    return f


@pytest.fixture
def iolab_data(tmp_path: Path):
    old = os.environ.get("IOLAB_DATA")
    os.environ["IOLAB_DATA"] = str(tmp_path / "iolab-data")
    yield
    if old is None:
        os.environ.pop("IOLAB_DATA", None)
    else:
        os.environ["IOLAB_DATA"] = old


@contextmanager
def _guest(bus: str):
    from iolab.targets.qemu_guest import QemuGuestParams, QemuGuestTarget

    target = QemuGuestTarget(QemuGuestParams(format="raw", disk_size="64M", bus=bus), Ledger())
    placement = target.setup()
    try:
        yield placement
    finally:
        target.teardown()


def _traced(pl, job: list[str]) -> dict:
    probe = GuestBlockTrace()
    assert probe.applies_to(pl)
    probe.start(pl)
    res = pl.executor.run(ExecRequest(job, timeout_s=120))
    out = probe.stop()
    assert res.returncode == 0, res.tail()
    assert out["complete"] and out["lost_events"] == 0
    return out


def _fio(pl, offset: str, *opts: str) -> list[str]:
    return ["fio", "--name=t", f"--filename={pl.path}", "--rw=write", "--bs=64k", f"--size={N * 64}k",
            f"--offset={offset}", "--ioengine=psync", "--output-format=terse", *opts]


def _check_fdatasync(pl) -> None:
    c = _traced(pl, _fio(pl, "2M", "--fdatasync=1", "--end_fsync=1"))
    assert (c["writes"], c["fua_writes"], c["flushes"], c["reads"]) == (N, 0, N, 0), c


@_vm
def test_nvme_dsync_writes_are_fua() -> None:
    with _guest("nvme") as pl:
        c = _traced(pl, _fio(pl, "4M", "--direct=1", "--sync=dsync"))
        assert c["queue_fua"] == 1 and c["dev"] == "259,0"
        # each O_DSYNC write: one FUA write, then blkdev_fsync's flush
        assert (c["writes"], c["fua_writes"], c["flushes"]) == (N, N, N), c
        assert c["by_rwbs"] == {"FF": N, "WFS": N}
        _check_fdatasync(pl)


@_vm
def test_virtio_scsi_without_fua_emulates_it_with_flushes() -> None:
    with _guest("virtio-scsi") as pl:
        c = _traced(pl, _fio(pl, "4M", "--direct=1", "--sync=dsync"))
        assert c["queue_fua"] == 0 and c["dev"] == "8,0"
        # no FUA reaches the disk: the block layer adds a post-flush, then blkdev_fsync flushes
        assert (c["writes"], c["fua_writes"], c["flushes"]) == (N, 0, 2 * N), c
        _check_fdatasync(pl)
        # the probe cleans up: a second start/stop in the same guest works
        _check_fdatasync(pl)
