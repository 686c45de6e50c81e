"""VM lab pieces that need no guest: framing, cpio, module order, command line."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from iolab.vm import cpio, guest_image
from iolab.vm import protocol as P
from iolab.vm.cmdline import GUEST_SERVER_PORT, NetSpec, RunFiles, VmSpec, build_command, peer_spec
from iolab.vm.disk import CACHE_MODES, DiskSpec


def test_frames_round_trip_and_resync_over_noise() -> None:
    import socket

    a, b = socket.socketpair()
    fs_a, fs_b = P.FrameSocket(a), P.FrameSocket(b)
    a.sendall(b"console noise IOL")  # bytes before a magic are skipped
    fs_a.send(P.DONE, 7, [("r", "0"), ("o", b"\x00\xffbinary"), ("n", "x"), ("d", "")])
    frame = fs_b.recv()
    assert (frame.type, frame.id) == (P.DONE, 7)
    assert frame.first("o") == b"\x00\xffbinary" and frame.number("r") == 0 and frame.text("d") == ""
    a.close()
    with pytest.raises(P.ChannelClosed):
        fs_b.recv()


@pytest.mark.skipif(shutil.which("cpio") is None, reason="cpio tool not installed")
def test_cpio_archive_lists_with_parents(tmp_path: Path) -> None:
    out = tmp_path / "a.cpio"
    cpio.write_archive([cpio.file_data("etc/iolab/x", b"hi"), cpio.symlink("bin/sh", "busybox")], out, False)
    names = subprocess.run(["cpio", "-t"], stdin=out.open("rb"), capture_output=True, text=True).stdout.split()
    assert names == ["bin", "bin/sh", "etc", "etc/iolab", "etc/iolab/x"]


def test_module_closure_puts_dependencies_first(tmp_path: Path) -> None:
    (tmp_path / "modules.dep").write_text(
        "kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/jbd2/jbd2.ko\n"
        "kernel/lib/crc16.ko:\nkernel/fs/jbd2/jbd2.ko:\n")
    order = guest_image.module_closure(tmp_path, ["ext4", "not_a_module"])
    assert order == ["kernel/lib/crc16.ko", "kernel/fs/jbd2/jbd2.ko", "kernel/fs/ext4/ext4.ko"]


@pytest.mark.parametrize("mode", list(CACHE_MODES))
def test_cache_modes_map_to_blockdev_and_device(mode: str, tmp_path: Path) -> None:
    disk = DiskSpec(size=64 << 20, cache=mode, aio="native" if CACHE_MODES[mode].direct else "threads")
    spec = VmSpec(disk=disk, image=tmp_path / "a,b.img", kernel=tmp_path / "k", initramfs=tmp_path / "i",
                  tag="iolab-x", module_groups=("virtio-blk",))
    argv = build_command(spec, RunFiles(tmp_path / "run,dir"))
    blockdev = json.loads(argv[argv.index("-blockdev") + 1])
    flags = CACHE_MODES[mode]
    assert blockdev["file"]["cache"] == {"direct": flags.direct, "no-flush": flags.no_flush}
    assert blockdev["file"]["filename"].endswith("a,b.img")  # JSON: the comma stays a comma
    device = json.loads(argv[argv.index("-device", argv.index("-blockdev")) + 1])
    assert device["write-cache"] == ("on" if flags.write_cache else "off")
    assert argv[argv.index("-name") + 1] == "iolab-x" and "-nodefaults" in argv
    assert any("run,,dir/agent.sock" in a for a in argv)  # QemuOpts: comma doubled
    assert "iolab_modules=virtio-blk" in argv[argv.index("-append") + 1]


def test_disk_spec_problems_name_the_rule() -> None:
    assert DiskSpec(size=1 << 20, aio="native", cache="writeback").problems() == [
        "aio=native needs cache.direct=on (cache=none or cache=directsync); cache=writeback opens "
        "the image without O_DIRECT, and QEMU refuses it"]
    assert DiskSpec(size=1 << 20, format="qcow2", cluster_size=1 << 16, preallocation="metadata").problems() == []
    assert DiskSpec(size=1000).problems()


def test_the_network_peer_is_a_diskless_guest_of_the_same_kernel_and_accelerator(tmp_path: Path) -> None:
    disk = DiskSpec(size=64 << 20)
    first = VmSpec(disk=disk, image=tmp_path / "d.raw", kernel=tmp_path / "k", initramfs=tmp_path / "i",
                   accel="kvm", cpu="host", memory_mb=1024, vcpus=2, tag="iolab-x",
                   net=NetSpec(hostfwd=((40001, GUEST_SERVER_PORT),)))
    peer = peer_spec(first, "iolab-x-peer", 40002)
    assert (peer.kernel, peer.initramfs, peer.accel, peer.cpu) == (first.kernel, first.initramfs, "kvm", "host")
    assert (peer.disk, peer.image, peer.secret, peer.module_groups) == (None, None, None, ("net",))
    argv = build_command(peer, RunFiles(tmp_path / "peer"))
    assert "-blockdev" not in argv and argv[argv.index("-name") + 1] == "iolab-x-peer"
    assert argv[argv.index("-accel") + 1:argv.index("-accel") + 4] == ["kvm", "-cpu", "host"]
    assert f"user,id=net0,ipv6=off,hostfwd=tcp:127.0.0.1:40002-:{GUEST_SERVER_PORT}" in argv


def test_an_application_tree_goes_in_whole_with_the_host_libraries_it_needs(tmp_path: Path) -> None:
    """guest_apps' trees (tree_entries): every file with its mode, directories, symlinks as
    links; an ELF file brings the host libraries it needs from outside the tree, never a copy
    of one inside it; changing a byte of the tree changes the image's hash."""
    app = tmp_path / "app"
    (app / "bin").mkdir(parents=True)
    (app / "lib").mkdir()
    shutil.copyfile("/usr/bin/gzip", app / "bin" / "tool")  # dynamic: libc from the host
    (app / "bin" / "tool").chmod(0o750)
    (app / "lib" / "data.txt").write_text("config\n")
    (app / "lib" / "data.txt").chmod(0o640)
    (app / "current").symlink_to("lib/data.txt")
    entries = {e.name: e for e in guest_image.tree_entries("opt/app", app)}
    assert entries["opt/app/bin/tool"].mode & 0o777 == 0o750 and entries["opt/app/bin/tool"].source is not None
    assert entries["opt/app/lib/data.txt"].mode & 0o777 == 0o640
    assert entries["opt/app/current"].symlink == "lib/data.txt"
    assert {"opt/app", "opt/app/bin", "opt/app/lib"} <= set(entries)
    libc = [n for n in entries if "/libc.so" in f"/{n}"]
    assert libc and all(not n.startswith("opt/app") for n in libc), sorted(entries)
    assert not [n for n in entries if str(app) in n], "no host path of the tree itself"

    release = guest_image.host_kernel()[1]
    kernel = guest_image.host_kernel()[0]
    one = guest_image.content_digest(kernel, guest_image.image_entries(release, extra_trees={"opt/app": app}))
    (app / "lib" / "data.txt").write_text("config!\n")
    two = guest_image.content_digest(kernel, guest_image.image_entries(release, extra_trees={"opt/app": app}))
    assert one != two
    with pytest.raises(guest_image.CapabilityMissing, match="not found"):
        guest_image.tree_entries("opt/x", tmp_path / "missing")
