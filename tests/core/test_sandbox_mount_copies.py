"""A sandbox (bwrap `--ro-bind / /`) starts with a private copy of every mount the host has, and
the host's unmount does not reach it: a QEMU or fio that one run sandboxed while another run's
filesystem was mounted kept that filesystem alive, and its loop device could not be detached
(the parallel suite: "still attached after 60 s ... no mount, holder or process seen"). Done here
for real with a canary filesystem this test makes: iolab unmounts its device's filesystem from
the namespace of an iolab sandbox, never from one no iolab process lives in, and names it."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from iolab.core import cleaners
from iolab.core import owner as owners

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("bwrap") is None or shutil.which("mkfs.ext4") is None,
                                reason="needs root, bwrap and mkfs.ext4 (a loop device and a mount of its own)")


@pytest.fixture
def canary(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A loop device serving a fresh ext4 image, mounted under this test's own directory."""
    work = Path(os.environ.get("IOLAB_SCRATCH", "/var/tmp")) / f"iolab-test-copies-{os.getpid()}"
    work.mkdir(parents=True)
    image, mnt = work / "canary.ext4", work / "mnt"
    mnt.mkdir()
    subprocess.run(["truncate", "-s", "32M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", str(image)], check=True)
    dev = subprocess.run(["losetup", "-f", "--show", str(image)], check=True, capture_output=True,
                         text=True).stdout.strip()
    try:
        subprocess.run(["mount", dev, str(mnt)], check=True)
        yield dev, mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
        if cleaners.loop_backing_file(dev) == str(image):
            subprocess.run(["losetup", "-d", dev], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


def _sandbox(tagged: bool, mnt: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A sandbox shaped like iolab's (core/confine.py), started while the canary is mounted, and
    its mount namespace, once bwrap has finished building it: once `sleep` runs in it. Before that
    the namespace passes through states where the canary's copy is at its own path too (the host's
    copy before bwrap binds / to /newroot) or only under /newroot (before the pivot), so seeing the
    canary's path alone does not say the namespace is built (the suite once caught it half-built)."""
    env = {k: v for k, v in os.environ.items() if k != owners.ENV_OWNER}
    if tagged:
        env[owners.ENV_OWNER] = owners.me().token
    proc = subprocess.Popen(["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--unshare-pid", "--proc", "/proc",
                             "sleep", "120"], env=env, start_new_session=True)
    mine = os.readlink("/proc/self/ns/mnt")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for pid in _descendants(proc.pid):
            try:
                ns = os.readlink(f"/proc/{pid}/ns/mnt")
                built = ns != mine and Path(f"/proc/{pid}/comm").read_text().strip() == "sleep"
                lines = Path(f"/proc/{pid}/mountinfo").read_text().splitlines() if built else []
            except OSError:
                continue
            if any(line.split()[4] == str(mnt) for line in lines):
                return proc, ns
        time.sleep(0.05)
    raise AssertionError("the sandbox did not start")


def _descendants(pid: int) -> list[str]:
    out, todo = [], [str(pid)]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            todo += Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            pass
    return out


def _held_in(ns: str, dev: str) -> list[tuple[list[str], bool]]:
    """(mount points, iolab's) of the namespaces holding `dev` that are `ns` (other workers' sandboxes
    may hold copies too: the suite runs in parallel)."""
    out = []
    for copy in cleaners.mount_namespaces_holding(dev):
        try:
            if os.readlink(f"/proc/{copy.pid}/ns/mnt") == ns:
                out.append((copy.points, copy.ours))
        except OSError:
            pass
    return out


@contextmanager
def _unmounted_on_the_host_beside(mnt: Path, tagged: bool) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A sandbox started while the canary is mounted, then the canary unmounted on the host (the
    sandbox's copy stays); the sandbox is ended after the block."""
    box, ns = _sandbox(tagged, mnt)
    try:
        subprocess.run(["umount", str(mnt)], check=True)
        yield box, ns
    finally:
        os.killpg(box.pid, 9)
        box.wait()


def test_a_filesystem_copied_into_an_iolab_sandbox_does_not_keep_its_loop_device(
        canary: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    dev, mnt = canary
    monkeypatch.setattr(cleaners, "DETACH_WAIT_S", 4.0)
    with _unmounted_on_the_host_beside(mnt, tagged=True) as (box, ns):
        assert _held_in(ns, dev) == [([str(mnt)], True)], cleaners.mount_namespaces_holding(dev)
        cleaners.detach_loop(dev)  # the old detach waited its whole bound, then raised "still attached"
        assert cleaners.loop_backing_file(dev) is None
        assert box.poll() is None, "the sandbox itself is left alone"


def test_a_copy_in_a_namespace_iolab_did_not_make_is_named_and_left_alone(
        canary: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    dev, mnt = canary
    monkeypatch.setattr(cleaners, "DETACH_WAIT_S", 2.0)
    with _unmounted_on_the_host_beside(mnt, tagged=False) as (_, ns):
        with pytest.raises(RuntimeError, match=r"mount namespace of pid \d+ \(a process iolab did not start\)"):
            cleaners.detach_loop(dev)
        assert _held_in(ns, dev) == [([str(mnt)], False)], "left mounted there"
    deadline = time.monotonic() + 10
    while cleaners.loop_backing_file(dev) is not None and time.monotonic() < deadline:
        subprocess.run(["losetup", "-d", dev], capture_output=True)
        time.sleep(0.2)
    assert cleaners.loop_backing_file(dev) is None, "once that namespace is gone, the device detaches"


def test_a_sandbox_still_being_built_is_left_for_the_next_attempt(
        canary: tuple[str, Path], tmp_path: Path) -> None:
    """bwrap makes each mount of its copy read-only from the list it read; a copy unmounted under it
    meanwhile fails that other run's sandbox ("Can't remount readonly"). A namespace whose every
    process is still the builder (comm bwrap) is not released yet, and named as being built; once
    the sandboxed command runs there, it is. The builder is stood in for by `sleep` under bwrap's
    name, in a mount namespace of its own that holds the canary's copy (bwrap's half-built state
    lasts milliseconds: too short to catch for real)."""
    dev, mnt = canary
    builder = tmp_path / cleaners.SANDBOX_BUILDER
    shutil.copy(shutil.which("sleep") or "/bin/sleep", builder)
    env = {**os.environ, owners.ENV_OWNER: owners.me().token}
    box = subprocess.Popen(["unshare", "--mount", "--propagation", "private", str(builder), "120"], env=env,
                           start_new_session=True)
    mine = os.readlink("/proc/self/ns/mnt")
    joined = None
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if (os.readlink(f"/proc/{box.pid}/ns/mnt") != mine
                        and Path(f"/proc/{box.pid}/comm").read_text().strip() == cleaners.SANDBOX_BUILDER):
                    break
            except OSError:
                pass
            time.sleep(0.05)
        else:
            raise AssertionError("the stand-in builder did not start")
        ns = os.readlink(f"/proc/{box.pid}/ns/mnt")
        subprocess.run(["umount", str(mnt)], check=True)
        assert _held_in(ns, dev) == [([str(mnt)], True)], cleaners.mount_namespaces_holding(dev)
        assert cleaners.release_sandbox_copies(dev) == [], "a sandbox being built was released"
        assert _held_in(ns, dev) == [([str(mnt)], True)], "its copy must stay until it is built"
        assert "(an iolab sandbox still being built)" in cleaners.holders_of(dev)
        # the sandboxed command starts in that namespace: now it is released
        joined = subprocess.Popen(["nsenter", "--target", str(box.pid), "--mount", "--", "sleep", "120"], env=env,
                                  start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
                _comm(p) == "sleep" and os.readlink(f"/proc/{p}/ns/mnt") == ns for p in _descendants(joined.pid)):
            time.sleep(0.05)
        released = cleaners.release_sandbox_copies(dev)  # named by whichever of its processes /proc lists first
        assert len(released) == 1 and released[0].startswith(f"{mnt} in the sandbox of pid "), released
        assert _held_in(ns, dev) == [], "released once the sandbox runs"
    finally:
        for p in (box, joined):
            if p is not None:
                os.killpg(p.pid, 9)
                p.wait()


def _comm(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
