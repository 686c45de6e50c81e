"""The VM lab against real QEMU (TCG unless KVM works): boot, agent, buses, cleanup.

One guest is booted for the module; the bus matrix and the failure paths boot their own.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from iolab.core.exec import ExecRequest
from iolab.core.resources import Ledger
from iolab.probes.guest_diskstats import GuestDiskStats
from iolab.probes.qmp_blockstats import QmpBlockStats
from iolab.targets import qemu_guest
from iolab.targets.base import Placement
from iolab.targets.qemu_guest import QemuGuestParams, QemuGuestTarget
from iolab.vm import cpio, guest_image
from iolab.vm.cleanup import leftover_qemu_pids
from iolab.vm.errors import VmError
from iolab.vm.executor import GuestExecutor
from tests.core.owned import cmdline
from tests.vm.diagnosis import guest_kernel_tail

pytestmark = [
    pytest.mark.vm,
    pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="QEMU not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the scratch loop device needs root"),
]


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory):
    """Isolate iolab's ledger for the module (the guest cache stays shared: it is content-addressed)."""
    data = tmp_path_factory.mktemp("iolab-data")
    old = os.environ.get("IOLAB_DATA")
    os.environ["IOLAB_DATA"] = str(data)
    yield data
    if old is None:
        os.environ.pop("IOLAB_DATA", None)
    else:
        os.environ["IOLAB_DATA"] = old


def _fio_read(dev: str, size: str = "4M") -> list[str]:
    return ["fio", "--name=probe", f"--filename={dev}", "--rw=randread", "--bs=4k", f"--size={size}",
            "--direct=1", "--ioengine=libaio", "--iodepth=4", "--output-format=json"]


def _pids_of(tag: str) -> list[str]:
    out = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True).stdout
    return out.split()


@pytest.fixture(scope="module")
def guest(state):
    ledger = Ledger()
    target = QemuGuestTarget(QemuGuestParams(format="qcow2", disk_size="64M"), ledger)
    placement = target.setup()
    yield target, placement, ledger
    tag, image = target.tag, target.image
    target.teardown()
    assert not _pids_of(tag), "QEMU outlived its target"
    assert image is not None and not image.exists()
    assert ledger._items == []


def test_fio_runs_on_the_test_disk_and_returns_json(guest) -> None:
    _, pl, _ = guest
    res = pl.executor.run(ExecRequest(_fio_read(pl.path), timeout_s=120))
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["jobs"][0]["read"]["io_bytes"] == 4 << 20
    assert res.wall_s > 0 and res.cpu_user_s + res.cpu_sys_s > 0
    assert pl.is_block_device and pl.path == "/dev/vda" and pl.guest_device == "vda"


def test_manifest_records_the_setup(guest) -> None:
    target, pl, _ = guest
    m = pl.manifest
    assert m["accel"] in ("kvm", "tcg") and m["accel_reason"]
    assert "iolab-" in " ".join(m["qemu_cmdline"]) and "-nodefaults" in m["qemu_cmdline"]
    assert m["qemu_img_info"]["format"] == "qcow2"
    assert m["guest_kernel"] and m["qemu_version"][0].isdigit()
    assert pl.host_device and pl.host_device.startswith("loop")
    if m["accel"] == "tcg":
        assert any(f.startswith("tcg_emulation") for f in m["flags"])


def test_agent_files_collect_env_and_exit_codes(guest) -> None:
    _, pl, _ = guest
    ex = pl.executor
    res = ex.run(ExecRequest(["sh", "-c", 'cat in.txt > out.txt; echo "$FOO" >&2; exit 3'], timeout_s=30,
                             files={"in.txt": "hello\n"}, env={"FOO": "bar"}, collect=["out.txt", "missing"]))
    assert res.returncode == 3 and res.stderr.strip() == "bar"
    assert res.collected == {"out.txt": "hello\n"}
    res = ex.run(ExecRequest(["no-such-program"], timeout_s=30))
    assert res.returncode == 127 and "no-such-program" in res.stderr
    res = ex.run(ExecRequest(["true"], timeout_s=30, collect=[f"/sys/block/{pl.guest_device}/stat"]))
    assert len(res.collected[f"/sys/block/{pl.guest_device}/stat"].split()) >= 11
    with pytest.raises(ValueError):
        ex.run(ExecRequest(["true"], timeout_s=5, files={"../x": ""}))


