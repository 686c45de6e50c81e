"""The machine of issue 10, for real: a 260 MiB last-level cache (IOLAB_FAKE_LLC) and a 512 MiB
guest. STREAM asks the guest (its own /proc/meminfo, through the agent), reduces its arrays
to fit, runs to a validated result and says why; and the guest's own footprint is within
what core/sizing.py assumes when it sizes guests (GUEST_BASE_BYTES)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from iolab.core import sizing
from iolab.core.resources import Ledger
from iolab.targets.base import TCG_TIME_FACTOR, Placement
from iolab.targets.qemu_guest import QemuGuestParams, QemuGuestTarget
from iolab.workloads.stream import StreamParams, StreamWorkload

pytestmark = [
    pytest.mark.vm,
    pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="QEMU not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the scratch loop device needs root"),
]
MiB = 1 << 20


@pytest.fixture(scope="module")
def small_guest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Placement]:
    mp = pytest.MonkeyPatch()
    base = tmp_path_factory.mktemp("stream-guest")
    mp.setenv("IOLAB_DATA", str(base / "data"))
    mp.setenv("IOLAB_SCRATCH", str(base / "scratch"))
    target = QemuGuestTarget(QemuGuestParams(memory="512M", disk_size="64M", native_helpers=("iolab_stream",)),
                             Ledger())
    try:
        target.preflight()
        yield target.setup()
    finally:
        target.teardown()
        mp.undo()
    assert not [p for p in Path(base / "scratch").rglob("*") if p.is_file()], "scratch files left"


def test_guest_footprint_is_what_sizing_assumes(small_guest: Placement) -> None:
    mem = sizing.memory_where(small_guest.executor)
    assert mem is not None and mem.where == "guest"
    assert 400 * MiB < mem.total <= 512 * MiB, "the guest's own MemTotal, not the host's"
    print(f"512 MiB guest: MemTotal {mem.total / MiB:.0f} MiB, MemAvailable {mem.available / MiB:.0f} MiB")
    # guest_memory_for() counts on MemAvailable >= memory - GUEST_BASE_BYTES (kernel reservations,
    # the unpacked initramfs, the agent)
    assert 512 * MiB - mem.available <= sizing.GUEST_BASE_BYTES


def test_stream_in_a_small_guest_under_a_large_cache_is_reduced(
        small_guest: Placement, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sizing.FAKE_LLC_ENV, "260M")
    r = StreamWorkload(StreamParams(ntimes=2)).run(small_guest, timeout_s=600)
    s = r.raw["sizing"]
    print(s["reason"])
    assert s["where"] == "guest" and s["wanted_mib"] == 1040 and s["reduced"]
    assert 3 * s["array_mib"] * MiB <= sizing.STREAM_MEM_SHARE * 512 * MiB
    assert r.raw["validation"]["ok"] and r.raw["elements"] == s["array_mib"] * MiB // 8
    assert any(f.startswith(f"array_below_4x_llc: arrays 3 x {s['array_mib']} MiB") and "guest's" in f
               for f in r.flags), r.flags


def test_a_tcg_guest_stretches_its_trials_timeouts(small_guest: Placement) -> None:
    """The placement says how much slower than the host's estimate work runs here: the runner
    multiplies trial timeouts by it (a TCG guest), and a KVM guest runs at the host's pace."""
    accel = small_guest.manifest["accel"]
    assert small_guest.time_factor == (TCG_TIME_FACTOR if accel == "tcg" else 1.0), accel
