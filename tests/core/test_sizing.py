"""Sizing on other machines' facts: a 260 MiB L3, a 512 MiB guest, a full scratch disk.

The decisions are pure functions of the facts, so these tests pretend to be the machines
that broke the suite (issue 10: an Intel Xeon with 260 MiB of L3, guests of 512 MiB) without
owning them. The real runs with a faked cache are in tests/vm/test_stream_sizing.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from iolab.cgroups.executor import HostExecutor
from iolab.core import sizing
from iolab.core.sizing import Llc, Memory

MiB = 1 << 20
GiB = 1 << 30
XEON = Llc(260 * MiB, "sysfs")
EPYC = Llc(32 * MiB, "sysfs")

MEMINFO_512M_GUEST = """MemTotal:         485716 kB
MemFree:          330004 kB
MemAvailable:     318420 kB
Buffers:               0 kB
Cached:           120312 kB
SwapCached:            0 kB
SwapTotal:             0 kB
SwapFree:              0 kB
"""


def test_meminfo_parsed_in_bytes() -> None:
    m = sizing.parse_meminfo(MEMINFO_512M_GUEST, "guest")
    assert (m.total, m.available, m.swap_used, m.where) == (485716 * 1024, 318420 * 1024, 0, "guest")
    with_swap = sizing.parse_meminfo("MemTotal: 100 kB\nMemAvailable: 50 kB\nSwapTotal: 40 kB\nSwapFree: 10 kB\n")
    assert with_swap.swap_used == 30 * 1024
    with pytest.raises(ValueError, match="MemAvailable"):
        sizing.parse_meminfo("MemTotal: 100 kB\nMemFree: 50 kB\n", "guest")  # a kernel before 3.14


def test_large_cache_in_a_small_guest_is_reduced_and_says_why() -> None:
    guest = sizing.parse_meminfo(MEMINFO_512M_GUEST, "guest")
    s = sizing.stream_arrays(XEON, guest)
    assert s.wanted_mib == 1040 and s.reduced
    # 70 % of 311 MiB available, over three arrays
    assert s.array_mib == int(0.7 * 318420 * 1024) // 3 // MiB == 72
    assert 3 * s.array_mib * MiB <= guest.available
    assert s.reason.startswith("arrays 3 x 72 MiB: 4 x LLC (260 MiB) = 3 x 1040 MiB would not fit in the guest's")
    assert "311 MiB available" in s.reason and s.where == "guest"
    assert s.elements == 72 * MiB // 8


def test_large_cache_on_a_large_host_keeps_stream_rule() -> None:
    host = Memory(total=24 * GiB, available=23 * GiB)
    s = sizing.stream_arrays(XEON, host)
    assert (s.array_mib, s.reduced) == (1040, False)
    assert "fits in the host's" in s.reason
    assert sizing.stream_arrays(EPYC, host).array_mib == 128


def test_requested_size_is_honoured_when_it_fits_and_reduced_when_not() -> None:
    host = Memory(total=2 * GiB, available=1 * GiB)
    assert sizing.stream_arrays(EPYC, host, requested_mib=16).array_mib == 16
    big = sizing.stream_arrays(EPYC, host, requested_mib=4096)
    assert big.reduced and big.array_mib == int(0.7 * GiB) // 3 // MiB and "4096 MiB as the spec asks" in big.reason


def test_unknown_memory_keeps_the_rule_and_nothing_fits_is_an_error() -> None:
    assert sizing.stream_arrays(XEON, None).array_mib == 1040
    with pytest.raises(sizing.DoesNotFit, match="at least 1 MiB"):
        sizing.stream_arrays(XEON, Memory(total=8 * MiB, available=2 * MiB, where="guest"))


def test_guest_memory_holds_the_host_arrays_within_the_host() -> None:
    # Here (32 MiB L3): arrays of 128 MiB need 549 MiB + the guest's own 256: the 1 GiB floor.
    here = sizing.guest_memory_for(128, Memory(total=24 * GiB, available=23 * GiB))
    assert (here.bytes, here.reduced) == (1 * GiB, False)
    # The Xeon of issue 10: 3 x 1040 MiB / 0.7 + 256 MiB, rounded up to 256 MiB steps
    xeon = sizing.guest_memory_for(1040, Memory(total=24 * GiB, available=23 * GiB))
    assert xeon.bytes == 4864 * MiB and not xeon.reduced
    # ... and the guest then keeps the arrays: its MemAvailable is about memory - its own share
    inside = Memory(total=xeon.bytes, available=xeon.bytes - sizing.GUEST_BASE_BYTES, where="guest")
    assert not sizing.stream_arrays(XEON, inside).reduced
    # a host with 4 GiB available gives at most half of it; the guest's arrays are then reduced
    small = sizing.guest_memory_for(1040, Memory(total=6 * GiB, available=4 * GiB))
    assert small.bytes == 2 * GiB and small.reduced and "only 4096 MiB available" in small.reason


def test_guest_fits_and_space_problem_decide_both_ways() -> None:
    host = Memory(total=4 * GiB, available=3 * GiB)
    assert sizing.guest_fits(2 * GiB, host, "the guest") is None
    too_big = sizing.guest_fits(4 * GiB, host, "the performance guest (4g)")
    assert too_big and "needs 4096 MiB" in too_big and "3072 MiB available" in too_big
    assert sizing.space_problem(1 * GiB, 2 * GiB, "/s") is None
    full = sizing.space_problem(1 * GiB, 1 * GiB + 100 * MiB, "/s")
    assert full and "/s" in full and "IOLAB_SCRATCH" in full


def test_sysbench_block_is_a_power_of_two_at_least_the_array() -> None:
    assert sizing.pow2_at_least(1040 * MiB) == 2 * GiB
    assert sizing.pow2_at_least(128 * MiB) == 128 * MiB
    assert sizing.pow2_at_least(1) == 1 and sizing.pow2_at_least(3) == 4


def test_llc_from_sysfs_fake_and_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sizing.FAKE_LLC_ENV, raising=False)
    assert sizing.read_llc(tmp_path) == Llc(sizing.FALLBACK_LLC, "assumed")
    for i, size in enumerate(["32K", "1024K", "16384K", "garbage"]):
        (tmp_path / f"index{i}").mkdir()
        (tmp_path / f"index{i}" / "size").write_text(size + "\n")
    assert sizing.read_llc(tmp_path) == Llc(16 * MiB, "sysfs")
    monkeypatch.setenv(sizing.FAKE_LLC_ENV, "260M")
    assert sizing.read_llc(tmp_path) == Llc(260 * MiB, "IOLAB_FAKE_LLC")
    monkeypatch.setenv(sizing.FAKE_LLC_ENV, "lots")
    with pytest.raises(ValueError, match="IOLAB_FAKE_LLC='lots'"):
        sizing.read_llc(tmp_path)


def test_memory_where_reads_the_executors_meminfo() -> None:
    ex = HostExecutor()
    try:
        m = sizing.memory_where(ex)
    finally:
        ex.close()
    assert m is not None and m.where == "host"
    real = sizing.parse_meminfo(Path("/proc/meminfo").read_text())
    assert m.total == real.total and 0 < m.available <= m.total


def test_memory_cgroup_limits_bound_what_is_available() -> None:
    host = Memory(total=24 * GiB, available=23 * GiB)
    no_limit = sizing.apply_cgroup_limits(host, "@@limit 9223372036854771712 1000\n@@limit max 5\n")
    assert no_limit == host
    limited = sizing.apply_cgroup_limits(host, f"x\n@@limit {2 * GiB} {GiB // 2}\n@@limit {4 * GiB} 0\n")
    assert limited.available == GiB + GiB // 2 and limited.bound == "memory cgroup limit 2048 MiB"
    over = sizing.apply_cgroup_limits(host, f"@@limit {GiB} {2 * GiB}\n")  # usage above the limit
    assert over.available == 0
    # the smaller of MemAvailable and the limit's headroom wins
    tight = Memory(total=24 * GiB, available=GiB)
    assert sizing.apply_cgroup_limits(tight, f"@@limit {8 * GiB} 0\n") == tight
