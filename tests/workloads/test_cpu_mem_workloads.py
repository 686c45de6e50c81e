"""The CPU and memory workloads of the vm-profile study (R5): primes, sysbench-cpu, stream.

Real runs on the host through a HostExecutor placement (the same code path a guest takes,
minus the agent), a few fakes for the failure paths, and the memory kernel checked against
a second method (sysbench's memory test).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError
from tests.statcheck import Band, check, repeat_until_decided

from iolab.cgroups.executor import HostExecutor
from iolab.core import sizing
from iolab.core.errors import SpecError, TrialFailed
from iolab.core.exec import ExecRequest, ExecResult, Executor, Running
from iolab.native import build
from iolab.spec.study import from_dict
from iolab.targets.base import Placement
from iolab.workloads.base import WorkloadResult
from iolab.workloads.primes import KNOWN_PI, PrimesParams, PrimesWorkload
from iolab.workloads.stream import StreamParams, StreamWorkload
from iolab.workloads.sysbench_cpu import SysbenchCpuParams, SysbenchCpuWorkload, contention_flags

needs_sysbench = pytest.mark.skipif(shutil.which("sysbench") is None,
                                    reason="sysbench not installed (apt-get install sysbench)")


@pytest.fixture(scope="module")
def placement() -> Iterator[Placement]:
    ex = HostExecutor()
    yield Placement(executor=ex)
    ex.close()


class FakeExecutor(Executor):
    """Answers every request with the given result (or raises), to reach failure paths."""

    name = "fake"

    def __init__(self, answer: ExecResult | Exception):
        self.answer = answer
        self.requests: list[ExecRequest] = []

    def spawn(self, req: ExecRequest) -> Running:
        self.requests.append(req)
        answer = self.answer

        class _Done(Running):
            def wait(self) -> ExecResult:
                if isinstance(answer, Exception):
                    raise answer
                return answer

            def kill(self) -> None:
                pass

        return _Done()


def fake(stdout: str = "", returncode: int = 0, stderr: str = "") -> Placement:
    """A placement whose executor answers every command with this result (a guest's view)."""
    return Placement(executor=FakeExecutor(_res(stdout, returncode, stderr)), extras={"native_helpers": {
        "iolab_primes": "/usr/libexec/iolab/iolab_primes", "iolab_stream": "/usr/libexec/iolab/iolab_stream"}})


# --- build --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["iolab_primes", "iolab_stream"])
def test_source_compiles_warning_free(name: str, tmp_path: Path) -> None:
    out = build.compile_helper(name, tmp_path / name, build.STRICT_CFLAGS)
    assert os.access(out, os.X_OK)


# --- primes -------------------------------------------------------------------------------

def test_primes_counts_and_times(placement: Placement) -> None:
    wl = PrimesWorkload(PrimesParams())
    assert wl.main_metric == "primes_1e8_s"
    best: dict[str, float] = {}
    for _ in range(3):  # the minimum of three: a preemption on a busy machine must not reorder them
        r = wl.run(placement, timeout_s=60)
        assert [(x["limit"], x["count"]) for x in r.raw["results"]] == \
            [(10**6, 78498), (10**7, 664579), (10**8, 5761455)]
        assert all(x["verified"] for x in r.raw["results"])
        assert set(r.metrics) == {"primes_1e6_s", "primes_1e7_s", "primes_1e8_s"}
        for k, v in r.metrics.items():
            best[k] = min(best.get(k, v), v)
    assert 0 < best["primes_1e6_s"] < best["primes_1e7_s"] < best["primes_1e8_s"]


def test_primes_small_and_unknown_limits(placement: Placement) -> None:
    limits = [2, 3, 10, 1234, 10**5]
    r = PrimesWorkload(PrimesParams(limits=limits)).run(placement, timeout_s=30)
    sieve = [True] * 1234
    for i in range(2, 36):
        sieve[i * i::i] = [False] * len(sieve[i * i::i])
    counts = {x["limit"]: x["count"] for x in r.raw["results"]}
    assert counts == {2: 0, 3: 1, 10: 4, 1234: sum(sieve[2:]), 10**5: KNOWN_PI[10**5]}
    assert {x["limit"]: x["verified"] for x in r.raw["results"]}[1234] is False  # only reported
    assert set(r.metrics) == {"primes_2_s", "primes_3_s", "primes_1e1_s", "primes_1234_s", "primes_1e5_s"}
    assert PrimesWorkload(PrimesParams(limits=[10**6, 25 * 10**5])).main_metric == "primes_25e5_s"


def test_primes_wrong_count_fails_the_trial() -> None:
    out = json.dumps({"results": [{"limit": 10**6, "count": 78497, "seconds": 0.01}]})
    with pytest.raises(TrialFailed, match="counted wrong.*78497.*78498"):
        PrimesWorkload(PrimesParams(limits=[10**6])).run(fake(out), timeout_s=10)
    with pytest.raises(TrialFailed, match="exit 1.*out of memory"):
        PrimesWorkload(PrimesParams(limits=[10**6])).run(
            fake(returncode=1, stderr="iolab_primes: out of memory"), timeout_s=10)


# --- sysbench-cpu -------------------------------------------------------------------------

@needs_sysbench
def test_sysbench_cpu_one_thread_and_one_per_cpu(placement: Placement) -> None:
    nproc = int(subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout)
    one = SysbenchCpuWorkload(SysbenchCpuParams(threads=1, time=2)).run(placement, timeout_s=30)
    assert one.metrics["events_per_s"] > 0 and one.metrics["threads"] == 1
    assert one.job_text == "sysbench cpu --cpu-max-prime=10000 --threads=1 --time=2 run"
    allc = SysbenchCpuWorkload(SysbenchCpuParams(threads=0, time=2)).run(placement, timeout_s=30)
    assert allc.metrics["events_per_s"] > 0
    assert allc.metrics["threads"] == nproc == allc.metrics["cpus"]
    assert f"--threads={nproc}" in allc.job_text
    assert not [f for f in allc.flags if not f.startswith("cpu_contended")]


def _res(stdout: str = "", returncode: int = 0, stderr: str = "") -> ExecResult:
    return ExecResult(argv=[], returncode=returncode, stdout=stdout, stderr=stderr, wall_s=2.0,
                      cpu_user_s=1.9, cpu_sys_s=0.1)


class ByProgram(FakeExecutor):
    """Answers by the program's name (nproc, sysbench, ...)."""

    def __init__(self, answers: dict[str, ExecResult | Exception]):
        super().__init__(_res())
        self.answers = answers

    def spawn(self, req: ExecRequest) -> Running:
        self.answer = self.answers[req.argv[0]]
        return super().spawn(req)


def test_sysbench_missing_is_a_clear_failure() -> None:
    wl = SysbenchCpuWorkload(SysbenchCpuParams(threads=1, time=1))
    # host: the executor cannot exec a missing program
    missing = FileNotFoundError(2, "No such file or directory", "sysbench")
    with pytest.raises(TrialFailed, match="sysbench is not installed.*apt-get install sysbench"):
        wl.run(Placement(executor=ByProgram({"nproc": _res("4\n"), "sysbench": missing})), timeout_s=10)
    # guest agent: exit status 127
    guest = ByProgram({"nproc": _res("4\n"), "sysbench": _res(returncode=127, stderr="exec: not found")})
    with pytest.raises(TrialFailed, match="sysbench is not installed"):
        wl.run(Placement(executor=guest), timeout_s=10)


def test_sysbench_more_threads_than_cpus_is_flagged() -> None:
    out = ("Number of threads: 8\nCPU speed:\n    events per second:  1234.50\n\nGeneral statistics:\n"
           "    total time:                          2.0004s\n    total number of events:              2469\n")
    ex = ByProgram({"nproc": _res("2\n"), "sysbench": _res(out)})
    r = SysbenchCpuWorkload(SysbenchCpuParams(threads=8, time=2)).run(Placement(executor=ex), 10)
    assert r.metrics == {"events_per_s": 1234.5, "threads": 8.0, "total_events": 2469.0, "cpus": 2.0}
    assert any(f.startswith("threads_exceed_cpus: 8 threads on 2 CPUs") for f in r.flags)
    # 2.0 CPU seconds in 2 s wall on 2 usable CPUs: half of them went elsewhere
    assert any(f.startswith("cpu_contended: the generator got 1.00 CPUs of the 2") for f in r.flags)
    with pytest.raises(TrialFailed, match="no 'events per second'"):
        SysbenchCpuWorkload(SysbenchCpuParams(threads=8, time=2)).run(
            Placement(executor=ByProgram({"nproc": _res("2\n"), "sysbench": _res("FATAL: x")})), 10)


# --- stream -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def stream_result(placement: Placement) -> WorkloadResult:
    return StreamWorkload(StreamParams()).run(placement, timeout_s=120)


def test_stream_validates_and_sizes_from_the_llc(stream_result) -> None:
    r = stream_result
    llc = sizing.read_llc()
    assert llc.source == "sysfs", "this machine shows no cache sizes in sysfs"
    assert r.raw["validation"]["ok"] is True
    assert r.raw["bytes_per_array"] >= 4 * llc.bytes
    assert r.raw["bytes_per_array"] == -(-4 * llc.bytes // (1 << 20)) << 20
    # what it chose and why, in the raw output and for the trial manifest
    assert r.raw["sizing"]["reduced"] is False and r.raw["sizing"]["where"] == "host"
    assert r.raw["sizing"]["reason"].startswith(f"arrays 3 x {r.raw['bytes_per_array'] >> 20} MiB: 4 x LLC")
    assert r.manifest == {"sizing": r.raw["sizing"]}
    assert r.raw["ntimes"] == 10 and r.raw["mb"] == 10**6
    assert "STREAM" in r.raw["variant"] and "not STREAM's source" in r.raw["variant"]
    for k, nbytes in (("copy", 16), ("scale", 16), ("add", 24), ("triad", 24)):
        kern = r.raw["kernels"][k]
        assert kern["bytes_per_iteration"] == nbytes * r.raw["elements"]
        assert kern["min_s"] <= kern["avg_s"] <= kern["max_s"]
        assert r.metrics[f"{k}_mb_s"] == pytest.approx(nbytes * r.raw["elements"] / kern["min_s"] / 1e6, rel=1e-3)
    assert not any(f.startswith(("array_below_4x_llc", "memory_unknown", "llc_unknown")) for f in r.flags)


def _sysbench_memory_read(placement: Placement, block: int) -> tuple[float, list[str]]:
    """sysbench's memory test, one thread, sequential reads over one block `block` bytes big,
    in MB/s (sysbench prints MiB/sec), through the same executor as STREAM; and its
    contention flags (the same rule as the CPU and memory workloads)."""
    argv = ["sysbench", "memory", f"--memory-block-size={block}", f"--memory-total-size={16 * block}",
            "--memory-oper=read", "--memory-access-mode=seq", "--threads=1", "--time=20", "run"]
    res = placement.executor.run(ExecRequest(argv=argv, timeout_s=60))
    assert res.returncode == 0, res.tail()
    m = re.search(r"transferred \(([0-9.]+) MiB/sec\)", res.stdout)
    assert m, res.stdout
    return float(m.group(1)) * (1 << 20) / 1e6, contention_flags(res, 1)


def sysbench_block(array_bytes: int, mem: sizing.Memory | None) -> int:
    """sysbench accepts only power-of-two blocks (sb_memory.c, memory_init): the next one up
    from a STREAM array (still >= 4x LLC), unless that does not fit where it runs; then the
    one below."""
    up = sizing.pow2_at_least(array_bytes)
    if mem is None or up <= sizing.STREAM_MEM_SHARE * mem.available:
        return up
    return up // 2


# Triad and Copy bandwidth (as STREAM counts it) over sysbench's sequential read bandwidth.
# STREAM counts 24 (Triad) / 16 (Copy) bytes per element, but with write-allocate the memory
# moves 32 / 24: counted = 0.75 / 0.67 of the traffic, or 1.0 where the stores bypass the
# cache (non-temporal). Stores stream slower than loads on one thread (sysbench write ~0.8x
# read here), which takes Copy, half of whose moved bytes are stores, to ~0.55 (measured
# 0.52..0.8 here). Several streams at once (Triad reads two arrays) get more single-thread
# bandwidth than sysbench's one scalar read stream: each stream is prefetched on its own, so a
# latency-bound server core keeps more lines in flight. On a Xeon with a 260 MiB L3, another
# core busy, that reached 1.74 (Triad) and 1.56 (Copy) counted over read, 2.3x in moved bytes
# (ci5 failed on the old upper edge, 1.6, with no confounder to flag). Hence the bands below,
# whose upper edges stay under what a broken kernel gives: cache-resident arrays run 3x or
# more faster, a doubled byte count lands at 2.6..3.5, a kernel the compiler dropped is off by
# orders of magnitude.
STREAM_OVER_SYSBENCH = {
    "triad": Band(0.6, 2.4, "24 counted of 32 moved bytes, 1.0 without write-allocate; three prefetched streams "
                            "against one scalar read stream: up to ~2.3x its bandwidth (1.74 seen)"),
    "copy": Band(0.35, 2.4, "16 counted of 24 moved bytes, stores slower than loads: ~0.55; two prefetched "
                            "streams against one scalar read stream: up to ~2.3x (1.56 seen)"),
}


@needs_sysbench
@pytest.mark.whole_machine  # memory bandwidth of two programs compared: a ratio
def test_stream_bandwidth_agrees_with_sysbench_memory(placement: Placement) -> None:
    # Second method, measured like a study: STREAM and sysbench in pairs, alternating which
    # runs first (drift of the machine cancels within a pair), the ratio per pair, repeated
    # until its 95 % CI is decided against the band above (3..8 pairs). Both sides carry
    # the workloads' cpu_contended flag: on a busy machine the test checks that it was raised.
    mem = sizing.memory_where(placement.executor)
    # Sized by what the cross-check proves: both tools stream from memory, not cache. Each array
    # a quarter above the last-level cache (three of them: 3.75x the cache in play) is out of the
    # cache already; STREAM's own 4x rule (the default, tested above) would make every pair 3x
    # longer (3 x 1200 MiB on a 300 MiB L3) without changing what this test shows.
    wl = StreamWorkload(StreamParams(array_mib=-(-sizing.read_llc().bytes * 5 // 4 // (1 << 20))))
    flags: list[str] = []

    def pair(i: int) -> dict[str, float]:
        def stream() -> WorkloadResult:
            r = wl.run(placement, timeout_s=120)
            flags.extend(f for f in r.flags if f.startswith("cpu_contended"))
            return r

        def sysbench(block: int) -> float:
            mb_s, fl = _sysbench_memory_read(placement, block)
            flags.extend(fl)
            return mb_s

        if i % 2 == 0:
            r = stream()
            read = sysbench(sysbench_block(r.raw["bytes_per_array"], mem))
        else:
            read = sysbench(sysbench_block(wl.sizing(mem)[0].array_mib << 20, mem))
            r = stream()
        assert not r.raw["sizing"]["reduced"], r.raw["sizing"]["reason"]
        # STREAM's rate over its counted iterations on average, not its best one: sysbench's figure
        # is its whole run's bytes over its whole run's time, and the best of 9 short iterations
        # dodges the moments a neighbour takes the memory bus while sysbench's average cannot (the
        # one loaded parallel run: best copy 35-40 GB/s against sysbench 11-13, ratio 2.5 [1.9,
        # 3.2], no CPU contention to flag). Mean against mean is the like-for-like comparison.
        mean = {k: r.raw["kernels"][k]["bytes_per_iteration"] / r.raw["kernels"][k]["avg_s"] / 1e6
                for k in STREAM_OVER_SYSBENCH}
        print(f"pair {i + 1}: triad {mean['triad']:.0f} (best {r.metrics['triad_mb_s']:.0f}), copy "
              f"{mean['copy']:.0f} (best {r.metrics['copy_mb_s']:.0f}), sysbench read {read:.0f} MB/s")
        return {k: mean[k] / read for k in STREAM_OVER_SYSBENCH}

    ratios = repeat_until_decided(pair, STREAM_OVER_SYSBENCH, max_reps=8)
    for k, band in STREAM_OVER_SYSBENCH.items():
        check(f"stream {k} / sysbench memory read", ratios[k], band, flags)


def test_stream_small_arrays_are_flagged(placement: Placement) -> None:
    r = StreamWorkload(StreamParams(array_mib=1, ntimes=2)).run(placement, timeout_s=30)
    assert r.raw["validation"]["ok"] and r.raw["elements"] == (1 << 20) // 8
    assert any(f.startswith("array_below_4x_llc: 1 MiB per array") for f in r.flags)


def test_stream_validation_failure_fails_the_trial() -> None:
    wl = StreamWorkload(StreamParams(array_mib=1, ntimes=2))
    kern = {"best_mb_s": 1.0, "avg_s": 1.0, "min_s": 1.0, "max_s": 1.0}
    out = json.dumps({"elements": (1 << 20) // 8, "kernels": {k: kern for k in ("copy", "scale", "add", "triad")},
                      "validation": {"ok": False, "epsilon": 1e-13, "avg_rel_err": {"a": 0.5, "b": 0, "c": 0}}})
    with pytest.raises(TrialFailed, match="failed validation"):
        wl.run(fake(out, returncode=3), timeout_s=10)
    with pytest.raises(TrialFailed, match="out of memory"):
        wl.run(fake(returncode=1, stderr="iolab_stream: out of memory: 402653184 bytes"), timeout_s=10)


def test_stream_without_cache_info_assumes_and_flags(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sizing, "CACHE_DIR", tmp_path)
    monkeypatch.delenv(sizing.FAKE_LLC_ENV, raising=False)
    wl = StreamWorkload(StreamParams())
    s, flags = wl.sizing()
    assert s.llc.bytes == 32 << 20 and s.elements * 8 == 128 << 20 and flags[0].startswith("llc_unknown")
    for i, size in enumerate(["32K", "1024K", "16384K"]):
        (tmp_path / f"index{i}").mkdir()
        (tmp_path / f"index{i}" / "size").write_text(size + "\n")
    s, flags = wl.sizing()
    assert (s.elements, s.llc.bytes, flags) == (64 << 20 >> 3, 16 << 20, [])
    assert StreamWorkload(StreamParams(array_mib=63)).sizing()[1][0].startswith("array_below_4x_llc")


# --- parameters ---------------------------------------------------------------------------

@pytest.mark.parametrize("cls, bad, field", [
    (StreamParams, {"ntimes": 1}, "ntimes"),
    (StreamParams, {"array_mib": 0}, "array_mib"),
    (StreamParams, {"size": 5}, "size"),
    (SysbenchCpuParams, {"threads": -1}, "threads"),
    (SysbenchCpuParams, {"time": 0}, "time"),
    (SysbenchCpuParams, {"time": "1.5s"}, "time"),
    (PrimesParams, {"limits": []}, "limits"),
    (PrimesParams, {"limits": [1]}, "limits"),
    (PrimesParams, {"limits": [10**6, 10**6]}, "limits"),
    (PrimesParams, {"limits": [10**11]}, "limits"),
])
def test_bad_params_are_clear_errors(cls, bad, field) -> None:
    with pytest.raises(ValidationError) as exc:
        cls(**bad)
    assert exc.value.errors()[0]["loc"][0] == field


def test_specs_plug_in_and_lists_are_not_axes() -> None:
    doc = {"study": {"name": "cpumem"}, "target": {"kind": "host"},
           "workloads": [{"name": "p", "kind": "primes", "limits": [10**6, 10**7]},
                         {"name": "s", "kind": "sysbench-cpu", "threads": [1, 0], "time": 2},
                         {"name": "m", "kind": "stream", "ntimes": 3}]}
    spec = from_dict(doc, "test")
    assert len(spec.configs) == 4  # primes 1 (limits is one value) + sysbench 2 + stream 1
    bad = dict(doc, workloads=[{"name": "m", "kind": "stream", "ntimes": 1}])
    with pytest.raises(SpecError, match=r"ntimes"):
        from_dict(bad, "test")
