"""A corpus of hostile inputs for the confinement, written from fio's HOWTO and source (3.33).

Beyond tests/core/hostile_gen.py (spec and syntax mutations, all --dry-run) and
test_fio_sandbox.py (walk-arounds of fio's reader), these aim at what a job does at run
time: the names fio really opens (`init.c: add_job`, `make_filename`; `filesetup.c: add_file`;
`options.c: set_name_idx`, `get_next_str`), where a planted link, device node, FIFO or hard
link waits; absolute names under a directory (fio prefixes it, `d//dev/x`); `..`; pseudo
filesystems; aliases and spellings; resource bombs; and specs that name system directories
or a disk iolab did not make. Every hostile input points at a canary (tests/core/canary.py):
`{DEV}` the canary loop device, `{CFILE}` and `{CETC}` canary files, `{CROOT}` their
directory. Nothing points at the machine's own disk or files.

An input is a job file run by the fio-jobfile workload in a host directory of its own
(`job`), with entries planted there first (`plant`: name -> what), or a whole spec (`spec`).
`aims`: it would write a canary if nothing stopped it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# what a planted name is: a symlink to the canary device / a canary file / the canary dir /
# the root / /dev / /proc; a block device node of the canary; a FIFO; a hard link of a canary file
PLANTS = ("dev", "file", "etc", "croot", "root", "devdir", "proc", "node", "fifo", "hardlink")


@dataclass(frozen=True)
class Input:
    id: str
    family: str
    job: str | None = None
    spec: str | None = None
    plant: dict[str, str] = field(default_factory=dict)
    aims: bool = True


W = "rw=write\nsize=64k\nbs=4k\nioengine=psync\n"  # small and real: every job writes 64 KiB


def _job(sections: list[tuple[str, str]], glob: str = "") -> str:
    text = f"[global]\n{glob}" if glob else ""
    return text + "".join(f"[{name}]\n{opts}" for name, opts in sections)


def corpus() -> list[Input]:
    out: list[Input] = []
    out += _default_names()
    out += _formats()
    out += _explicit_names()
    out += _absolute_names()
    out += _traversal()
    out += _linked_directories()
    out += _special_files()
    out += _pseudo_filesystems()
    out += _spellings()
    out += _bombs()
    out += _specs()
    out += _benign()
    ids = [i.id for i in out]
    assert len(ids) == len(set(ids)), "corpus ids must be unique"
    return out


def _default_names() -> list[Input]:
    """`<section>.<jobnum>.<filenum>` for every clone and file, and the bare job name (nrfiles=1)."""
    out = []
    for sec in ("j", "data", "x.y", "A-b", "s_1", "job0"):
        for numjobs, nrfiles in ((1, 1), (3, 1), (1, 3), (2, 2)):
            extra = (f"numjobs={numjobs}\n" if numjobs > 1 else "") + (f"nrfiles={nrfiles}\n" if nrfiles > 1 else "")
            for pos, (jn, fn) in (("first", (0, 0)), ("last", (numjobs - 1, nrfiles - 1))):
                if pos == "last" and (jn, fn) == (0, 0):
                    continue
                for what in ("dev", "file"):
                    out.append(Input(f"default-{sec}-{numjobs}x{nrfiles}-{pos}-{what}", "default names",
                                     job=_job([(sec, W + extra)]), plant={f"{sec}.{jn}.{fn}": what}))
        for what in ("dev", "file"):
            out.append(Input(f"default-{sec}-bare-{what}", "default names", job=_job([(sec, W)]),
                             plant={sec: what}))
    return out


def _formats() -> list[Input]:
    """filename_format placeholders, case-insensitive, repeated, empty $clientuid."""
    cases = [("f$filenum", "f0", ""), ("f$filenum", "f2", "nrfiles=3\n"), ("$jobname", "g", ""),
             ("$JOBNAME-$JobNum", "g-1", "numjobs=2\n"), ("x.$filenum.$jobnum", "x.1.1", "numjobs=2\nnrfiles=2\n"),
             ("$jobnum$filenum", "00", ""), ("pre$clientuid$filenum", "pre0", ""), ("$jobname.$jobname", "g.g", ""),
             ("$FILENUM", "0", ""), ("d$jobnum", "d2", "numjobs=3\n"), ("$jobname.dat", "g.dat", ""),
             ("$Jobnum.$Filenum.x", "0.0.x", "")]
    out = []
    for n, (fmt, name, extra) in enumerate(cases):
        for what in ("dev", "file"):
            out.append(Input(f"format-{n}-{what}", "filename_format",
                             job=_job([("g", W + extra + f"filename_format={fmt}\n")]), plant={name: what}))
    return out


def _explicit_names() -> list[Input]:
    out = []
    for what in ("dev", "file", "etc"):
        out += [
            Input(f"filename-plain-{what}", "filename", job=_job([("j", W + "filename=x\n")]), plant={"x": what}),
            Input(f"filename-list-last-{what}", "filename", job=_job([("j", W + "filename=a:b:c\n")]),
                  plant={"c": what}),
            Input(f"filename-list-empty-{what}", "filename", job=_job([("j", W + "filename=a::c\n")]),
                  plant={"a": what}),
            Input(f"filename-global-{what}", "filename", job=_job([("j1", ""), ("j2", "")], W + "filename=g\n"),
                  plant={"g": what}),
            Input(f"filename-subdir-{what}", "filename", job=_job([("j", W + "filename=sub2/x\n")]),
                  plant={"sub2": "croot"}),
            Input(f"filename-numjobs-{what}", "filename", job=_job([("j", W + "filename=shared\nnumjobs=4\n")]),
                  plant={"shared": what}),
        ]
    out.append(Input("filename-iolab-name", "filename", job=_job([("j", W + "filename=iolab-fio.dat\n")]),
                     plant={"iolab-fio.dat": "dev"}))
    return out


def _absolute_names() -> list[Input]:
    """Absolute names, alone (the device guard) and under a directory (fio prefixes it)."""
    out = []
    for n, name in enumerate(("{DEV}", "/{DEV}", "/dev/./{DEVNAME}", "/proc/self/root{DEV}", "{CFILE}", "{CETC}",
                              "/dev//{DEVNAME}")):
        out.append(Input(f"absolute-{n}", "absolute names", job=_job([("j", W + f"filename={name}\n")])))
    for n, name in enumerate(("{DEV}", "/{DEV}", "{CFILE}")):
        for link in ("root", "devdir"):
            out.append(Input(f"absolute-under-dir-{n}-{link}", "absolute names",
                             job=_job([("j", W + "directory=d\n" + f"filename={name}\n")]), plant={"d": link}))
    out.append(Input("absolute-under-base-dev", "absolute names", job=_job([("j", W + "filename=/dev/{DEVNAME}\n")]),
                     plant={"dev": "devdir"}))
    out.append(Input("absolute-under-base-cfile", "absolute names", job=_job([("j", W + "filename={CFILE}\n")]),
                     plant={"tmp": "root"}))
    return out


def _traversal() -> list[Input]:
    out = []
    for n, (opt, value) in enumerate((("filename", "../x"), ("filename", "a/../../x"), ("directory", ".."),
                                      ("directory", "sub/../.."), ("opendir", ".."), ("write_iolog", "../log"),
                                      ("write_bw_log", "../../bw"), ("write_lat_log", "/tmp/lat"),
                                      ("write_iops_log", "{CROOT}/iops"), ("write_hist_log", "../h"),
                                      ("directory", "/"), ("directory", "{CROOT}"), ("opendir", "/dev"),
                                      ("filename_format", "../$jobname"), ("filename_format", "/tmp/$jobname"),
                                      ("filename_format", "sub/$filenum"), ("filename", "./../x"),
                                      ("directory", "./.."), ("filename", "x/.."), ("write_iolog", "{CFILE}"))):
        out.append(Input(f"traversal-{n}", "traversal", job=_job([("j", W + f"{opt}={value}\n")])))
    return out


def _linked_directories() -> list[Input]:
    out = []
    for link in ("root", "croot", "devdir", "proc"):
        for n, opts in enumerate(("directory=d\n", "directory=d\nfilename={DEVNAME}\n", "directory=d\nfilename=x\n",
                                  "directory=d:e\nnumjobs=2\n", "filename=d/{DEVNAME}\n")):
            out.append(Input(f"linkdir-{link}-{n}", "linked directories", job=_job([("j", W + opts)]),
                             plant={"d": link, "e": link}))
    return out


def _special_files() -> list[Input]:
    out = []
    for what in ("node", "fifo", "hardlink"):
        out += [Input(f"special-{what}-default", "special files", job=_job([("j", W)]), plant={"j.0.0": what}),
                Input(f"special-{what}-named", "special files", job=_job([("j", W + "filename=x\n")]),
                      plant={"x": what}),
                Input(f"special-{what}-format", "special files", job=_job([("j", W + "filename_format=f$filenum\n")]),
                      plant={"f0": what})]
    return out


def _pseudo_filesystems() -> list[Input]:
    out = []
    for n, name in enumerate(("/proc/sysrq-trigger", "/proc/sys/vm/drop_caches", "/sys/kernel/mm/ksm/run",
                              "/dev/mem", "/dev/kmsg", "/dev/port", "/sys/block/{DEVNAME}/queue/scheduler",
                              "/proc/self/mem", "/sys/fs/cgroup/cgroup.procs", "/dev/sda", "/dev/vda")):
        aims = "{DEV" in name
        out.append(Input(f"pseudo-{n}", "pseudo filesystems", job=_job([("j", W + f"filename={name}\n")]), aims=aims))
    out.append(Input("pseudo-linked-proc", "pseudo filesystems", job=_job([("j", W + "directory=p\nfilename=sysrq\n")]),
                     plant={"p": "proc"}, aims=False))
    return out


def _spellings() -> list[Input]:
    """fio's aliases and option spellings, each carrying a name a link waits at."""
    out = []
    for n, (opts, name) in enumerate((("readwrite=write\nsize=64k\n", "j.0.0"), ("blocksize=4k\n" + W, "j.0.0"),
                                      (W + "nr_files=3\n", "j.0.2"), (W + "timeout=1\n", "j.0.0"),
                                      (W + "iomem=malloc\n", "j.0.0"), (W + "filename =x\n", "x"),
                                      (W + "filename= x\n", "x"), (W + "FileName=x\n", "x"),
                                      (W + "filename=${IOLAB_CORPUS_UNSET}x\n", "x"), (W + "filename=x #c\n", "x"),
                                      (W + "filename=x;y\n", "x"), (W + "io_limit=64k\n", "j.0.0"),
                                      (W + "wait_for_previous\n", "j.0.0"), (W + "fileoffset=0\n", "j.0.0"),
                                      (W + "blocksize_range=4k-8k\n", "j.0.0"), (W + "filename=$jobname\n", "j"),
                                      ("rw=randwrite\nsize=64k\n", "j.0.0"), ("rw=rw\nsize=64k\n", "j.0.0"),
                                      (W + "create_only=1\n", "j.0.0"), (W + "allow_file_create=0\n", "j.0.0"),
                                      (W + "fallocate=native\n", "j.0.0"), (W + "overwrite=1\n", "j.0.0"),
                                      (W + "file_append=1\n", "j.0.0"), (W + "pre_read=1\n", "j.0.0"))):
        for what in ("dev", "file"):
            out.append(Input(f"spelling-{n}-{what}", "aliases and spellings", job=_job([("j", opts)]),
                             plant={name: what}))
    return out


