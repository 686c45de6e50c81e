"""The qemu_syscalls probe's pure parsers, on output captured from real strace and real QEMU.

Every fixture in tests/vm/data/ was produced on a Debian 12 host (strace 6.1, QEMU 7.2) by
the commands in tests/vm/data/README.md; the expected counts below were checked against
an independent `grep -c` of the same files and against what the captured programs did.
"""

from __future__ import annotations

from pathlib import Path

from iolab.probes.qemu_syscalls import (
    TRACE_EVENTS,
    causes_from_events,
    count_trace_events,
    parse_strace_summary,
    probe_counts,
)
from iolab.studies.sync_amplification.analysis import trial_counts

DATA = Path(__file__).parent / "data"


def _read(name: str) -> str:
    return (DATA / name).read_text()


# ---------------------------------------------------------------- strace -c

def test_strace_summary_known_program() -> None:
    """gen_syscalls.py: 5 pwrite64 + 5 fdatasync in a thread (-f), 4 pwritev2, 2 fsync + 4 failing fsync."""
    calls = parse_strace_summary(_read("strace-c-known.txt"))
    # failed calls are calls (the errors column is optional and must not shift the name)
    assert calls == {"fdatasync": 5, "pwritev2": 4, "fsync": 6, "pwrite64": 5}
    assert "total" not in calls


def test_strace_summary_qemu_io_threads() -> None:
    """qemu-io, qcow2, aio=threads: 3 writes (2 allocating) + 3 flushes -> 8 fdatasync, 10 pwrite64."""
    assert parse_strace_summary(_read("strace-c-qemu-io-threads.txt")) == {"pwrite64": 10, "fdatasync": 8}


def test_strace_summary_qemu_io_native() -> None:
    """The same image operations with aio=native: writes (and the one read) go through io_submit, flushes
    still through a worker thread's fdatasync; one pwrite64 stays synchronous (as with io_uring)."""
    calls = parse_strace_summary(_read("strace-c-qemu-io-native.txt"))
    assert calls == {"io_submit": 10, "fdatasync": 8, "pwrite64": 1}
    out = probe_counts(calls, None)
    assert out["host_fdatasync_total"] == 8 and out["host_pwrite"] == 1
    assert out["host_io_submit"] == 10 and out["host_write_requests"] == 11


def test_strace_summary_empty() -> None:
    """strace -c writes nothing at all when none of the traced syscalls happened."""
    assert _read("strace-c-none.txt") == ""
    assert parse_strace_summary("") == {}


def test_strace_summary_ignores_header_rules_and_total() -> None:
    text = _read("strace-c-qemu-io-threads.txt")
    header = [ln for ln in text.splitlines() if ln.startswith(("%", "---"))]
    assert len(header) == 3 and parse_strace_summary("\n".join(header)) == {}
    total = [ln for ln in text.splitlines() if ln.rstrip().endswith("total")]
    assert total and parse_strace_summary(total[0]) == {}


# ---------------------------------------------------------------- QEMU trace events (log backend)

def test_trace_events_qemu_io_uring() -> None:
    """qemu-io -i io_uring, every qcow2_* event on: only the counted events, split by cache and request type."""
    ev = count_trace_events(_read("trace-qemu-io-qcow2-io_uring.log"))
    assert ev == {
        "qcow2_writev_start_req": 3,            # 3 guest writes
        "qcow2_handle_alloc": 2,                # clusters 0 and 1 allocated, the rewrite of 0 is not
        "qcow2_l2_allocate": 1,                 # the first L2 table (qcow2_l2_allocate_* are other events)
        "qcow2_cache_entry_flush_l2": 3,
        "qcow2_cache_entry_flush_refcount": 3,
        "qcow2_cache_flush_l2": 6,
        "qcow2_cache_flush_refcount": 8,
        "luring_flush": 8,                      # type 8 = QEMU_AIO_FLUSH: the host syncs
        "luring_write": 9,                      # type 2 = QEMU_AIO_WRITE
        "luring_other": 1,                      # type 1 = a read (of the refcount block)
    }
    # the same image operations with aio=threads made exactly as many fdatasync syscalls
    assert ev["luring_flush"] == parse_strace_summary(_read("strace-c-qemu-io-threads.txt"))["fdatasync"]