def test_timeouts_and_concurrent_commands(guest) -> None:
    _, pl, _ = guest
    ex = pl.executor
    slow = ex.spawn(ExecRequest(["sleep", "30"], timeout_s=1))
    fast = ex.spawn(ExecRequest(["echo", "hi"], timeout_s=30))
    assert fast.wait().stdout == "hi\n"
    res = slow.wait()
    assert res.timed_out and res.returncode == -9 and res.wall_s < 10
    killed = ex.spawn(ExecRequest(["sleep", "30"], timeout_s=60))
    time.sleep(0.3)
    killed.kill()
    assert killed.wait().returncode == -9


def _guest_procs(pl: Placement, word: str) -> list[str]:
    out = pl.executor.run(ExecRequest(["ps", "-o", "pid,args"], timeout_s=30)).stdout
    return [line for line in out.splitlines() if word in line and "ps -o" not in line]


def test_a_command_that_ends_leaves_no_process_behind_in_the_guest(guest) -> None:
    """fio's job processes call setsid() (fio backend.c): a timeout that killed the command's process
    group left them doing I/O into the next trial for the rest of their runtime. Whatever way a
    command ends, nothing it started runs on: a fio that times out, a process that left for a
    session of its own. And the disk is quiet once the command has answered."""
    _, pl, _ = guest
    ex = pl.executor
    res = ex.run(ExecRequest(["fio", "--name=long", f"--filename={pl.path}", "--rw=randread", "--bs=4k",
                              "--size=16M", "--direct=1", "--ioengine=libaio", "--iodepth=4", "--time_based",
                              "--runtime=120"], timeout_s=4))
    assert res.timed_out, res
    assert _guest_procs(pl, "fio") == []
    stat = f"/sys/block/{pl.guest_device}/stat"
    reads = [int(ex.run(ExecRequest(["cat", stat], timeout_s=30)).stdout.split()[0]) for _ in range(2)]
    time.sleep(1)
    reads.append(int(ex.run(ExecRequest(["cat", stat], timeout_s=30)).stdout.split()[0]))
    assert reads[0] == reads[-1], f"the disk is still being read after the command ended: {reads}"
    res = ex.run(ExecRequest(["sh", "-c", "setsid sleep 300 & sleep 0.5; echo started"], timeout_s=30))
    assert res.returncode == 0 and res.stdout == "started\n", res
    assert _guest_procs(pl, "sleep 300") == []


def test_probes_see_the_guest_io(guest) -> None:
    _, pl, _ = guest
    probes = [QmpBlockStats(), GuestDiskStats()]
    assert all(p.applies_to(pl) for p in probes)
    for p in probes:
        p.start(pl)
    job = ["fio", "--name=w", f"--filename={pl.path}", "--rw=write", "--bs=64k", "--size=1M", "--direct=1",
           "--fsync=4", "--output-format=json"]
    assert pl.executor.run(ExecRequest(job, timeout_s=120)).returncode == 0
    qmp, disk = (p.stop() for p in probes)
    assert qmp["wr_bytes"] >= 1 << 20 and qmp["wr_operations"] >= 16 and qmp["flush_operations"] >= 1
    assert disk["write_bytes"] >= 1 << 20 and disk["writes"] >= 16 and disk["flushes"] >= 1


