"""Which fio options a job file may use, what their values may look like, and why each is harmless.

This is data, read by `fio_sandbox` (imported job files) and `fio_engine.render_job`
(jobs iolab renders itself). Everything not listed is refused: an allowlist, not a
denylist, because fio has ~250 options, external engines add their own, and one
forgotten name (`exec_prerun`, `ioscheduler`, `replay_redirect`) is enough to leave the
sandbox. `REFUSED` only exists to give the common dangerous names a precise reason.

Names are matched exactly (case-sensitive, no prefixes), as fio's `o_match()` does for
job files; an alias maps to its option's canonical name. Every name and alias here is
checked against the installed fio (`fio --cmdhelp=NAME`, `fio --enghelp=ENGINE`) by
tests/fio/test_fio_sandbox.py, so a typo cannot silently allow a different option.
"""

from __future__ import annotations

from dataclasses import dataclass

# Value kinds. Every kind has a character set that excludes what fio itself interprets
# in a job file (`$` substitutions, `;` and `#` comments, `\` escapes, whitespace, quotes
# where not needed), so a checked value means the same to fio as to iolab.
NUM = "num"            # numbers, sizes, times, ranges, lists, choices spelled as words: [A-Za-z0-9_.,:/%+-]
TEXT = "text"          # free text fio only prints (description): printable ASCII, inner spaces
PATTERN = "pattern"    # buffer_pattern, verify_pattern: fio's grammar without its file form (sandbox._PATTERN)
CHOICE = "choice"      # one of `choices`, optionally followed by `:` and a NUM when `suffix` is set
JOBNAME = "jobname"    # a job name (name=, wait_for=): the same rule as a [section] name
PATH_LIST = "paths"    # ':'-separated file or directory names: each must stay in the sandbox
PATH = "path"          # one file name that must stay in the sandbox
LOG_PREFIX = "log"     # a log file name prefix (fio appends _bw.1.log ...); optional
NAME_FORMAT = "format"  # filename_format: a relative name template with $jobname/$jobnum/$filenum/$clientuid


@dataclass(frozen=True)
class Allowed:
    kind: str
    why: str
    choices: tuple[str, ...] = ()
    suffix: bool = False      # CHOICE: "randread:8" style modifiers allowed
    max_int: int | None = None  # NUM: an integer no larger than this (resource bounds)


# fio I/O engines iolab runs: each does plain I/O (or none) on the job's own files or the
# guarded device. fio dlopen()s any other name as a shared object, so the list is closed.
ENGINES: dict[str, str] = {
    "sync": "read()/write()", "psync": "pread()/pwrite()", "vsync": "readv()/writev()",
    "pvsync": "preadv()/pwritev()", "pvsync2": "preadv2()/pwritev2()", "libaio": "Linux native AIO",
    "io_uring": "io_uring reads and writes (not passthrough commands)", "posixaio": "POSIX AIO",
    "mmap": "memory-mapped file I/O", "null": "no I/O at all", "cpuio": "burns CPU, no I/O",
    "falloc": "fallocate() on the job's own files", "filecreate": "creates the job's own files",
    "filestat": "stat() of the job's own files",
}

REFUSED_ENGINES: dict[str, str] = {
    "exec": "runs a program",
    "external": "loads a shared object into fio",
    "filedelete": "deletes files",
    "sg": "sends raw SCSI commands to a device",
    "io_uring_cmd": "sends raw NVMe passthrough commands",
    "libzbc": "sends zone commands (resets) to a device",
    "e4defrag": "moves extents between files",
    "splice": "is not in iolab's engine list", "netsplice": "opens network connections",
    "net": "opens network connections", "rdma": "opens network connections", "http": "opens network connections",
    "nbd": "opens network connections", "rbd": "talks to a Ceph cluster", "nfs": "talks to an NFS server",
    "dev-dax": "maps persistent memory devices", "libpmem": "maps persistent memory devices",
}

