"""The `fsimage` target: a filesystem image the user already has, mounted through a loop device.

The image stands for a user's data: every test fingerprints its files (read with debugfs, never
through iolab) before and after, and checks the filesystem with `e2fsck -n -f`. Real runs on
real loop devices: a study in the image; what is not an image, or an image in use, refused by
key before anything exists; a second run at the same time refused; a file swapped in after the
check never attached; kill -9 at the worst instants, then `iolab clean` (and, with the ledger
gone, `iolab clean --all`) leaves the image exactly as it was and nothing on the machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.core.helpers import IOLAB, Lab, all_loops, drive, fio_workload, needs_fio, needs_root, one_line, study_table

from iolab.core.errors import RefusedError
from iolab.core.resources import Ledger
from iolab.targets.fsimage import FsImageParams, FsImageTarget, open_locked

# kills iolab or runs `iolab clean`, which takes what any dead owner left: never beside another such test
pytestmark = [needs_root, needs_fio, pytest.mark.dead_owners,
              pytest.mark.skipif(shutil.which("debugfs") is None, reason="needs e2fsprogs (debugfs, e2fsck)")]

USER_FILES = {"canary": b"precious user data\n", "notes/todo.txt": b"keep me\n" * 500,
              "notes/big.bin": os.urandom(3 << 20)}


def make_image(path: Path, size: str = "96M") -> None:
    """An ext4 image holding the user's files (written with mkfs -d: no mount needed)."""
    tree = Path(tempfile.mkdtemp(prefix="iolab-test-fsimage-tree-", dir="/var/tmp"))
    try:
        for rel, data in USER_FILES.items():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            (tree / rel).write_bytes(data)
        os.symlink("/etc/passwd", tree / "link-out")
        subprocess.run(["mkfs.ext4", "-q", "-F", "-d", str(tree), str(path), size], check=True, capture_output=True)
    finally:
        shutil.rmtree(tree)


def fingerprint(image: Path) -> dict[str, str]:
    """The root's names and every user file's hash, read by debugfs from the image itself."""
    names = subprocess.run(["debugfs", "-R", "ls -p /", str(image)], capture_output=True, text=True,
                           check=True).stdout
    out = {"/": " ".join(sorted(f.split("/")[5] for f in names.splitlines() if f.count("/") >= 6
                                and f.split("/")[5] not in (".", "..")))}
    for rel in USER_FILES:
        data = subprocess.run(["debugfs", "-R", f"cat /{rel}", str(image)], capture_output=True, check=True).stdout
        out[rel] = hashlib.sha256(data).hexdigest()
    return out


def fsck_clean(image: Path) -> bool:
    return subprocess.run(["e2fsck", "-n", "-f", str(image)], capture_output=True).returncode == 0


def loops_of(image: Path) -> list[str]:
    return [dev for dev, back in all_loops() if back == str(image)]


@pytest.fixture
def image(lab: Lab) -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="iolab-test-fsimage-", dir="/var/tmp"))  # a real disk: direct I/O
    img = d / "user.ext4"
    make_image(img)
    try:
        yield img
    finally:
        lab.force_cleanup()  # mounts in the scratch dir first
        for dev in loops_of(img):
            subprocess.run(["losetup", "-d", dev], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)


def _spec(image: Path | str, workload: str = "", **study: object) -> str:
    return (study_table("fsimage", **study) + f'[target]\nkind = "fsimage"\nimage = "{image}"\n'
            + (workload or fio_workload(rw="randwrite", size="8M", runtime=1)))


def _left(lab: Lab, image: Path) -> list[str]:
    """What iolab left: a loop device on the image, a mount, scratch files, ledger entries."""
    return [*loops_of(image), *lab.mounts(), *lab.scratch_entries(), *lab.ledger_entries()]


# -------------------------------------------------------------------------------- a study in it

