"""STREAM on a pretend machine, for real: a 260 MiB last-level cache (IOLAB_FAKE_LLC) and a
512 MiB memory limit (a real memory cgroup, as a container or a small guest would have).

Without sizing, 4 x 260 MiB arrays (3 GiB) are killed by the limit: the negative control
shows that. With sizing, the workload reads the limit where it runs, reduces the arrays to
fit, completes, validates, and says why in its flags and raw output.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from iolab.cgroups.executor import HostExecutor
from iolab.core import sizing
from iolab.core.exec import ExecRequest, Running
from iolab.native import helper_path
from iolab.targets.base import Placement
from iolab.workloads.stream import StreamParams, StreamWorkload

MiB = 1 << 20
LIMIT = 512 * MiB
V1 = Path("/sys/fs/cgroup/memory")
V2 = Path("/sys/fs/cgroup")


def _memory_cgroup_root() -> tuple[Path, str] | None:
    if (V1 / "memory.limit_in_bytes").exists():
        return V1, "v1"
    ctl = V2 / "cgroup.controllers"
    if ctl.exists() and "memory" in ctl.read_text().split():
        return V2, "v2"
    return None


pytestmark = pytest.mark.skipif(os.geteuid() != 0 or _memory_cgroup_root() is None,
                                reason="needs root and a memory cgroup controller")


class LimitedExecutor(HostExecutor):
    """The host executor with every command placed in one memory cgroup before exec."""

    def __init__(self, procs: Path):
        super().__init__()
        self.procs = procs

    def spawn(self, req: ExecRequest) -> Running:
        req.cgroup_procs = [*req.cgroup_procs, str(self.procs)]
        return super().spawn(req)


@pytest.fixture
def limited() -> Iterator[tuple[Placement, Path]]:
    root, version = _memory_cgroup_root()  # type: ignore[misc]
    group = root / f"iolabtest-mem-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    group.mkdir()
    try:
        if version == "v1":
            (group / "memory.limit_in_bytes").write_text(str(LIMIT))
            swap = group / "memory.memsw.limit_in_bytes"
            if swap.exists():
                swap.write_text(str(LIMIT))
        else:
            (group / "memory.max").write_text(str(LIMIT))
            (group / "memory.swap.max").write_text("0")
        ex = LimitedExecutor(group / "cgroup.procs")
        try:
            yield Placement(executor=ex), group
        finally:
            ex.close()
    finally:
        group.rmdir()


def test_a_large_cache_under_a_small_limit_is_reduced_and_runs(
        limited: tuple[Placement, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    placement, group = limited
    monkeypatch.setenv(sizing.FAKE_LLC_ENV, "260M")
    mem = sizing.memory_where(placement.executor)
    assert mem is not None and mem.available <= LIMIT < mem.total, "the limit must be seen where it runs"

    # negative control: the unreduced arrays (3 x 1040 MiB) do not survive this limit
    wanted = 4 * 260 * MiB // 8
    res = placement.executor.run(ExecRequest(
        [helper_path("iolab_stream"), "--elements", str(wanted), "--ntimes", "2"], timeout_s=120))
    assert res.returncode != 0, "3 GiB of arrays ran under a 512 MiB limit: the limit is not real"

    r = StreamWorkload(StreamParams(ntimes=3)).run(placement, timeout_s=120)
    s = r.raw["sizing"]
    assert s["llc"] == {"bytes": 260 * MiB, "source": "IOLAB_FAKE_LLC"} and s["wanted_mib"] == 1040
    assert s["reduced"] and 3 * s["array_mib"] * MiB <= sizing.STREAM_MEM_SHARE * LIMIT
    assert r.raw["elements"] == s["array_mib"] * MiB // 8 and r.raw["validation"]["ok"]
    assert any(f.startswith(f"array_below_4x_llc: arrays 3 x {s['array_mib']} MiB: 4 x LLC (260 MiB, "
                            "IOLAB_FAKE_LLC) = 3 x 1040 MiB would not fit in the host's") for f in r.flags), r.flags
    assert r.metrics["triad_mb_s"] > 0
    print(f"negative control exit {res.returncode}; reduced: {s['reason']}")