def test_hung_guest_gives_a_failed_command_with_a_reason(guest) -> None:
    _, pl, _ = guest
    pid = pl.extras["qemu_pid"]
    impatient = GuestExecutor(pl.executor.channel, grace_s=1.0)
    os.kill(pid, signal.SIGSTOP)
    try:
        res = impatient.run(ExecRequest(["true"], timeout_s=1))
    finally:
        os.kill(pid, signal.SIGCONT)
    assert res.returncode != 0 and res.timed_out
    assert "hung" in res.stderr and "console" in res.stderr
    assert pl.executor.run(ExecRequest(["true"], timeout_s=60)).returncode == 0  # it recovers


BUS_MATRIX = [
    dict(bus="virtio-blk", format="raw", cache="none", aio="native", iothread=True),
    dict(bus="virtio-scsi", format="qcow2", cache="writeback", iothread=True, cluster_size="128k",
         lazy_refcounts=True, preallocation="metadata"),
    dict(bus="ide", format="raw", cache="writethrough", prefill=True),
    dict(bus="ahci", format="qcow2", cache="directsync", aio="io_uring", guest_fs="ext4"),
    dict(bus="nvme", format="raw", cache="unsafe", image_dir="/var/tmp"),
]


@pytest.mark.parametrize("axes", BUS_MATRIX, ids=[a["bus"] for a in BUS_MATRIX])
def test_every_bus_boots_and_does_io(state, axes: dict) -> None:
    ledger = Ledger()
    target = QemuGuestTarget(QemuGuestParams(disk_size="32M", **axes), ledger)
    try:
        pl = target.setup()
        where = pl.path or f"{pl.directory}/data"
        res = pl.executor.run(ExecRequest(_fio_read(where, "2M"), timeout_s=120))
        assert res.returncode == 0, f"{res.stderr}\n{guest_kernel_tail(pl.executor)}"
        assert json.loads(res.stdout)["jobs"][0]["read"]["io_bytes"] == 2 << 20
        info = pl.manifest["qemu_img_info"]
        assert info["format"] == axes["format"]
        if axes.get("cluster_size"):
            assert info["cluster-size"] == 128 << 10
            assert info["format-specific"]["data"]["lazy-refcounts"] is True
            assert info["actual-size"] > 64 << 10  # preallocation=metadata wrote the L2 tables
        if axes.get("guest_fs"):
            assert pl.directory == "/mnt/iolab" and pl.path is None
            mounts = pl.executor.run(ExecRequest(["cat", "/proc/mounts"], timeout_s=30)).stdout
            assert f"/dev/{pl.guest_device} /mnt/iolab ext4" in mounts
        if axes.get("prefill"):
            dump = pl.executor.run(ExecRequest(["sh", "-c", f"head -c 4 {pl.path} | od -An -tx1"], timeout_s=30))
            assert dump.stdout.split() == ["5a"] * 4
        # the disk as QEMU got it: on the command line of a booted guest, over QMP for a restored one
        attached = pl.manifest["boot"].get("disk_attached", [])
        assert (pl.manifest["boot"]["mode"] == "restored") == bool(attached) == (axes["bus"] not in ("ide", "ahci"))
        cmd = " ".join(pl.manifest["qemu_cmdline"]) + json.dumps(attached, separators=(",", ":"))
        assert f'"aio":"{axes.get("aio", "threads")}"' in cmd
        assert ("iothread0" in cmd) == bool(axes.get("iothread"))
    finally:
        tag, image = target.tag, target.image
        target.teardown()
    assert not _pids_of(tag)
    assert image is None or not image.exists()
    assert ledger._items == []


