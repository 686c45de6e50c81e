"""What each confounder flag means and what to do about it, and the measured detail behind it.

A flag is "name: measured detail" (e.g. "generator_cpu_bound: fio used 0.98 cores for 1
process(es)"). The detail says what was seen in this trial; the catalogue below says, once,
what that does to the number beside it and what to change. Reports show both, so no flag
reaches a reader as a bare name.
"""

from __future__ import annotations

from collections import defaultdict

from iolab.analysis.record import Record
from iolab.analysis.trials import Trial

# name -> (what it does to the number, what to do)
CATALOGUE: dict[str, tuple[str, str]] = {
    "generator_cpu_bound": ("the load generator used a whole CPU: the number may measure fio, not the storage",
                            "fewer, deeper jobs (iodepth) or a faster CPU; compare with machine_cpu"),
    "cpu_saturated": ("every CPU was busy: the generator may have waited for a CPU",
                      "run on a quiet machine or with fewer processes"),
    "cpu_contended": ("the generator got clearly less CPU than it could use: other load on the machine (or steal)",
                      "look for other processes (iolab doctor lists the top consumers) and rerun"),
    "disk_shared": ("the disk under the target's loop device moved clearly more than the trial did: other "
                    "processes' I/O (or writeback of an earlier trial's data through a buffered loop) shared it, "
                    "and the number may be slower and noisier for it",
                    "rerun with the disk to itself (IOLAB_SCRATCH on a disk nothing else writes to), or compare "
                    "trials with and without the flag"),
    "reads_hit_page_cache": ("reads were served from memory, not from the device",
                             "direct=true, or a working set much larger than RAM, or drop_caches"),
    "mode_not_effective": ("the write mode asked for did not take effect (e.g. O_DIRECT was cached)",
                           "use a filesystem that honours the mode (not tmpfs), check the flags"),
    "fleet_partial": ("some fleet hosts failed in this trial: the aggregate covers fewer hosts than the fleet",
                      "read each failed host's reason (workload_facts.fleet_failed_hosts) and rerun or drop it"),
    "fleet_window_unmeasured": ("the hosts' logs left no window in which all of them ran: the aggregate is over "
                                "whole runs, mixing time when not all hosts were loading",
                                "a longer runtime, or check the hosts' clocks (skew) and start spread"),
    "fleet_percentiles_whole_run": ("no histogram log fell inside the common window: the aggregate's latency "
                                    "percentiles merge each host's whole job, ramp and lone seconds included",
                                    "a longer runtime (at least a few log intervals in which every host ran)"),
    "fleet_skew_unknown": ("a host's clock skew could not be measured: its samples were placed as if its clock "
                           "were this machine's, so the common window may be misaligned for it",
                           "check the host answers iolab's clock probes (fio --server reachable, same fio), rerun"),
    "fleet_skew_exceeds_tolerance": ("what is known of a host's clock skew is uncertain by more than the window's "
                                     "tolerance (a quarter of the log interval): samples near the window's edges "
                                     "may be counted in the wrong interval",
                                     "a longer log interval (the fleet target's log_interval_ms), hosts "
                                     "synchronised by NTP/PTP, or a longer runtime so the edges weigh less"),
    "not_prefilled": ("the guest disk was not written before the trials: reads of never-written regions hit "
                      "holes (raw) or unallocated clusters (qcow2) and cost no device I/O",
                      "prefill = true on the qemu target when reads matter (write-only studies need not)"),
    "tcg_emulation": ("the guest ran under software emulation: timings measure the emulator",
                      "use a machine with working KVM for speed; counts still hold"),
    "kernel_fio_disagree": ("the kernel's per-group counters and fio's own totals differ",
                            "check for other I/O on the device during the trial"),
    "not_steady": ("the shares were still moving over the measurement window", "a longer runtime or warm-up"),
    "short_window": ("too few I/Os in the window for a stable share", "a longer runtime"),
    "slow_start": ("the processes ran together only briefly", "a longer runtime; fewer groups"),
    "tag_pressure": ("the requests asked for exceed the device's queue: groups wait for tags, not for the scheduler",
                     "a smaller iodepth or fewer groups (or a larger nr_requests)"),
    "tag_limited": ("BFQ limits each group's queued requests by weight: small groups get very few",
                    "iodepth 1 shows sharing without the tag limit (the depth1 workload)"),
    "prefill_in_trial": ("the region was written during this trial, so it is not an overwrite", "prefill first"),
    "sync_count_mismatch": ("fio's sync count is not what the pattern asks for", "check the job's sync options"),
    "io_uring_not_counted": ("syncs through io_uring were not traced: the host sync count is unknown, not low",
                             "enable QEMU trace events (the qemu_syscalls probe)"),
    "threads_exceed_cpus": ("more threads than CPUs: events per second cannot scale further", "threads ≤ CPUs"),
    "stream_kernel_too_short": ("a STREAM kernel ran under 1 ms: timer overhead matters", "bigger arrays"),
    "array_below_4x_llc": ("arrays smaller than 4 × the last-level cache: part of the traffic may be cached",
                           "more memory for the arrays (the report says what bounded them)"),
    "llc_unknown": ("the cache size was not readable: arrays were sized from an assumption", "check /sys cache info"),
    "memory_unknown": ("the available memory was not readable: sizes were not bounded by it", "check /proc/meminfo"),
    "helper_warning": ("iolab's helper reported a non-fatal problem", "read the detail"),
    "iozone_write_on_device": ("iozone's write test on a device overwrites it rather than creating a new file",
                               "see the iozone study page"),
    "loopback": ("client and server both on the host: a baseline, not a network path", "—"),
    "short_run": ("the run was so short that the tool's clock resolution moves the rate",
                  "more requests (count or size) per trial"),
    "delete_skipped": ("varmail skipped deletes whose file another thread had open (as Filebench does): the file "
                       "set grew during the run", "more files (nfiles) or fewer threads"),
    "ycsb_failed_operations": ("some YCSB operations failed: the rates count them, the latency percentiles do not",
                               "read the errors in the trial's output (space, the database's limits)"),
    "jvm_gc": ("the JVM spent a noticeable share of the phase in garbage collection: latencies include its pauses",
               "a larger heap (the ycsb workload's `heap`)"),
    "ycsb_threads_reduced": ("YCSB ran fewer client threads than asked (more threads than operations)",
                             "more operations or fewer threads"),
}