def _bombs() -> list[Input]:
    out = []
    cases = {
        "processes-16x256": _job([(f"s{i}", "numjobs=256\nsize=64k\nrw=write\n") for i in range(16)]),
        "processes-8x256": _job([(f"s{i}", "numjobs=256\nsize=4k\nrw=write\nthinktime=2s\n") for i in range(8)]),
        "processes-global": _job([(f"s{i}", "") for i in range(3)], "numjobs=200\nsize=64k\n"),
        "buffers-64m-256": _job([("j", "bs=64m\niodepth=256\nsize=64m\n")]),
        "buffers-bsrange": _job([("j", "bsrange=4k-256m\niodepth=128\nsize=1m\n")]),
        "buffers-bssplit": _job([("j", "bssplit=4k/10:512m/90\niodepth=64\nsize=1m\n")]),
        "buffers-split-rw": _job([("j", "bs=4k,512m\niodepth=64\nsize=1m\n")]),
        "runtime-huge": _job([("j", W + "runtime=99999999999999d\ntime_based\n")]),
        "runtime-31d": _job([("j", W + "runtime=31d\n")]),
        "ramp-huge": _job([("j", W + "ramp_time=9999h\n")]),
        "startdelay-huge": _job([("j", W + "startdelay=99999999\n")]),
        "stdout": _job([("j", "rw=write\nsize=64m\nfilename=-\n")]),
        "stdout-sibling-dir": _job([("a", "directory=x\n" + W), ("b", "rw=write\nsize=64m\nfilename=-\n")]),
        "stdin": _job([("j", "rw=read\nsize=64m\nfilename=-\n")]),
        "files-100k-x-256": _job([("j", "nrfiles=100000\nnumjobs=256\nsize=1m\n")]),
        "files-1100k": _job([("a", "nrfiles=100000\nnumjobs=10\nsize=1m\n"), ("b", "nrfiles=100000\nsize=1m\n")]),
        "space-100t": _job([("j", "rw=write\nsize=100t\n")]),
        "space-filesize": _job([("j", "rw=write\nnrfiles=1000\nfilesize=1t\n")]),
        "cmdprio-default": _job([("j", W + "ioengine=libaio\ncmdprio_percentage=100\n")]),
        "cmdprio-bssplit": _job([("j", W + "ioengine=io_uring\ncmdprio_bssplit=4k/100\n")]),
        "cmdprio-rt": _job([("j", W + "ioengine=libaio\ncmdprio_percentage=50\ncmdprio_class=1\n")]),
        "cmdprio-split-rt": _job([("j", W + "ioengine=libaio\ncmdprio_bssplit=4k/50/1/0\ncmdprio_class=2\n")]),
        "prioclass-rt": _job([("j", W + "prioclass=1\n")]),
        "nice-negative": _job([("j", W + "nice=-20\n")]),
        "exec-prerun": _job([("j", W + "exec_prerun=sh -c 'cat /dev/urandom > {DEV}'\n")]),
        "exec-engine": _job([("j", "ioengine=exec\nprogram=/bin/sh\narguments=-c dd\nsize=64k\n")]),
        "external-engine": _job([("j", W + "ioengine=external:/tmp/x.so\n")]),
        "include": "include /etc/fio.fio\n" + _job([("j", W)]),
        "trim": _job([("j", "rw=trim\nsize=64k\nfilename={DEV}\n")]),
        "fill-device": _job([("j", "rw=write\nfill_device=1\n")]),
        "allow-mounted": _job([("j", W + "allow_mounted_write=1\nfilename={DEV}\n")]),
        "lockmem": _job([("j", W + "lockmem=16g\n")]),
        "uid": _job([("j", W + "uid=0\n")]),
        "ioscheduler": _job([("j", W + "ioscheduler=none\n")]),
        "cgroup": _job([("j", W + "cgroup=/\n")]),
        "read-iolog": _job([("j", W + "read_iolog={CFILE}\n")]),
        "replay": _job([("j", W + "replay_redirect={DEV}\n")]),
        "trigger": _job([("j", W + "trigger_cmd=touch {CFILE}\n")]),
        "verify-state": _job([("j", W + "verify=crc32c\nverify_state_save=1\n")]),
        "numjobs-over": _job([("j", W + "numjobs=100000\n")]),
        "thread-bomb": _job([(f"s{i}", "thread\nnumjobs=256\nsize=64k\n") for i in range(4)]),
    }
    aims = {"stdout", "stdout-sibling-dir", "stdin", "space-100t", "space-filesize", "exec-prerun", "trim",
            "allow-mounted", "read-iolog", "replay", "trigger", "exec-engine"}
    for name, text in cases.items():
        out.append(Input(f"bomb-{name}", "resource bombs and refused options", job=text, aims=name in aims))
    return out