_ENGINE_OPT = "an option of an allowed engine; tunes how that engine submits I/O"
_TUNING = "tunes how I/O is issued or measured; names no file and runs nothing"
_SIZE = "sizes and offsets within the job's own files or the guarded device"
_TIME = "durations and rates of the job"
_LOG = "how fio's own statistics are computed and logged"
_DATA = "what data fio writes into the job's own files"
_VERIFY = "verifies data fio itself wrote"

OPTIONS: dict[str, Allowed] = {
    # -- naming and files (the path rule applies) ----------------------------------------------
    "name": Allowed(JOBNAME, "the job's name; also the default file name, so it follows the section-name rule"),
    "description": Allowed(TEXT, "text fio only prints"),
    "wait_for": Allowed(JOBNAME, "orders jobs of this file"),
    "filename": Allowed(PATH_LIST, "the job's files: relative names land in iolab's directory; "
                                   "a block device must pass the data-safety guard"),
    "directory": Allowed(PATH_LIST, "where relative file names land: must itself stay in the sandbox"),
    "filename_format": Allowed(NAME_FORMAT, "names of generated files: relative, placeholders only"),
    "opendir": Allowed(PATH, "adds the files of a directory: only one inside the sandbox"),
    "write_iolog": Allowed(PATH, "writes fio's I/O log: only to a file inside the sandbox"),
    "write_bw_log": Allowed(LOG_PREFIX, "writes a log file: only inside the sandbox"),
    "write_lat_log": Allowed(LOG_PREFIX, "writes log files: only inside the sandbox"),
    "write_iops_log": Allowed(LOG_PREFIX, "writes a log file: only inside the sandbox"),
    "write_hist_log": Allowed(LOG_PREFIX, "writes a log file: only inside the sandbox"),
    "unique_filename": Allowed(NUM, "prefixes names for network clients (unused by iolab)"),
    "lockfile": Allowed(CHOICE, "locks the job's own files between its threads", ("none", "exclusive", "readwrite"),
                        suffix=True),
    "nrfiles": Allowed(NUM, "how many files the job creates in its directory", max_int=100_000),
    "openfiles": Allowed(NUM, "how many of the job's files are open at once"),
    "file_service_type": Allowed(NUM, "order in which the job's own files are used"),
    "create_serialize": Allowed(NUM, "when the job's files are laid out"),
    "create_fsync": Allowed(NUM, "fsync after laying out the job's files"),
    "create_on_open": Allowed(NUM, "when the job's files are created"),
    "create_only": Allowed(NUM, "only lays out the job's files"),
    "allow_file_create": Allowed(NUM, "whether fio may create the job's files"),
    "pre_read": Allowed(NUM, "reads the job's files into the cache first"),
    "file_append": Allowed(NUM, "writes at the end of the job's own files"),
    "fallocate": Allowed(CHOICE, "how the job's own files are allocated",
                         ("none", "native", "posix", "keep", "truncate", "0", "1")),
    "fadvise_hint": Allowed(CHOICE, "posix_fadvise() on the job's own files", ("0", "1", "random", "sequential")),
    "write_hint": Allowed(CHOICE, "write lifetime hint on the job's own files",
                          ("none", "short", "medium", "long", "extreme")),
    # -- the I/O pattern --------------------------------------------------------------------------
    "rw": Allowed(CHOICE, "read or write the job's own files or the guarded device (trims are refused)",
                  ("read", "write", "randread", "randwrite", "rw", "readwrite", "randrw"), suffix=True),
    "rw_sequencer": Allowed(CHOICE, "offset generator modifier", ("sequential", "identical"), suffix=True),
    "ioengine": Allowed(CHOICE, "how fio issues I/O: only engines in iolab's list", tuple(ENGINES)),
    "iodepth": Allowed(NUM, _TUNING, max_int=65536),
    "iodepth_batch": Allowed(NUM, _TUNING), "iodepth_batch_complete_min": Allowed(NUM, _TUNING),
    "iodepth_batch_complete_max": Allowed(NUM, _TUNING), "iodepth_low": Allowed(NUM, _TUNING),
    "io_submit_mode": Allowed(CHOICE, _TUNING, ("inline", "offload")),
    "serialize_overlap": Allowed(NUM, _TUNING),
    "size": Allowed(NUM, _SIZE), "io_size": Allowed(NUM, _SIZE), "filesize": Allowed(NUM, _SIZE),
    "offset": Allowed(NUM, _SIZE), "offset_align": Allowed(NUM, _SIZE), "offset_increment": Allowed(NUM, _SIZE),
    "number_ios": Allowed(NUM, _SIZE),
    "bs": Allowed(NUM, _SIZE), "ba": Allowed(NUM, _SIZE), "bsrange": Allowed(NUM, _SIZE),
    "bssplit": Allowed(NUM, _SIZE), "bs_unaligned": Allowed(NUM, _SIZE), "bs_is_seq_rand": Allowed(NUM, _SIZE),
    "randrepeat": Allowed(NUM, _TUNING), "randseed": Allowed(NUM, _TUNING), "allrandrepeat": Allowed(NUM, _TUNING),
    "norandommap": Allowed(NUM, _TUNING), "softrandommap": Allowed(NUM, _TUNING),
    "random_generator": Allowed(CHOICE, _TUNING, ("tausworthe", "lfsr", "tausworthe64")),
    "random_distribution": Allowed(NUM, _TUNING), "percentage_random": Allowed(NUM, _TUNING),
    "zonemode": Allowed(CHOICE, "strided zones within the job's region (zbd zone resets are refused)",
                        ("none", "strided")),
    "zonesize": Allowed(NUM, _SIZE), "zonerange": Allowed(NUM, _SIZE), "zoneskip": Allowed(NUM, _SIZE),
    "direct": Allowed(NUM, _TUNING), "buffered": Allowed(NUM, _TUNING), "atomic": Allowed(NUM, _TUNING),
    "sync": Allowed(CHOICE, _TUNING, ("none", "0", "sync", "1", "dsync")),
    "fsync": Allowed(NUM, _TUNING), "fdatasync": Allowed(NUM, _TUNING), "write_barrier": Allowed(NUM, _TUNING),
    "end_fsync": Allowed(NUM, _TUNING), "fsync_on_close": Allowed(NUM, _TUNING),
    "overwrite": Allowed(NUM, _TUNING), "invalidate": Allowed(NUM, _TUNING),
    "rwmixread": Allowed(NUM, _TUNING), "rwmixwrite": Allowed(NUM, _TUNING),
    "mem": Allowed(CHOICE, "where fio's buffers live (anonymous memory only: no file)",
                   ("malloc", "shm", "shmhuge", "mmap", "mmapshared", "mmaphuge")),
    "iomem_align": Allowed(NUM, _TUNING),
    "thread": Allowed(NUM, _TUNING),
    "numjobs": Allowed(NUM, "processes per job; capped so a job file cannot fork-bomb the machine", max_int=256),
    "nice": Allowed(NUM, _TUNING), "prio": Allowed(NUM, _TUNING),
    "prioclass": Allowed(CHOICE, "I/O priority class: best-effort or idle (realtime could starve the machine)",
                         ("0", "2", "3")),
    "cpumask": Allowed(NUM, _TUNING), "cpus_allowed": Allowed(NUM, _TUNING),
    "cpus_allowed_policy": Allowed(CHOICE, _TUNING, ("shared", "split")),
    # -- timing -----------------------------------------------------------------------------------
    "runtime": Allowed(NUM, _TIME), "time_based": Allowed(NUM, _TIME), "ramp_time": Allowed(NUM, _TIME),
    "startdelay": Allowed(NUM, _TIME), "loops": Allowed(NUM, _TIME),
    "thinktime": Allowed(NUM, _TIME), "thinktime_spin": Allowed(NUM, _TIME), "thinktime_blocks": Allowed(NUM, _TIME),
    "thinktime_blocks_type": Allowed(CHOICE, _TIME, ("complete", "issue")), "thinktime_iotime": Allowed(NUM, _TIME),
    "rate": Allowed(NUM, _TIME), "rate_min": Allowed(NUM, _TIME), "rate_iops": Allowed(NUM, _TIME),
    "rate_iops_min": Allowed(NUM, _TIME), "rate_process": Allowed(NUM, _TIME), "rate_cycle": Allowed(NUM, _TIME),
    "rate_ignore_thinktime": Allowed(NUM, _TIME),
    "max_latency": Allowed(NUM, _TIME), "latency_target": Allowed(NUM, _TIME), "latency_window": Allowed(NUM, _TIME),
    "latency_percentile": Allowed(NUM, _TIME), "latency_run": Allowed(NUM, _TIME),
    "stonewall": Allowed(NUM, _TIME), "new_group": Allowed(NUM, _TIME),
    "exitall": Allowed(NUM, "stops the other jobs of this fio"), "exitall_on_error": Allowed(NUM, "stops this fio"),
    "exit_what": Allowed(CHOICE, "which of this fio's jobs exitall stops", ("group", "stonewall", "all")),
    "flow_id": Allowed(NUM, _TIME), "flow": Allowed(NUM, _TIME), "flow_sleep": Allowed(NUM, _TIME),
    "steadystate": Allowed(NUM, _TIME), "steadystate_duration": Allowed(NUM, _TIME),
    "steadystate_ramp_time": Allowed(NUM, _TIME),
    # -- data and verification --------------------------------------------------------------------
    "zero_buffers": Allowed(NUM, _DATA), "refill_buffers": Allowed(NUM, _DATA),
    "scramble_buffers": Allowed(NUM, _DATA), "buffer_pattern": Allowed(PATTERN, _DATA),
    "buffer_compress_percentage": Allowed(NUM, _DATA), "buffer_compress_chunk": Allowed(NUM, _DATA),
    "dedupe_percentage": Allowed(NUM, _DATA), "dedupe_global": Allowed(NUM, _DATA),
    "dedupe_mode": Allowed(CHOICE, _DATA, ("repeat", "working_set")),
    "dedupe_working_set_percentage": Allowed(NUM, _DATA),
    "verify": Allowed(NUM, _VERIFY), "do_verify": Allowed(NUM, _VERIFY), "verify_interval": Allowed(NUM, _VERIFY),
    "verify_offset": Allowed(NUM, _VERIFY), "verify_pattern": Allowed(PATTERN, _VERIFY),
    "verify_fatal": Allowed(NUM, _VERIFY), "verify_dump": Allowed(NUM, _VERIFY + "; dumps land beside its files"),
    "verify_async": Allowed(NUM, _VERIFY), "verify_backlog": Allowed(NUM, _VERIFY),
    "verify_backlog_batch": Allowed(NUM, _VERIFY), "verify_only": Allowed(NUM, _VERIFY),
    "experimental_verify": Allowed(NUM, _VERIFY),
    "verify_state_save": Allowed(NUM, _VERIFY + "; the state file lands in iolab's work dir"),
    "verify_state_load": Allowed(NUM, _VERIFY + "; the state file is read from iolab's work dir"),
    "continue_on_error": Allowed(NUM, _TUNING), "ignore_error": Allowed(NUM, _TUNING),
    "error_dump": Allowed(NUM, _LOG),
    # -- statistics and logs ----------------------------------------------------------------------
    "group_reporting": Allowed(NUM, _LOG), "stats": Allowed(NUM, _LOG), "per_job_logs": Allowed(NUM, _LOG),
    "log_entries": Allowed(NUM, _LOG), "log_avg_msec": Allowed(NUM, _LOG), "log_hist_msec": Allowed(NUM, _LOG),
    "log_hist_coarseness": Allowed(NUM, _LOG), "log_max_value": Allowed(NUM, _LOG), "log_offset": Allowed(NUM, _LOG),
    "log_prio": Allowed(NUM, _LOG), "log_compression": Allowed(NUM, _LOG), "log_store_compressed": Allowed(NUM, _LOG),
    "log_unix_epoch": Allowed(NUM, _LOG), "log_alternate_epoch": Allowed(NUM, _LOG),
    "log_alternate_epoch_clock_id": Allowed(NUM, _LOG), "block_error_percentiles": Allowed(NUM, _LOG),
    "bwavgtime": Allowed(NUM, _LOG), "iopsavgtime": Allowed(NUM, _LOG),
    "clat_percentiles": Allowed(NUM, _LOG), "lat_percentiles": Allowed(NUM, _LOG),
    "slat_percentiles": Allowed(NUM, _LOG), "percentile_list": Allowed(NUM, _LOG),
    "significant_figures": Allowed(NUM, _LOG), "disk_util": Allowed(NUM, _LOG + " (reads /sys)"),
    "gtod_reduce": Allowed(NUM, _LOG), "disable_lat": Allowed(NUM, _LOG), "disable_clat": Allowed(NUM, _LOG),
    "disable_slat": Allowed(NUM, _LOG), "disable_bw_measurement": Allowed(NUM, _LOG), "gtod_cpu": Allowed(NUM, _LOG),
    "clocksource": Allowed(CHOICE, _LOG, ("gettimeofday", "clock_gettime", "cpu")),
    "unified_rw_reporting": Allowed(NUM, _LOG), "kb_base": Allowed(NUM, _LOG), "unit_base": Allowed(NUM, _LOG),
    # -- options of the allowed engines (fio --enghelp=ENGINE) ---------------------------------------
    "userspace_reap": Allowed(NUM, _ENGINE_OPT), "nowait": Allowed(NUM, _ENGINE_OPT),
    "cmdprio_percentage": Allowed(NUM, _ENGINE_OPT), "cmdprio_class": Allowed(NUM, _ENGINE_OPT),
    "cmdprio": Allowed(NUM, _ENGINE_OPT), "cmdprio_bssplit": Allowed(NUM, _ENGINE_OPT),
    "hipri": Allowed(NUM, _ENGINE_OPT), "hipri_percentage": Allowed(NUM, _ENGINE_OPT),
    "fixedbufs": Allowed(NUM, _ENGINE_OPT), "registerfiles": Allowed(NUM, _ENGINE_OPT),
    "sqthread_poll": Allowed(NUM, _ENGINE_OPT), "sqthread_poll_cpu": Allowed(NUM, _ENGINE_OPT),
    "nonvectored": Allowed(NUM, _ENGINE_OPT), "uncached": Allowed(NUM, _ENGINE_OPT),
    "force_async": Allowed(NUM, _ENGINE_OPT), "thp": Allowed(NUM, _ENGINE_OPT),
    "cpuload": Allowed(NUM, _ENGINE_OPT), "cpuchunks": Allowed(NUM, _ENGINE_OPT),
    "cpumode": Allowed(NUM, _ENGINE_OPT), "exit_on_io_done": Allowed(NUM, _ENGINE_OPT),
    "stat_type": Allowed(NUM, _ENGINE_OPT),
}