def test_a_study_runs_in_the_image_and_leaves_the_users_files_as_they_were(lab: Lab, image: Path) -> None:
    before = fingerprint(image)
    spec = lab.spec(_spec(image, repetitions=2, max_repetitions=2))
    dry = lab.iolab("run", spec, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    text = one_line(dry.stdout + dry.stderr)
    assert f"mounts the ext4 image {image}" in text and "offers a directory on ext4" in text, text
    assert _left(lab, image) == [] and not lab.db.exists()  # --dry-run made nothing

    r = lab.iolab("run", spec, timeout=300)
    assert r.returncode == 0, r.stderr
    trials = lab.report_json()["trials"]
    assert [t["status"] for t in trials] == ["ok", "ok"], [t["error"] for t in trials]
    for t in trials:
        m = t["manifest"]
        assert m["target"]["target"] == "fsimage" and m["target"]["image"] == str(image), m["target"]
        assert m["target"]["direct_io"] is True and m["target"]["filesystem"] == "ext4"
        # the workload's writes reached the image through its loop device (direct I/O: not the page cache)
        wrote = t["metrics"]["write_bytes"]
        assert wrote > 0 and t["probes"]["host_disk"]["write_bytes"] >= 0.95 * wrote, (wrote, t["probes"]["host_disk"])
    assert _left(lab, image) == []
    assert fingerprint(image) == before, "the user's files changed"
    assert fsck_clean(image)


# -------------------------------------------------------------------------------- refused by key

def test_what_is_not_a_usable_image_is_refused_naming_the_key(lab: Lab, image: Path, tmp_path: Path) -> None:
    base = image.parent
    (base / "fifo").unlink(missing_ok=True)
    os.mkfifo(base / "fifo")
    (base / "random.img").write_bytes(os.urandom(4 << 20))
    parted = base / "parted.img"  # a disk image: an MBR with one Linux partition from sector 2048
    entry = bytes([0, 0, 0, 0, 0x83, 0, 0, 0]) + (2048).to_bytes(4, "little") + (63488).to_bytes(4, "little")
    parted.write_bytes(bytes(446) + entry + bytes(48) + b"\x55\xaa" + bytes((32 << 20) - 512))
    erred = base / "errors.ext4"
    make_image(erred, "32M")
    subprocess.run(["debugfs", "-w", "-R", "ssv state 3", str(erred)], check=True, capture_output=True)
    os.symlink("/dev/null", base / "null-link")
    raw = base / "raw.img"
    subprocess.run(["truncate", "-s", "16M", str(raw)], check=True)
    dev = subprocess.run(["losetup", "--find", "--show", str(raw)], capture_output=True, text=True,
                         check=True).stdout.strip()
    cases = {  # image value (TOML) -> words the message must hold
        f'"{base}/missing.img"': ["No such file"],
        f'"{base}"': ["not a regular file"],
        f'"{base}/fifo"': ["not a regular file"],
        f'"{base}/null-link"': ["/dev/null", "not a /proc, /sys or /dev entry"],
        '"/proc/kcore"': ["not a /proc, /sys or /dev entry"],
        f'"{dev}"': ["not a /proc, /sys or /dev entry"],
        f'"{base}/random.img"': ["holds no filesystem"],
        f'"{parted}"': ["dos partition table", "one partition"],
        f'"{erred}"': ["errors recorded", "e2fsck -f"],
        "3": ["expected the path of an image file"],
    }
    try:
        before = fingerprint(image)
        specs = [lab.spec(study_table("bad") + f'[target]\nkind = "fsimage"\nimage = {value}\n' + fio_workload(),
                          f"bad{i}.toml") for i, value in enumerate(cases)]
        results = drive(lab, [["run", str(s)] for s in specs])
        for (value, words), spec, res in zip(cases.items(), specs, results, strict=True):
            text = one_line(res["stderr"])
            assert res["exit"] == 2 and not res["traceback"], (value, res)
            assert f"{spec}: target.image:" in text, (value, text)
            for w in words:
                assert w in text, (value, w, text)
        assert _left(lab, image) == [] and not lab.db.exists()
        assert fingerprint(image) == before and loops_of(raw) == [dev]  # the user's loop device untouched
    finally:
        subprocess.run(["losetup", "-d", dev], capture_output=True)


def test_a_workload_the_image_cannot_hold_is_refused_naming_both(lab: Lab, image: Path) -> None:
    spec = lab.spec(_spec(image, workload='[workload]\nkind = "varmail"\nnfiles = 100000\nmeanfilesize = "16k"\n'))
    r = lab.iolab("run", spec, "--dry-run")
    text = one_line(r.stderr)
    assert r.returncode == 2, r
    for w in [f"{spec}: workload:", "workload varmail cannot run on target fsimage", f"image = '{image}' (ext4)",
              "of space (nfiles = 100000", "this target has about", "an image with more free space"]:
        assert w in text, (w, text)


# -------------------------------------------------------------------------------- in use

def test_an_image_in_use_is_refused_before_anything_is_created(lab: Lab, image: Path) -> None:
    before = fingerprint(image)
    spec = lab.spec(_spec(image))
    dev = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True,
                         check=True).stdout.strip()
    try:
        r = lab.iolab("run", spec)
        assert r.returncode == 2 and f"is in use (loop device {dev} serves it)" in one_line(r.stderr), r.stderr
    finally:
        subprocess.run(["losetup", "-d", dev], check=True)
    holder = subprocess.Popen(["sh", "-c", f'exec 3<>"{image}"; exec sleep 60'])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(
                os.path.realpath(f"/proc/{holder.pid}/fd/{fd}") == str(image)
                for fd in os.listdir(f"/proc/{holder.pid}/fd")):
            time.sleep(0.05)
        r = lab.iolab("run", spec)
        assert r.returncode == 2 and f"process {holder.pid} (sleep) has it open" in one_line(r.stderr), r.stderr
    finally:
        holder.kill()
        holder.wait()
    assert _left(lab, image) == [] and lab.run_rows() == [] and fingerprint(image) == before


