"""A block device holding data is refused unless the user names it in --destroy-data.

One guard (core.diskguard) for every device-like value: the `device` target, the `cgroups`
target's device and a block device an imported fio job file names. A device is what its
device number says, so a regular file called like a disk, a /sys path or a symlink never
selects a real disk, and a partition of a disk that holds data is refused too.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import time
from collections.abc import Iterator

import pytest
from tests.core.helpers import Lab, fio_workload, needs_fio, needs_root, one_line, study_table


def _blkid_type(dev: str) -> str:
    return subprocess.run(["blkid", "-p", "-o", "value", "-s", "TYPE", dev], capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def ext4_loop(lab: Lab) -> Iterator[str]:
    """A loop device of our own (not iolab's) holding an ext4 filesystem."""
    img = lab.root / "precious.img"  # outside the scratch dir: this is "user data"
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True, capture_output=True)
    dev = subprocess.run(["losetup", "--find", "--show", str(img)], check=True, capture_output=True,
                         text=True).stdout.strip()
    try:
        assert _blkid_type(dev) == "ext4"
        yield dev
    finally:
        subprocess.run(["losetup", "-d", dev], capture_output=True)


def _device_spec(lab: Lab, dev: str):
    return lab.spec(study_table("device-guard") + f'[target]\nkind = "device"\ndevice = "{dev}"\n'
                    + fio_workload(rw="randwrite"))


@needs_root
@needs_fio
def test_device_with_ext4_is_refused_and_left_intact(lab: Lab, ext4_loop: str) -> None:
    spec = _device_spec(lab, ext4_loop)
    r = lab.iolab("run", spec)
    msg = one_line(r.stderr)
    assert r.returncode == 2, r.stderr
    assert ext4_loop in msg and "ext4" in msg, r.stderr
    assert f"--destroy-data {ext4_loop}" in msg, "the message should say how to override"
    assert _blkid_type(ext4_loop) == "ext4", "the filesystem must be intact"
    assert subprocess.run(["fsck.ext4", "-n", ext4_loop], capture_output=True).returncode == 0
    assert lab.run_rows() == [] and not lab.db.exists(), "refused before anything was created, the store too"
    # also refused in --dry-run: the guard runs before the plan is shown
    r = lab.iolab("run", spec, "--dry-run")
    assert r.returncode == 2 and ext4_loop in one_line(r.stderr)


@needs_root
@needs_fio
def test_destroy_data_must_name_that_device(lab: Lab, ext4_loop: str) -> None:
    spec = _device_spec(lab, ext4_loop)
    r = lab.iolab("run", spec, "--dry-run", "--destroy-data", "/dev/null")
    assert r.returncode == 2 and "--destroy-data /dev/null: it is not a block device" in one_line(r.stderr)
    with _blank_loop(lab, "other.img") as other:
        r = lab.iolab("run", spec, "--dry-run", "--destroy-data", other)
        assert r.returncode == 2 and ext4_loop in one_line(r.stderr), "allowing another device must not allow this one"
    link = lab.root / "link-to-it"
    link.symlink_to(ext4_loop)
    r = lab.iolab("run", spec, "--dry-run", "--destroy-data", link)
    assert r.returncode == 0, f"any path to the same device names it:\n{r.stderr}"

    r = lab.iolab("run", spec, "--dry-run", "--destroy-data", ext4_loop)
    assert r.returncode == 0, r.stderr
    assert f"OVERWRITES the block device {ext4_loop}" in r.stdout
    assert _blkid_type(ext4_loop) == "ext4", "a dry run writes nothing"
    assert lab.run_rows() == []


@needs_root
def test_device_that_does_not_exist_is_a_spec_error(lab: Lab) -> None:
    spec = _device_spec(lab, "/dev/iolab-no-such-disk")
    r = lab.iolab("run", spec)
    assert r.returncode == 2
    assert "target.device" in one_line(r.stderr) and "does not exist" in r.stderr


def _mbr_one_partition(start: int, sectors: int) -> bytes:
    """A DOS partition table with one Linux partition (no sfdisk needed)."""
    import struct

    entry = struct.pack("<B3sB3sII", 0x00, b"\xff\xff\xff", 0x83, b"\xff\xff\xff", start, sectors)
    return b"\0" * 446 + entry + b"\0" * 48 + b"\x55\xaa"


def _loop_of(lab: Lab, img) -> str:
    return subprocess.run(["losetup", "--find", "--show", str(img)], check=True, capture_output=True,
                          text=True).stdout.strip()


