"""Parsers and the sampler's arithmetic, without touching the kernel."""

from __future__ import annotations

import time

import pytest

from iolab.cgroups import detect
from iolab.cgroups.base import parse_weight
from iolab.cgroups.counters import IoCounters, from_v1, from_v2, parse_rwstat
from iolab.cgroups.sampler import Sampler

RWSTAT = """7:0 Read 48362
7:0 Write 5
7:0 Sync 48367
7:0 Async 0
7:0 Discard 0
7:0 Total 48367
254:0 Read 9
Total 48376
"""
BYTES = RWSTAT.replace("48362", "198090752").replace("Write 5", "Write 20480")


def test_parse_weight_v1_and_v2_forms() -> None:
    assert parse_weight("300\n") == 300
    assert parse_weight("default 300\n8:0 500\n") == 300


def test_rwstat_filtered_to_device() -> None:
    assert parse_rwstat(RWSTAT, "7:0")["read"] == 48362
    assert parse_rwstat(RWSTAT, "254:0") == {"read": 9}
    c = from_v1(RWSTAT, BYTES, "7:0")
    assert c == IoCounters(rios=48362, wios=5, rbytes=198090752, wbytes=20480)
    assert from_v1("Total 0\n", "Total 0\n", "7:0") is None  # not accounted (yet)


def test_iostat_filtered_to_device() -> None:
    text = "7:1 rbytes=1 wbytes=0 rios=1 wios=0 dbytes=0 dios=0\n7:0 rbytes=8192 rios=2\n"
    assert from_v2(text, "7:0") == IoCounters(rios=2, rbytes=8192)
    assert from_v2(text, "8:0") == IoCounters()


def test_counter_difference() -> None:
    assert (IoCounters(rios=10, rbytes=40) - IoCounters(rios=4, rbytes=16)).ios == 6


def test_mounts_parse_hybrid() -> None:
    text = ("cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n"
            "cgroup /sys/fs/cgroup/blkio cgroup rw,relatime,blkio 0 0\n"
            "cgroup2 /nonexistent/unified cgroup2 rw,relatime 0 0\n")
    m = detect.mounts(text)
    assert str(m.v1_blkio) == "/sys/fs/cgroup/blkio" and str(m.v2) == "/nonexistent/unified"
    assert m.v2_controllers == [] and not m.v2_io


def test_sampler_series_rates_and_shares() -> None:
    state = {"n": 0}

    def read() -> dict[str, IoCounters]:
        state["n"] += 1
        return {"a": IoCounters(rios=100 * state["n"]), "b": IoCounters(rios=300 * state["n"])}

    s = Sampler(read, interval_s=0.05)
    s.start()
    time.sleep(0.3)
    series = s.stop()
    assert len(series.t) >= 4 and series.t == sorted(series.t)
    for _t, share in series.shares():
        assert share["b"] == pytest.approx(0.75)
    assert series.window_ratio(0, -1, "a")["b"] == pytest.approx(3.0)
    assert set(series.to_dict()) == {"t", "counters"}


def test_sampler_surfaces_reader_errors() -> None:
    calls = {"n": 0}

    def read() -> dict[str, IoCounters]:
        calls["n"] += 1
        if calls["n"] > 1:
            raise OSError("gone")
        return {}

    s = Sampler(read, interval_s=0.01)
    s.start()
    time.sleep(0.05)
    with pytest.raises(RuntimeError, match="sampler failed"):
        s.stop()
