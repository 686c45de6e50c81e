"""sync-writes on a raw device: append regions never overlap, whatever the mix of sizes, and never
fall inside an overwrite region prepared before them (real fio, a sparse file as the device)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from iolab.cgroups.executor import HostExecutor
from iolab.targets.base import Placement
from iolab.workloads.sync_writes import SyncWritesParams, SyncWritesWorkload, prepare_overwrite

pytestmark = pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio")
KiB = 1 << 10


@pytest.fixture
def device(tmp_path: Path) -> Iterator[Placement]:
    dev = tmp_path / "device.img"
    with open(dev, "wb") as f:
        f.truncate(64 << 20)
    executor = HostExecutor(tmp_path / "work")
    try:
        yield Placement(executor=executor, path=str(dev), is_block_device=True)
    finally:
        executor.close()


def _append(placement: Placement, count: int, pattern: str = "append") -> tuple[int, int]:
    w = SyncWritesWorkload(SyncWritesParams(pattern=pattern, bs=64 * KiB, count=count))
    r = w.run(placement, 60)
    assert r.metrics["guest_writes"] == count
    return r.raw["layout"]["offset"], count * 64 * KiB


def test_append_regions_of_mixed_sizes_never_overlap_or_touch_an_overwrite_region(device: Placement) -> None:
    spans = [_append(device, 4), _append(device, 16, "sequential"), _append(device, 4)]
    # a larger overwrite region prepared later (2 MiB): every later append starts past it
    assert prepare_overwrite(device, SyncWritesParams(pattern="overwrite", bs=64 * KiB, count=32))
    spans += [_append(device, 8), _append(device, 2, "sequential")]
    first = spans[0][0]
    assert first == 4 * 64 * KiB  # the first region right after its own overwrite region, as before
    ends = sorted((o, o + n) for o, n in spans)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(ends, ends[1:], strict=False)), ends
    assert all(o >= 32 * 64 * KiB for o, _ in spans[3:]), spans  # past the 2 MiB overwrite region
