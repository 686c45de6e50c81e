"""Images and guests bounded by the machine, checked before anything is created: a scratch
filesystem too small for an image and a guest larger than the host's available memory are
refused by the targets' preflight (and so by `iolab run`, also with --dry-run), with the
numbers and what to do; a size that fits passes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from iolab.core import sizing
from iolab.core.errors import CapabilityMissing
from iolab.core.resources import Ledger
from iolab.targets.loop import LoopParams, LoopTarget
from iolab.targets.qemu_guest import QemuGuestParams, QemuGuestTarget

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small scratch filesystem needs root")
MiB = 1 << 20


@pytest.fixture
def small_scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A real 512 MiB filesystem (tmpfs) as IOLAB_SCRATCH."""
    d = tmp_path / "scratch"
    d.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m", "iolab-test-scratch", str(d)], check=True)
    monkeypatch.setenv("IOLAB_SCRATCH", str(d))
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path / "data"))
    try:
        yield d
    finally:
        subprocess.run(["umount", str(d)], check=True)


def test_loop_image_that_does_not_fit_is_refused_before_creation(small_scratch: Path) -> None:
    LoopTarget(LoopParams(size="128M"), Ledger()).preflight()  # 128 + 256 MiB headroom fit in 512
    with pytest.raises(CapabilityMissing, match=rf"not enough space in {small_scratch} for a 512 MiB scratch image"):
        LoopTarget(LoopParams(size="512M"), Ledger()).preflight()
    assert list(small_scratch.iterdir()) == []


def test_guest_image_loop_is_checked_too(small_scratch: Path) -> None:
    with pytest.raises(CapabilityMissing, match="IOLAB_SCRATCH"):
        QemuGuestTarget(QemuGuestParams(disk_size="1G"), Ledger()).preflight()


def test_guest_larger_than_the_host_is_refused() -> None:
    host = sizing.host_memory()
    assert host is not None
    too_big = (host.available // MiB + 1024) * MiB
    with pytest.raises(CapabilityMissing, match=r"needs \d+ MiB of RAM, the host has \d+ MiB available"):
        QemuGuestTarget(QemuGuestParams(memory=too_big), Ledger()).preflight()
    with pytest.raises(CapabilityMissing, match="network peer"):
        QemuGuestTarget(QemuGuestParams(memory=too_big, network="user", net_peer=True), Ledger()).preflight()


def test_cli_refuses_before_creating_anything(small_scratch: Path, tmp_path: Path) -> None:
    spec = tmp_path / "big.toml"
    spec.write_text('[study]\nname = "big"\n\n[target]\nkind = "loop"\nsize = "1G"\n\n'
                    '[workload]\nkind = "fio"\nruntime = 1\n')
    env = dict(os.environ)
    for args in (["--dry-run"], []):
        r = subprocess.run([sys.executable, "-m", "iolab.cli", "run", str(spec), *args], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 1 and "not enough space" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert list(small_scratch.iterdir()) == []
    assert str(small_scratch) not in subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