def test_trace_events_with_pid_timestamp_prefix() -> None:
    """qemu-system-x86_64 -msg timestamp=on prefixes 'pid@sec.usec:'; the event name must still be found."""
    text = _read("trace-qemu-system-timestamps.log")
    assert all("@" in ln.split(":")[0] for ln in text.splitlines())
    assert count_trace_events(text) == {"qcow2_cache_flush_l2": 3, "qcow2_cache_flush_refcount": 3}


# What the live probe recorded for the three trials in trace-guest-qcow2-threads.log, and
# where each trial's lines end in the file (a trial's events are contiguous).
GUEST_TRIALS = [
    ("append", 224, {"qcow2_writev_start_req": 32, "qcow2_handle_alloc": 32, "qcow2_cache_entry_flush_l2": 32,
                     "qcow2_cache_entry_flush_refcount": 32, "qcow2_cache_flush_l2": 32,
                     "qcow2_cache_flush_refcount": 64}),
    ("overwrite", 320, {"qcow2_writev_start_req": 32, "qcow2_cache_flush_l2": 32, "qcow2_cache_flush_refcount": 32}),
    ("sequential", 544, {"qcow2_writev_start_req": 32, "qcow2_handle_alloc": 32, "qcow2_cache_entry_flush_l2": 32,
                         "qcow2_cache_entry_flush_refcount": 32, "qcow2_cache_flush_l2": 32,
                         "qcow2_cache_flush_refcount": 64}),
]


def test_trace_events_real_guest_stderr() -> None:
    """A guest's QEMU stderr (qcow2, cache=none, aio=threads) over three sync-writes trials of 32 writes.

    append and sequential allocate one cluster per write (32 refcount block writes, 64
    refcount-cache flushes: one ordering flush + the guest's), overwrite allocates nothing.
    """
    lines = _read("trace-guest-qcow2-threads.log").splitlines(keepends=True)
    assert len(lines) == GUEST_TRIALS[-1][1]
    start = 0
    for pattern, end, expected in GUEST_TRIALS:
        assert count_trace_events("".join(lines[start:end])) == expected, pattern
        start = end
    total = count_trace_events("".join(lines))
    assert total["qcow2_handle_alloc"] == 64 and total["qcow2_writev_start_req"] == 96
    assert not any(k.startswith("luring") for k in total)  # aio=threads: no io_uring submissions


def test_trace_events_ignore_unrelated_lines() -> None:
    text = ("qemu-system-x86_64: warning: host doesn't support requested feature\n"
            "qcow2_cache_flush_something co 0x1 is_l2_cache 1\n"     # a longer event name
            "luring_co_submit_done bs 0x1 type 8\n"
            "  qcow2_handle_alloc co 0x1 guest_offset 0x0 host_offset 0x0 bytes 0x10000  \n"
            "xqcow2_handle_alloc co 0x1\n")
    assert count_trace_events(text) == {"qcow2_handle_alloc": 1}


def test_every_counted_event_is_enabled() -> None:
    """count_trace_events can only count what the probe switches on over QMP."""
    ev = count_trace_events(_read("trace-qemu-io-qcow2-io_uring.log"))
    base = {k.removesuffix("_l2").removesuffix("_refcount") for k in ev if not k.startswith("luring")}
    assert base <= set(TRACE_EVENTS)
    assert "luring_co_submit" in TRACE_EVENTS


# ---------------------------------------------------------------- from parsed counts to the probe result

def test_causes_from_events() -> None:
    causes = causes_from_events(count_trace_events(_read("trace-qemu-io-qcow2-io_uring.log")))
    assert causes == {"l2_table_allocations": 1, "cluster_allocations": 2, "l2_table_writes": 3,
                      "refcount_block_writes": 3, "l2_cache_flushes": 6, "refcount_cache_flushes": 8}
    assert set(causes_from_events({}).values()) == {0}


