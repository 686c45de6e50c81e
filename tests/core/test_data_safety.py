"""A block device holding data is refused unless the user names it in --destroy-data."""

from __future__ import annotations

import subprocess
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
    assert lab.run_rows() == []
    # also refused in --dry-run: the guard runs before the plan is shown
    r = lab.iolab("run", spec, "--dry-run")
    assert r.returncode == 2 and ext4_loop in one_line(r.stderr)


@needs_root
@needs_fio
def test_destroy_data_must_name_that_device(lab: Lab, ext4_loop: str) -> None:
    spec = _device_spec(lab, ext4_loop)
    r = lab.iolab("run", spec, "--dry-run", "--destroy-data", "/dev/null")
    assert r.returncode == 2, "allowing another device must not allow this one"

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