def test_a_lock_held_by_another_program_keeps_iolab_out(image: Path) -> None:
    """QEMU locks its images with open-file-description locks; iolab's own lock is one too."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, struct, sys, time\n"
        f"fd = os.open({str(image)!r}, os.O_RDWR)\n"
        "fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack('hhqqi4x', fcntl.F_RDLCK, 0, 100, 1, 0))\n"
        "print('locked', flush=True)\ntime.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(RefusedError, match="locked by another program"):
            open_locked(str(image))
    finally:
        holder.kill()
        holder.wait()
    fd = open_locked(str(image))  # free again
    try:
        with pytest.raises(RefusedError, match="locked by another program"):
            open_locked(str(image))  # and iolab's own lock keeps a second user out
    finally:
        os.close(fd)


def test_a_second_run_on_the_same_image_is_refused_while_the_first_finishes(lab: Lab, image: Path) -> None:
    before = fingerprint(image)
    # the first run's fio lasts 20 s: the second iolab must get as far as the image's lock while it
    # still runs, and a loaded machine (a parallel suite) takes seconds just to start python
    first = lab.popen("run", lab.spec(_spec(image, workload=fio_workload(rw="randwrite", size="8M", runtime=20),
                                            repetitions=1, max_repetitions=1), "first.toml"))
    try:
        lab.wait_until(lambda: bool(lab.fio_pids()), 120, "the first run's fio", first)
        second = lab.iolab("run", lab.spec(_spec(image), "second.toml"), "--db", str(lab.root / "second.sqlite"))
        assert second.returncode == 2 and "is in use (loop device" in one_line(second.stderr), second.stderr
        _, err = first.communicate(timeout=300)
        assert first.returncode == 0, err
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert _left(lab, image) == [] and fingerprint(image) == before and fsck_clean(image)


def test_a_file_swapped_in_after_the_check_is_never_attached(lab: Lab, image: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOLAB_DATA", str(lab.data))
    monkeypatch.setenv("IOLAB_SCRATCH", str(lab.scratch))
    other = image.parent / "other.ext4"
    make_image(other, "32M")
    ledger = Ledger()
    target = FsImageTarget(FsImageParams(image=str(image)), ledger)
    target.preflight()
    os.replace(other, image)  # a valid, unused image: but not the one that was checked
    with pytest.raises(RefusedError, match="changed since iolab checked it"):
        target.setup()
    target.teardown()
    assert loops_of(image) == [] and ledger.items == [] and _left(lab, image) == []


# -------------------------------------------------------------------------------- kill -9

def _kill_and_clean(lab: Lab, image: Path, when: str, wipe_ledger: bool = False) -> None:
    env = dict(lab.env)
    if when == "pending":
        env["IOLAB_TEST_CREATE_DELAY"] = "1"
    spec = lab.spec(_spec(image, workload=fio_workload(rw="randwrite", size="8M", runtime=30),
                          repetitions=1, max_repetitions=1), f"kill-{when}.toml")
    proc = subprocess.Popen([str(IOLAB), "run", str(spec)], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if when == "pending":  # inside the window: the fsimage entry is on disk, nothing made yet
            lab.wait_until(lambda: any(i.get("kind") == "fsimage" and i.get("state") == "pending"
                                       for f in lab.ledger_dir.glob("*.json") for i in _read(f)), 120,
                           "a pending fsimage entry", proc)
        else:  # mid-trial: mounted, fio writing in the image
            lab.wait_until(lambda: bool(lab.fio_pids()) and bool(loops_of(image)), 120, "fio in the image", proc)
            time.sleep(1)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    if wipe_ledger:
        shutil.rmtree(lab.ledger_dir)
    r = lab.iolab("clean", *(["--all"] if wipe_ledger else []), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def _read(f: Path) -> list[dict]:
    try:
        return list(json.loads(f.read_text()))
    except (OSError, ValueError):
        return []


@pytest.mark.parametrize("when,wipe", [("pending", False), ("mid-trial", False), ("mid-trial", True)],
                         ids=["pending-window", "mid-trial", "mid-trial-no-ledger"])
def test_kill_9_then_clean_leaves_the_image_as_it_was(lab: Lab, image: Path, when: str, wipe: bool) -> None:
    before = fingerprint(image)
    _kill_and_clean(lab, image, when, wipe)
    deadline = time.monotonic() + 30  # fio's job processes die with their cgroup
    while lab.fio_pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [*_left(lab, image), *map(str, lab.fio_pids())] == []
    assert fingerprint(image) == before, "the user's files changed, or iolab's directory is left in the image"
    assert fsck_clean(image)