def _specs() -> list[Input]:
    """Whole specs: a host directory that is the system's, a disk iolab did not make."""
    head = '[study]\nname = "corpus"\nrepetitions = 1\nmax_repetitions = 1\n'
    fio = '[workload]\nkind = "fio"\nrw = "randwrite"\nsize = "64k"\nbs = "4k"\nruntime = 1\nramp_time = 0\n'
    jobfile = '[workload]\nkind = "fio-jobfile"\njob_file = "x.fio"\njob_text = "[j]\\nrw=write\\nsize=64k\\n"\n'
    out = []
    for n, d in enumerate(("/", "/etc", "/usr", "/boot", "/proc", "/sys", "/dev", "/run", "/var/lib", "/proc/self",
                           "/sys/fs/cgroup", "/dev/shm", "/run/lock", "/etc/ssl", "/usr/lib", "", "/var", "/tmp",
                           "/root", "{SYSLINK}", "{PROCMOUNT}", "//etc", "/etc/./", "/var/lib/", "/proc/1/root")):
        out.append(Input(f"spec-hostdir-{n}", "system directories",
                         spec=head + f'[target]\nkind = "host"\ndirectory = "{d}"\n' + (fio if n % 2 else jobfile)))
    for n, dev in enumerate(("{DEV}", "{DEVLINK}", "/proc/self/root{DEV}", "//{DEV}")):
        out.append(Input(f"spec-device-{n}", "disks iolab did not make",
                         spec=head + f'[target]\nkind = "device"\ndevice = "{dev}"\n' + fio))
        out.append(Input(f"spec-cgroups-device-{n}", "disks iolab did not make",
                         spec=head + f'[target]\nkind = "cgroups"\ndevice = "{dev}"\n'
                         '[workload]\nkind = "fio-groups"\ngroups = 2\nruntime = 1\n'))
    for what in ("dev", "file", "hardlink"):
        out.append(Input(f"spec-fio-datafile-{what}", "built-in fio workload",
                         spec=head + '[target]\nkind = "host"\ndirectory = "{H}"\n' + fio,
                         plant={"iolab-fio.dat": what}))
    out.append(Input("spec-jobfile-blank-device", "disks iolab did not make",
                     spec=head + '[target]\nkind = "loop"\nsize = "64M"\n'
                     '[workload]\nkind = "fio-jobfile"\njob_file = "x.fio"\n'
                     'job_text = "[j]\\nrw=write\\nsize=64k\\nfilename={DEV}\\n"\n'))
    return out


def _benign() -> list[Input]:
    """Controls the parser must accept and that must run: a planted link at a name fio does not open."""
    out = []
    for n, opts in enumerate((W, W + "numjobs=2\n", W + "nrfiles=2\n", W + "filename_format=f$filenum\n",
                              W + "filename=a:b\n", W + "nrfiles=3\nnumjobs=2\n", "rw=randrw\nsize=64k\n",
                              W + "fsync=4\n", W + "ioengine=libaio\niodepth=4\ndirect=1\n",
                              W + "verify=crc32c\n")):
        out.append(Input(f"benign-{n}", "controls", job=_job([("j", opts)]), plant={"unrelated": "dev"},
                         aims=False))
    out.append(Input("benign-cmdprio-idle", "controls", aims=False,
                     job=_job([("j", W + "ioengine=libaio\ncmdprio_percentage=50\ncmdprio_class=3\n")])))
    out.append(Input("benign-two-jobs", "controls", aims=False, job=_job([("a", W), ("b", W + "numjobs=2\n")])))
    return out
