"""Probe under_disk and the flag disk_shared, for real: the disk under a loop target is a disk
this test makes (an ext4 filesystem on a loop device of its own, iolab's scratch directory on
it), so nothing but this test's runs and the neighbour it starts writes there. A run alone on
it raises no flag and sees the loop's flushes one to one on the disk under; the same run beside
a neighbour that syncs on that disk flags every trial, naming the disk, and the report says
what the flag means. The rule itself is checked on numbers measured on this machine's disk."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.core.helpers import Lab, make_lab, needs_fio, needs_root

from iolab.analysis import flags as flag_catalogue
from iolab.probes import registry as probe_registry
from iolab.probes.under_disk import under_device
from iolab.runner import confounders

SPEC = """
[study]
name = "under-disk"
repetitions = 3
max_repetitions = 3

[target]
kind = "loop"
size = "64M"
filesystem = "ext4"

[workload]
kind = "fio"
rw = "write"
bs = "4k"
size = "1M"
sync = true
runtime = 0
ramp_time = 0
"""


@dataclass
class Disk:
    device: str  # e.g. "loop7": the disk under iolab's scratch loop devices
    mount: Path


@pytest.fixture
def own_disk(tmp_path: Path) -> Iterator[Disk]:
    """An ext4 filesystem on a loop device of this test's own, mounted; removed after."""
    work = Path("/var/tmp") / f"iolab-test-under-{os.getpid()}"
    work.mkdir()
    image, mount = work / "disk.img", work / "mnt"
    mount.mkdir()
    with open(image, "wb") as f:
        f.truncate(512 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", str(image)],
                   check=True, capture_output=True)
    dev = subprocess.run(["losetup", "--find", "--show", str(image)], check=True, capture_output=True,
                         text=True).stdout.strip()
    try:
        subprocess.run(["mount", dev, str(mount)], check=True)
        yield Disk(os.path.basename(dev), mount)
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)
        subprocess.run(["losetup", "-d", dev], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


def _lab_on(disk: Disk, root: Path) -> Lab:
    lab = make_lab(root)
    shutil.rmtree(lab.scratch, ignore_errors=True)
    lab.scratch = disk.mount / "scratch"
    lab.scratch.mkdir()
    lab.env["IOLAB_SCRATCH"] = str(lab.scratch)
    return lab


def _ok_trials(lab: Lab) -> list[dict]:
    doc = lab.report_json()
    trials = [t for t in doc["trials"] if t["status"] == "ok"]
    assert len(trials) == 3, [t["error"] for t in doc["trials"]]
    return trials


def _shared(t: dict) -> list[str]:
    return [f for f in t["flags"] if f.startswith("disk_shared: ")]


@needs_root
@needs_fio
def test_a_run_alone_on_its_disk_is_not_flagged_and_one_beside_a_syncing_neighbour_is(
        own_disk: Disk, tmp_path: Path) -> None:
    lab = _lab_on(own_disk, tmp_path / "lab")
    spec = lab.spec(SPEC)
    r = lab.iolab("run", spec, timeout=300)
    assert r.returncode == 0, r.stderr
    declared = probe_registry.metric_set("under_disk")
    for t in _ok_trials(lab):
        under, own = t["probes"]["under_disk"], t["probes"]["host_disk"]
        assert under["device"] == own_disk.device, (under, own_disk)
        assert [k for k in under if k != "device" and k not in declared] == [], "undeclared counters"
        assert under["iolab_syncs"] > 0, under  # the trial's work dir and processes are ledgered first
        assert own["flushes"] >= 256, own  # 256 O_SYNC writes of 4 KiB: a flush each
        # each of the loop's flushes costs the disk under one or two (plus the journal's few)
        assert own["flushes"] <= under["flushes"] <= 2 * own["flushes"] + 8 + under["seconds"], (own, under)
        assert _shared(t) == [], t["flags"]
        print(f"alone: loop {own['flushes']} flushes, disk under {under['flushes']} in {under['seconds']} s")

    # a neighbour syncing on the same disk for the whole run
    neighbour = subprocess.Popen(
        ["sh", "-c", f"while :; do dd if=/dev/zero of={own_disk.mount}/neighbour bs=4k count=2000 "
                     "oflag=dsync status=none; done"], start_new_session=True)
    try:
        r = lab.iolab("run", spec, timeout=300)
    finally:
        os.killpg(neighbour.pid, 9)
        neighbour.wait()
    assert r.returncode == 0, r.stderr
    for t in _ok_trials(lab):
        [flag] = _shared(t)
        print(f"beside a neighbour: {flag}")
        assert f"({own_disk.device})" in flag and "flushes" in flag, flag
        under, own = t["probes"]["under_disk"], t["probes"]["host_disk"]
        assert under["flushes"] > 2 * own["flushes"] + confounders.OTHER_FLUSHES_ALLOWED, (own, under)
    md = lab.iolab("report", "latest", "--format", "md")
    assert md.returncode == 0, md.stderr
    text = " ".join(md.stdout.split())
    assert "disk_shared" in text and flag_catalogue.CATALOGUE["disk_shared"][0][:60] in text, text[-3000:]
    lab.assert_nothing_left()


@needs_root
def test_a_device_that_is_no_loop_or_serves_no_file_has_no_disk_under(own_disk: Disk) -> None:
    assert under_device(None) is None
    assert under_device("vda") is None  # no loop device: its own counters are the disk's
    assert under_device("loop999999") is None  # no such device
    backing = Path(f"/sys/class/block/{own_disk.device}/loop/backing_file").read_text().strip()
    assert under_device(own_disk.device) is not None and backing.startswith("/var/tmp/")


# Counters measured on a quiet disk (vda, with FUA: flushes one to one) under an ext4 loop device
# with direct I/O, 2 MiB of O_SYNC writes of 512 B and of 64 KiB (512-byte writes moved 3x their
# bytes on the disk under); the seconds are about what such trials take.
QUIET_512 = ({"write_bytes": 10_957_619, "read_bytes": 0, "flushes": 6294},
             {"write_bytes": 33_229_373, "read_bytes": 0, "flushes": 6294, "seconds": 9.0, "device": "vda"})
QUIET_64K = ({"write_bytes": 2_107_637, "read_bytes": 0, "flushes": 34},
             {"write_bytes": 2_118_123, "read_bytes": 0, "flushes": 34, "seconds": 0.3, "device": "vda"})


def test_the_rule_allows_the_filesystems_amplification_and_journal_but_not_a_neighbour() -> None:
    for own, under in (QUIET_512, QUIET_64K):
        assert confounders.disk_shared(own, under) == []
        assert confounders.detect({}, {}, {"host_disk": own, "under_disk": under}) == []
    own, under = QUIET_64K
    # a journal commit per flush of the loop on a disk without FUA (two flushes each), and a few
    # commits of the filesystem under by itself, are not a neighbour
    journal = {**under, "flushes": 2 * under["flushes"] + confounders.OTHER_FLUSHES_ALLOWED}
    assert confounders.disk_shared(own, journal) == []
    syncs = {**under, "flushes": journal["flushes"] + 1}
    [flag] = confounders.disk_shared(own, syncs)
    assert flag.startswith("disk_shared: the disk under the target (vda) moved ") and \
        f"{34 + confounders.OTHER_FLUSHES_ALLOWED + 1} flushes in 0.3 s" in flag, flag
    # the allowance grows with the trial's length (the journal commits every few seconds)
    long = {**syncs, "seconds": 60.0}
    assert confounders.disk_shared(own, long) == []
    # bytes: beyond the amplification of the trial's own, a bulk writer is a neighbour
    edge = {**under, "write_bytes": confounders.BYTES_AMPLIFICATION * 2_107_637 + confounders.OTHER_BYTES_ALLOWED}
    assert confounders.disk_shared(own, edge) == []
    bulk = {**edge, "write_bytes": edge["write_bytes"] + 1}
    [flag] = confounders.disk_shared(own, bulk)
    assert "moved 38.0 MiB and 0 flushes" in flag and "besides the trial's own 2.0 MiB and 34 flushes" in flag, flag
    # iolab's own ledger fsyncs meanwhile (its data dir on the same disk): a quiet write-modes trial
    # here, 2 flushes of its own and 16 of the ledger's, once flagged every trial of the demo
    ledger = ({"write_bytes": 5 << 20, "read_bytes": 0, "flushes": 2},
              {"write_bytes": (5 << 20) + 200_000, "read_bytes": 0, "flushes": 18, "seconds": 0.1, "iolab_syncs": 16,
               "device": "vda"})
    assert confounders.disk_shared(*ledger) == []
    assert confounders.disk_shared(ledger[0], {**ledger[1], "iolab_syncs": 0}) != []
    # no disk under measured (an old run, a hostdir target): nothing said
    assert confounders.detect({}, {}, {"host_disk": own}) == []