def test_guest_that_never_starts_the_agent_is_killed_with_the_console_tail(state, tmp_path: Path) -> None:
    """A user initramfs without the agent: boot times out, QEMU is killed, nothing is left."""
    initrd = tmp_path / "noagent.cpio"
    init = b"#!/bin/busybox sh\n/bin/busybox echo iolab-test-no-agent > /dev/console\nexec /bin/busybox sleep 600\n"
    cpio.write_archive([cpio.file_data("init", init, 0o755),
                        cpio.file_from("bin/busybox", guest_image.find_busybox())], initrd, compress=False)
    kernel = guest_image.build_guest().kernel
    ledger = Ledger()
    target = QemuGuestTarget(QemuGuestParams(kernel=str(kernel), initramfs=str(initrd), disk_size="16M",
                                             image_dir=str(tmp_path), boot_timeout=12), ledger)
    with pytest.raises(VmError) as err:
        target.setup()
    assert "did not start within 12 s" in str(err.value)
    assert "iolab-test-no-agent" in str(err.value)  # the console tail explains what the guest did
    assert not _pids_of(target.tag)
    assert not list(tmp_path.glob("iolab-*.raw"))
    assert ledger._items == []


def test_exception_after_boot_tears_everything_down(state, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(executor, dev):
        raise RuntimeError("injected failure")

    monkeypatch.setattr(qemu_guest, "make_ext4", boom)
    ledger = Ledger()
    target = QemuGuestTarget(QemuGuestParams(disk_size="16M", guest_fs="ext4"), ledger)
    with pytest.raises(RuntimeError, match="injected"):
        target.setup()
    assert target.image is not None and not target.image.exists()
    assert not _pids_of(target.tag)
    assert ledger._items == []
    assert not [p for p in leftover_qemu_pids() if target.tag in cmdline(p)]


def test_killed_guest_fails_the_running_command_with_a_reason(state, tmp_path: Path) -> None:
    ledger = Ledger()
    target = QemuGuestTarget(QemuGuestParams(disk_size="16M", image_dir=str(tmp_path)), ledger)
    try:
        pl = target.setup()
        running = pl.executor.spawn(ExecRequest(["sleep", "60"], timeout_s=120))
        time.sleep(0.3)
        os.kill(pl.extras["qemu_pid"], signal.SIGKILL)
        res = running.wait()
        assert res.returncode == -1 and "the guest went away" in res.stderr
        assert "QEMU exited with status -9" in res.stderr
    finally:
        target.teardown()
    assert not _pids_of(target.tag) and ledger._items == []
    assert not list(tmp_path.glob("iolab-*"))


def test_invalid_axes_are_refused_before_anything_runs() -> None:
    with pytest.raises(ValidationError, match="aio=native needs cache.direct=on"):
        QemuGuestParams(aio="native", cache="writeback")
    with pytest.raises(ValidationError, match="cluster_size applies to format=qcow2"):
        QemuGuestParams(cluster_size="64k")
    with pytest.raises(ValidationError, match="iothread is supported for virtio-blk and virtio-scsi"):
        QemuGuestParams(bus="ide", iothread=True)
    with pytest.raises(ValidationError, match="power of two"):
        QemuGuestParams(format="qcow2", cluster_size=3000)
    with pytest.raises(ValidationError):
        QemuGuestParams(bus="floppy")
    with pytest.raises(ValidationError):
        QemuGuestParams(unknown_key=1)


def test_image_hash_covers_extra_binaries() -> None:
    base = guest_image.build_guest()
    more = guest_image.build_guest(extra_binaries=["/usr/bin/strace"])
    assert base.digest != more.digest
    assert guest_image.build_guest().digest == base.digest  # stable
    members = json.loads((more.initramfs.parent / "manifest.json").read_text())["members"]
    assert "usr/bin/strace" in members


def test_ledger_cleaner_kills_a_leftover_qemu(state, tmp_path: Path) -> None:
    """What `iolab clean` does after a crash: the process cleaner kills a tagged QEMU by pid."""
    from iolab.core.resources import Resource
    from iolab.vm.cleanup import clean_process, is_iolab_qemu

    proc = subprocess.Popen(["qemu-system-x86_64", "-name", "iolab-orphan-test", "-nodefaults", "-nographic",
                             "-machine", "none", "-S"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 5
        while not is_iolab_qemu(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        reaper = threading.Thread(target=proc.wait)
        reaper.start()
        clean_process(Resource("process", str(proc.pid), {"tag": "iolab-orphan-test"}))
        reaper.join(5)
        assert proc.poll() is not None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_qemu_runs_confined_and_sees_only_its_image(guest) -> None:
    """QEMU is bwrap's child, under its own seccomp filter (-sandbox on), with the root read-only,
    the scratch dir's other files hidden and its own image writable (core/confine.py)."""
    target, placement, _ = guest
    pid = placement.extras["qemu_pid"]
    assert Path(f"/proc/{pid}/comm").read_text().startswith("qemu")
    parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
    assert Path(f"/proc/{parent}/comm").read_text().strip() == "bwrap"
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    assert status["Seccomp"].strip() == "2", "QEMU's -sandbox filter is installed"
    from iolab.core import paths

    other = paths.scratch_dir() / "iolab-confine-test-other.img"
    other.write_bytes(b"another study's image")
    try:
        root = Path(f"/proc/{pid}/root")
        assert not (root / str(other).lstrip("/")).exists(), "QEMU must not see other files of the scratch dir"
        assert (root / str(target.image).lstrip("/")).exists(), "its own image is there"
        mounts = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
        root_mount = next(m for m in mounts if m.split()[4] == "/")
        assert " ro," in f" {root_mount.split()[5]}," or root_mount.split()[5].startswith("ro"), root_mount
        image_mount = [m for m in mounts if m.split()[4] == str(target.image)]
        assert image_mount and image_mount[-1].split()[5].startswith("rw"), image_mount
    finally:
        other.unlink()


def test_the_kvm_path_keeps_dev_kvm_inside_the_confinement(tmp_path: Path) -> None:
    """Under KVM, QEMU's confinement binds /dev/kvm (this machine's KVM may not boot guests: the
    device itself is checked from inside, with the ioctl every KVM user starts with)."""
    from iolab.core.confine import Confinement
    from iolab.vm.cmdline import RunFiles, VmSpec, confinement

    spec = VmSpec(disk=None, image=None, kernel=Path("/k"), initramfs=Path("/i"), accel="kvm")
    conf = confinement(spec, RunFiles(tmp_path))
    assert "/dev/kvm" in conf.devices and conf.share_net and not conf.private_pids
    assert "/dev/kvm" not in confinement(VmSpec(disk=None, image=None, kernel=Path("/k"), initramfs=Path("/i"),
                                                accel="tcg"), RunFiles(tmp_path)).devices
    if not os.path.exists("/dev/kvm"):
        pytest.skip("no /dev/kvm on this machine")
    probe = ("import fcntl, os; fd = os.open('/dev/kvm', os.O_RDWR); print('KVM_API', fcntl.ioctl(fd, 0xAE00))")
    for c, visible in ((conf, True), (Confinement(share_net=True, private_pids=False, unix_sockets=True), False)):
        r = subprocess.run(c.argv(["python3", "-c", probe]), capture_output=True, text=True, timeout=60)
        assert ("KVM_API 12" in r.stdout) == visible, (visible, r.stdout, r.stderr)


def test_strace_attaches_to_the_confined_qemu_and_counts_its_syscalls(guest) -> None:
    """The qemu_syscalls probe attaches to QEMU's own pid (bwrap's child, reported by its info fd)."""
    from iolab.cgroups.trial import TrialCgroup
    from iolab.probes.qemu_syscalls import QemuSyscalls

    if shutil.which("strace") is None:
        pytest.skip("needs strace")
    _, placement, ledger = guest
    cg = TrialCgroup.create(ledger)
    here = placement.within(cg)
    probe = QemuSyscalls()
    try:
        probe.start(here)
        res = here.executor.run(ExecRequest(["sh", "-c", "dd if=/dev/zero of=/dev/vda bs=4k count=64 conv=fsync"],
                                            timeout_s=120))
        assert res.returncode == 0, res.stderr
        values = probe.stop()
    finally:
        cg.close()
    assert values["qemu_pid"] == placement.extras["qemu_pid"]
    assert values.get("host_write_requests", 0) > 0, values