@needs_root
@needs_fio
def test_device_with_partition_table_is_refused(lab: Lab) -> None:
    img = lab.root / "disk.img"
    with open(img, "wb") as f:
        f.truncate(32 << 20)
        f.write(_mbr_one_partition(2048, (32 << 20) // 512 - 2048))
    dev = _loop_of(lab, img)
    try:
        r = lab.iolab("run", _device_spec(lab, dev), "--dry-run")
        msg = one_line(r.stderr)
        assert r.returncode == 2, r.stderr
        assert dev in msg and "dos partition table" in msg, r.stderr
    finally:
        subprocess.run(["losetup", "-d", dev], capture_output=True)


@needs_root
@needs_fio
def test_mounted_device_is_refused(lab: Lab, ext4_loop: str) -> None:
    mnt = lab.root / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", ext4_loop, str(mnt)], check=True, capture_output=True)
    try:
        r = lab.iolab("run", _device_spec(lab, ext4_loop), "--dry-run")
        msg = one_line(r.stderr)
        assert r.returncode == 2, r.stderr
        assert f"mounted at {mnt}" in msg, r.stderr
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


@needs_root
@needs_fio
def test_the_disk_holding_root_is_refused(lab: Lab) -> None:
    src = subprocess.run(["findmnt", "-n", "-o", "SOURCE", "/"], capture_output=True, text=True).stdout.strip()
    if not src.startswith("/dev/"):
        pytest.skip(f"/ is not on a block device ({src})")
    # read-only workload and --dry-run: even a broken guard could not write to this disk here
    spec = lab.spec(study_table("root-guard") + f'[target]\nkind = "device"\ndevice = "{src}"\n'
                    + fio_workload(rw="randread"))
    r = lab.iolab("run", spec, "--dry-run")
    assert r.returncode == 2, r.stderr
    assert src in one_line(r.stderr) and "mounted at /" in one_line(r.stderr)


class _blank_loop:
    """A loop device of our own over a zero-filled image: no data, the guard lets it through when named
    with --destroy-data."""

    def __init__(self, lab: Lab, name: str, size: int = 32 << 20, partscan: bool = False, table: bytes = b""):
        self.img, self.size, self.partscan, self.table = lab.root / name, size, partscan, table
        self.dev = ""

    def __enter__(self) -> str:
        with open(self.img, "wb") as f:
            f.truncate(self.size)
            f.write(self.table)
        args = ["losetup", "--find", "--show"] + (["--partscan"] if self.partscan else []) + [str(self.img)]
        self.dev = subprocess.run(args, check=True, capture_output=True, text=True).stdout.strip()
        return self.dev

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["losetup", "-d", self.dev], capture_output=True)


def _mbr_two_partitions(sectors: int) -> bytes:
    half = (sectors - 2048) // 2
    entries = b"".join(struct.pack("<B3sB3sII", 0, b"\xff\xff\xff", 0x83, b"\xff\xff\xff", start, half)
                       for start in (2048, 2048 + half))
    return b"\0" * 446 + entries + b"\0" * 32 + b"\x55\xaa"


@pytest.fixture
def disk_with_data_on_p1(lab: Lab) -> Iterator[tuple[str, str]]:
    """(disk, p2): a partitioned loop 'disk' whose first partition holds ext4; p2 is blank."""
    with _blank_loop(lab, "disk.img", 64 << 20, partscan=True, table=_mbr_two_partitions((64 << 20) // 512)) as disk:
        p1, p2 = f"{disk}p1", f"{disk}p2"
        if not os.path.exists(p2):  # some kernels/containers do not scan at attach: ask explicitly
            subprocess.run(["partx", "-a", disk], capture_output=True)
        deadline = time.monotonic() + 10
        while not (os.path.exists(p1) and os.path.exists(p2)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert os.path.exists(p1) and os.path.exists(p2), "partitions did not appear"
        subprocess.run(["mkfs.ext4", "-q", "-F", p1], check=True, capture_output=True)
        yield disk, p2


@needs_root
def test_partition_of_a_disk_holding_data_is_refused(lab: Lab, disk_with_data_on_p1: tuple[str, str]) -> None:
    disk, p2 = disk_with_data_on_p1
    name = os.path.basename(disk)
    assert _blkid_type(p2) == "", "p2 itself is blank: only its disk holds data"
    r = lab.iolab("run", _device_spec(lab, p2), "--dry-run")
    msg = one_line(r.stderr)
    assert r.returncode == 2, r.stderr
    assert f"is a partition of {name}, whose {name}p1 holds a ext4 signature" in msg, msg
    r = lab.iolab("run", _device_spec(lab, disk), "--dry-run")
    assert r.returncode == 2 and f"has partitions: {name}p1, {name}p2" in one_line(r.stderr)
    r = lab.iolab("run", _device_spec(lab, p2), "--dry-run", "--destroy-data", p2)
    assert r.returncode == 0, r.stderr
    assert _blkid_type(f"{disk}p1") == "ext4"


@needs_root
@pytest.mark.parametrize("kind", ["device", "cgroups"])
def test_device_values_that_are_not_block_devices_never_select_a_disk(lab: Lab, kind: str) -> None:
    """A regular file named like a loop device, a /sys path, a /proc path to a non-device: exit 2 at spec time."""
    with _blank_loop(lab, "real.img") as real:
        name = os.path.basename(real)
        fake = lab.root / name  # a regular file called loopN: the old code took the basename and used loopN
        fake.write_text("not a disk\n")
        workload = fio_workload(rw="randwrite") if kind == "device" else '[workload]\nkind = "fio-groups"\n'
        for value, words in ((str(fake), "a regular file"), (f"/sys/class/block/{name}", "a directory"),
                             (f"/sys/dev/block/7:{os.minor(os.stat(real).st_rdev)}", "a directory"),
                             ("/proc/self/root/dev/null", "a character device"), ("/dev/iolab-nope", "does not exist")):
            spec = lab.spec(study_table("guard") + f'[target]\nkind = "{kind}"\ndevice = "{value}"\n' + workload)
            r = lab.iolab("run", spec, "--dry-run")
            msg = one_line(r.stderr)
            assert r.returncode == 2, f"{value}: {r.stderr}"
            assert f"{spec}: target.device:" in msg and words in msg, f"{value}: {msg}"
        assert fake.read_text() == "not a disk\n"
        assert not lab.data.exists() and lab.scratch_entries() == []


@needs_root
def test_cgroups_target_refuses_a_symlink_to_a_disk_with_data(lab: Lab, ext4_loop: str) -> None:
    link = lab.root / "fast-disk"
    link.symlink_to(ext4_loop)
    spec = lab.spec(study_table("guard") + f'[target]\nkind = "cgroups"\ndevice = "{link}"\n'
                    '[workload]\nkind = "fio-groups"\n')
    r = lab.iolab("run", spec, "--dry-run")
    assert r.returncode == 2, r.stderr
    assert ext4_loop in one_line(r.stderr) and "ext4" in r.stderr


@needs_root
@needs_fio
def test_job_file_block_device_passes_the_same_guard(lab: Lab, ext4_loop: str) -> None:
    """filename=/dev/X in an imported job file: refused when X holds data; a blank X too unless the user
    names it with --destroy-data (a job file alone never points iolab at a disk it did not make)."""
    job = lab.root / "dev.fio"
    job.write_text(f"[w]\nfilename={ext4_loop}\nrw=write\nsize=1m\n")
    r = lab.iolab("run", job, "--dry-run")
    msg = one_line(r.stderr)
    assert r.returncode == 2 and f"{job}:2:" in msg and "holds a ext4 signature" in msg, r.stderr
    r = lab.iolab("run", job, "--dry-run", "--destroy-data", ext4_loop)
    assert r.returncode == 0 and f"OVERWRITES the block device {ext4_loop}" in r.stdout, r.stderr
    with _blank_loop(lab, "blank.img") as blank:
        job.write_text(f"[w]\nfilename={blank}\nrw=write\nsize=1m\n")
        r = lab.iolab("run", job, "--dry-run")
        assert r.returncode == 2 and f"pass --destroy-data {blank}" in one_line(r.stderr), r.stderr
        r = lab.iolab("run", job, "--dry-run", "--destroy-data", blank)
        assert r.returncode == 0 and f"OVERWRITES the block device {blank}" in r.stdout, r.stderr
    assert _blkid_type(ext4_loop) == "ext4" and not lab.data.exists()


def test_guard_reads_devices_by_number_not_by_name() -> None:
    """Pure checks of core.diskguard on this machine's own nodes (no root needed)."""
    from iolab.core import diskguard

    for value, words in (("/dev/null", "character device"), ("/", "directory"), ("/etc/hostname", "regular file"),
                         ("", "expected a device path"), ("/dev/\x00sda", "not a usable path"), (None, "expected")):
        with pytest.raises(ValueError, match=words):
            diskguard.block_device(value)
    assert json.dumps(sorted(diskguard._DESTROY_ALLOWED)) == "[]"