def name_of(flag: str) -> str:
    return flag.split(":", 1)[0].strip()


class FlagDetail(Record):
    """One flag name over a configuration's trials: an example of its measured detail, how many
    trials raised it, and the catalogue's meaning and advice."""

    flag: str
    detail: str
    trials: int
    of: int
    meaning: str
    advice: str


def details(trials: list[Trial]) -> list[FlagDetail]:
    """One entry per flag name over these trials: an example of its measured detail, how many
    trials raised it, and the catalogue's meaning and advice."""
    seen: dict[str, list[str]] = defaultdict(list)
    for t in trials:
        for f in t.get("flags") or []:
            seen[name_of(f)].append(f)
    out = []
    for name, raised in sorted(seen.items()):
        meaning, advice = CATALOGUE.get(name, ("", ""))
        detail = raised[0].split(":", 1)[1].strip() if ":" in raised[0] else ""
        out.append(FlagDetail(flag=name, detail=detail, trials=len(raised), of=len(trials), meaning=meaning,
                              advice=advice))
    return out


def sentence(d: FlagDetail) -> str:
    """'generator_cpu_bound (2 of 3 trials): fio used 0.98 cores … — the load generator used a whole
    CPU: …; what to do: …'"""
    text = f"{d.flag} ({d.trials} of {d.of} trials)"
    if d.detail:
        text += f": {d.detail}"
    if d.meaning:
        text += f" — {d.meaning}"
    if d.advice and d.advice != "—":
        text += f"; what to do: {d.advice}"
    return text