# fio's aliases (fio --cmdhelp=ALIAS names the canonical option) -> canonical name
ALIASES: dict[str, str] = {
    "readwrite": "rw", "iodepth_batch_submit": "iodepth_batch", "iodepth_batch_complete": "iodepth_batch_complete_min",
    "io_limit": "io_size", "fileoffset": "offset", "blocksize": "bs", "blockalign": "ba",
    "blocksize_range": "bsrange", "blocksize_unaligned": "bs_unaligned", "nr_files": "nrfiles",
    "timeout": "runtime", "iomem": "mem", "mem_align": "iomem_align", "wait_for_previous": "stonewall",
    "ratemin": "rate_min", "ratecycle": "rate_cycle", "disable_bw": "disable_bw_measurement",
    "ss": "steadystate", "ss_dur": "steadystate_duration", "ss_ramp": "steadystate_ramp_time",
}

# The dangerous names people actually write, with the reason they are refused. Anything
# else not in OPTIONS is refused as "not in iolab's allowlist".
REFUSED: dict[str, str] = {
    "exec_prerun": "runs a shell command before the job",
    "exec_postrun": "runs a shell command after the job",
    "ioscheduler": "changes the device's I/O scheduler (iolab sets and restores schedulers itself)",
    "cgroup": "moves fio into a cgroup (iolab places processes in its own cgroups)",
    "cgroup_weight": "writes cgroup weights (iolab's cgroups target does this, with read-back)",
    "cgroup_nodelete": "leaves cgroups behind",
    "unlink": "deletes the job's files, which may be a device node",
    "unlink_each_loop": "deletes the job's files, which may be a device node",
    "read_iolog": "replays an I/O log, which names its own files (iolab does not check them)",
    "replay_redirect": "sends a replayed log's I/O to another device",
    "merge_blktrace_file": "writes a merged trace file",
    "fill_device": "fills the filesystem that holds iolab's scratch space",
    "fill_fs": "fills the filesystem that holds iolab's scratch space",
    "allow_mounted_write": "allows writing to a mounted device",
    "lockmem": "pins memory, which can starve the machine",
    "hugepage-size": "needs a hugetlbfs mount",
    "uid": "switches user", "gid": "switches group",
    "profile": "loads a built-in fio profile with options of its own",
    "trigger": "runs a command when triggered", "trigger-file": "runs a command when a file appears",
    "trigger-timeout": "runs a command at a time", "trigger-remote": "runs a command on a remote host",
    "trim_percentage": "trims (discards) data", "trim_verify_zero": "trims (discards) data",
    "trim_backlog": "trims (discards) data", "trim_backlog_batch": "trims (discards) data",
    "output": "is set by iolab (it reads fio's JSON output)",
    "output-format": "is set by iolab (it reads fio's JSON output)",
    "cmd_type": "sends passthrough commands (io_uring_cmd)",
    "numa_cpu_nodes": "is not needed by iolab's studies", "numa_mem_policy": "is not needed by iolab's studies",
}