def test_probe_counts_io_uring_flushes_are_host_syncs() -> None:
    """aio=io_uring: no fdatasync syscall at all, yet 8 host syncs (the ring's flushes)."""
    ev = count_trace_events(_read("trace-qemu-io-qcow2-io_uring.log"))
    out = probe_counts({"io_uring_enter": 18, "pwrite64": 1}, ev)
    assert out["host_fdatasync"] == 0 and out["host_fsync"] == 0
    assert out["io_uring_flushes"] == 8 and out["io_uring_counted"] is True
    assert out["host_fdatasync_total"] == 8
    assert out["host_pwrite"] == 1 and out["io_uring_writes"] == 9 and out["host_write_requests"] == 10
    assert out["causes"]["cluster_allocations"] == 2


def test_probe_counts_syscalls_only() -> None:
    calls = parse_strace_summary(_read("strace-c-known.txt"))
    out = probe_counts(calls, None)
    assert out["host_fdatasync_total"] == 5 + 6  # fdatasync + fsync (failed calls included)
    assert out["host_pwrite"] == 9 and out["host_write_requests"] == 9
    assert out["io_uring_counted"] is False and "causes" not in out


def test_trial_counts_reads_every_layer() -> None:
    """The study's per-trial row takes each layer from its own probe."""
    ev = count_trace_events(_read("trace-qemu-io-qcow2-io_uring.log"))
    trial = {"metrics": {"guest_syncs": 3.0, "guest_writes": 3.0, "guest_dsync_writes": 0.0},
             "probes": {"guest_disk": {"flushes": 3, "writes": 3},
                        "qmp_blockstats": {"flush_operations": 3, "wr_operations": 3},
                        "qemu_syscalls": probe_counts({"pwrite64": 1}, ev),
                        "host_disk": {"writes": 12, "flushes": 11}}}
    c = trial_counts(trial)
    assert (c["guest_fdatasync"], c["guest_flushes"], c["qemu_flush_ops"]) == (3.0, 3, 3)
    assert (c["host_fdatasync"], c["host_io_uring_flushes"], c["host_write_requests"]) == (8, 8, 10)
    assert (c["host_writes"], c["host_device_flushes"]) == (12, 11)
    assert trial_counts({"metrics": {}, "probes": {}})["host_fdatasync"] is None


# ---------------------------------------------------------------- the recommendation table's measured cells

def _amp_row(fmt: str, pattern: str, factor: float, **opts: object) -> dict:
    from iolab.studies.sync_amplification.spec import DEFAULTS
    return {"format": fmt, "pattern": pattern, "guest_fs": "none", "options": dict(DEFAULTS, **opts),
            "factor_host_syncs": factor, "factor_device_flushes": factor + 1}


def test_measured_recommendations_pair_variant_with_its_baseline() -> None:
    from iolab.studies.sync_amplification.analysis import measured_recommendations

    amp = [_amp_row("raw", "append", 1.0), _amp_row("qcow2", "append", 2.0),
           _amp_row("qcow2", "append", 1.0, lazy_refcounts=True), _amp_row("qcow2", "overwrite", 1.0, cache="unsafe"),
           _amp_row("raw", "append", 1.0, aio="io_uring"), _amp_row("qcow2", "append", 2.0, aio="io_uring")]
    recs = {r["configuration"]: r["measured"] for r in measured_recommendations(amp)}
    (raw,) = recs["raw format (instead of qcow2)"]
    assert (raw["baseline"], raw["configuration"], raw["baseline_factor_host_syncs"], raw["factor_host_syncs"]) == \
        ("qcow2", "raw", 2.0, 1.0)
    assert raw["host_syncs_vs_baseline"] == 0.5
    (lazy,) = recs["qcow2 lazy_refcounts=on"]
    assert lazy["configuration"] == "qcow2 lazy_refcounts" and lazy["baseline_factor_host_syncs"] == 2.0
    assert recs["cache=unsafe"] == []  # no plain qcow2 overwrite in this run: no baseline, no claim
    assert recs["qcow2 preallocation=full"] == []
    uring = {m["configuration"]: m["baseline"] for m in recs["aio=io_uring"]}
    assert uring == {"qcow2 aio=io_uring": "qcow2", "raw aio=io_uring": "raw"}