REFUSED_RW = {"trim": "trims (discards) data", "randtrim": "trims (discards) data",
              "trimwrite": "trims (discards) data", "randtrimwrite": "trims (discards) data"}


def lookup(name: str) -> tuple[str, Allowed] | None:
    """(canonical name, rule) for an option name as written in a job file, or None."""
    canonical = ALIASES.get(name, name)
    rule = OPTIONS.get(canonical)
    return (canonical, rule) if rule else None


_PREFIX_REASONS = (("exec_", "runs a shell command"), ("trigger", "runs a command"),
                   ("cgroup", "changes cgroups (iolab manages its own)"), ("replay_", "replays an I/O log"),
                   ("trim", "trims (discards) data"), ("zone", "manages device zones"))


def refusal_reason(name: str) -> str:
    """Why an option that is not allowed is refused (the most precise reason iolab knows)."""
    if name in REFUSED:
        return REFUSED[name]
    low = name.lower()
    if low in REFUSED:
        return REFUSED[low]
    for prefix, reason in _PREFIX_REASONS:
        if low.startswith(prefix):
            return reason
    if lookup(low):
        return f"is not an fio option: fio matches names exactly (did you mean {low}?)"
    return "is not in iolab's allowlist of fio options (docs/architecture.md, 'The job-file sandbox')"
