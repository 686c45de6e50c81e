"""Generators of hostile study specs and fio job files, for the fuzz test (fixed seeds).

Every generated input is something a user could hand `iolab run ... --dry-run`: valid
specs and job files with one to three mutations (hostile values, wrong types, unknown
keys, huge axes, deep nesting, raw byte damage), and job files assembled from fio options
with the spellings fio itself would read differently from a naive check.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import tomli_w

BASE_SPECS: list[dict[str, Any]] = [
    {"study": {"name": "f1", "repetitions": 3, "max_repetitions": 5},
     "target": {"kind": "loop", "size": "64M"},
     "workload": {"kind": "fio", "rw": ["randread", "randwrite"], "bs": "4k", "size": "16M", "runtime": 1}},
    {"study": {"name": "f2", "trial_timeout": "2m"},
     "target": {"kind": "host"},
     "workload": {"kind": "iozone", "test": ["write", "read"], "record": ["4k", "4m"], "file_size": "8M"}},
    {"study": {"name": "f3"},
     "targets": [{"name": "a", "kind": "loop", "size": "64M", "filesystem": "ext4"}, {"name": "b", "kind": "host"}],
     "workloads": [{"name": "w", "kind": "writemode", "mode": ["buffered", "o_sync"], "bs": ["4k", "64k"]}]},
    {"study": {"name": "f4", "ci_target": 0.1},
     "target": {"kind": "cgroups", "controller": "bfq", "size": "256M"},
     "workload": {"kind": "fio-groups", "groups": 4, "runtime": "2s", "warmup": "1s"}},
    {"study": {"name": "f5"},
     "target": {"kind": "host"},
     "workload": {"kind": "fio-jobfile", "job_file": "inline.fio",
                  "job_text": "[global]\nrw=randread\nsize=16m\n[j]\nbs=4k\nruntime=1\ntime_based\n"}},
    {"study": {"name": "f6"},
     "target": {"kind": "host"},
     "workload": {"kind": "sync-writes", "pattern": ["append", "overwrite"], "bs": "64k", "count": 16}},
    {"study": {"name": "f7"},
     "target": {"kind": "qemu", "bus": ["virtio-blk", "ide"], "memory": "512M", "disk_size": "128M"},
     "workload": {"kind": "primes", "limits": [1000, 100000]}},
    {"study": {"name": "f8"},
     "target": {"kind": "loop", "size": "256M", "filesystem": "ext4"},
     "workload": {"kind": "ycsb", "core_workload": "a", "recordcount": 1000, "operationcount": 2000,
                  "fieldlength": 100, "threads": 1}},
    {"study": {"name": "f9"},
     "target": {"kind": "host"},
     "workload": {"kind": "varmail", "nfiles": 50, "iosize": "64k", "duration": "2s", "nthreads": 4}},
    {"study": {"name": "f10", "probes": ["qemu_syscalls"]},
     "targets": [{"name": "q/ext4", "kind": "qemu", "guest_fs": "ext4", "native_helpers": ["iolab_varmail"]}],
     "workloads": [{"name": "count", "kind": "sync-writes", "pattern": "append", "count": 16},
                   {"name": "cost", "kind": "varmail", "duration": "2s", "targets": ["q/ext4"], "probes": []}]},
    {"study": {"name": "f11"},
     "target": {"kind": "cgroups", "controller": "bfq", "size": "512M", "filesystem": "ext4", "data_size": "64M"},
     "workload": {"kind": "fio-groups", "groups": 4, "tenant": "beside", "tenant_app": "ycsb", "runtime": "5s"}},
]

HOSTILE_VALUES: list[Any] = [
    0, -1, 1, 2**63 - 1, -(2**63), 1.5, 0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e308,
    True, False, "", " ", "0", "-1", "1e400", "inf", "nan", "NaN", "0k", "-4k", "4k\n", "9" * 400,
    "x" * 5000, "a\0b", "\0", "line\nbreak", "tab\tx", "\x1b[31mred", "../../etc/passwd", "/etc/passwd",
    "/dev/sda", "/dev/zero", "/proc/self/root/dev/sda", "/sys/block/sda", "/tmp", "~", "$HOME", "${HOME}",
    "é", "\u202e", [], [[]], [1, [2, [3]]], {}, {"a": {"b": {"c": 1}}}, [{"kind": "loop"}],
    list(range(50)), ["4k"] * 3, "randread", "exec_prerun", "[x]", "a=b", "#", ";", "'", '"',
]

JOB_OPTIONS: list[str] = [
    "rw=randread", "rw=write", "bs=4k", "size=16m", "runtime=1", "time_based", "ioengine=libaio", "ioengine=psync",
    "iodepth=4", "direct=1", "numjobs=2", "filename=data", "directory=sub", "write_bw_log=bw", "group_reporting",
    "exec_prerun=touch /tmp/iolab-fuzz-canary", "exec_postrun=rm -rf /tmp/x", "ioscheduler=none", "cgroup=x",
    "unlink=1", "ioengine=exec", "ioengine=external:/tmp/evil.so", "ioengine=/tmp/evil.so", "ioengine=filedelete",
    "filename=/etc/passwd", "filename=../../etc/shadow", "directory=/etc", "directory=..", "opendir=/",
    "write_iolog=/etc/x", "read_iolog=/tmp/log", "replay_redirect=/dev/sda", "filename_format=/tmp/$jobname",
    "filename_format=../$jobnum", "write_lat_log=/root/lat", "write_hist_log=../h", "rw=trim", "rw=randtrim",
    "mem=mmaphuge:/dev/hugepages/x", "numjobs=100000", "fill_device=1", "allow_mounted_write=1", "lockmem=100g",
    "profile=tiobench", "filename=/dev/sda", "filename=/dev/null", "trigger=reboot", "name=../../x",
    "description=hello world", "bs=$pagesize", "iodepth=$ncpus*2", "bs=$pagesize*4k", "size=${UNSET_FOR_FUZZ}16m",
    "verify=crc32c", "verify_pattern=0xdeadbeef", "buffer_pattern=\"abc\"", "kb_base=1000",
]

# Options iolab accepts, in the spellings fio also reads (so accepted files exercise the oracle)
SAFE_OPTIONS: list[str] = [
    "rw=randread", "readwrite=write", "bs=4k", "blocksize=8k", "size=16m", "runtime=1", "timeout=2", "time_based",
    "ioengine=psync", "ioengine=null", "iodepth=$ncpus", "iodepth=$ncpus*2", "numjobs=2", "filename=data",
    "filename=a:b", "nrfiles=2", "filename_format=f.$jobnum.$filenum", "write_bw_log=bw", "write_lat_log",
    "group_reporting", "direct=1", "size=${UNSET_FOR_FUZZ}8m", "bs = 4k", "  rw=read", "bs=4k ; comment",
    "description=a job # comment", "percentile_list=50:99", "random_distribution=zipf:1.2", "verify=crc32c",
    "rate=1m", "thinktime=10", "bssplit=4k/50:64k/50", "norandommap", "randrepeat=0", "mem=malloc",
    "bs=$pagesize", "iodepth=$ncpus*(1+1)",
]
SAFE_OBFUSCATIONS = [
    lambda o: o + "\r",
    lambda o: "\t" + o,
    lambda o: o + "  # trailing",
    lambda o: o.replace("=", "${UNSET_FOR_FUZZ}=", 1),
    lambda o: o,
]

OBFUSCATIONS = [
    lambda o: o.upper(),
    lambda o: "${UNSET_FOR_FUZZ}" + o,
    lambda o: o[:3] + "${UNSET_FOR_FUZZ}" + o[3:],
    lambda o: o.replace("=", " = ", 1),
    lambda o: "   \t" + o,
    lambda o: o + " ; trailing comment",
    lambda o: o + "#cut",
    lambda o: o.replace("=", "=${HOME}", 1),
    lambda o: "include " + o,
    lambda o: "include=" + o,
    lambda o: "include\t" + o,
    lambda o: "include_" + o,
    lambda o: "x" * 8190 + o,
    lambda o: o + "\0",
    lambda o: o + "\r",
    lambda o: o.replace("=", "=\x01", 1),
    lambda o: "# " + o,
    lambda o: "[" + o + "]",
    lambda o: o.replace("=", ":", 1),
    lambda o: o + "$ncpus",
    lambda o: o.replace("=", "=$mb_memory/", 1),
]


def _leaves(doc: Any, path: tuple = ()) -> list[tuple]:
    out = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.append(path + (k,))
            out += _leaves(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.append(path + (i,))
            out += _leaves(v, path + (i,))
    return out


def _set(doc: Any, path: tuple, value: Any) -> None:
    for p in path[:-1]:
        doc = doc[p]
    doc[path[-1]] = value


def mutate_spec(rng: random.Random) -> dict[str, Any]:
    doc = copy.deepcopy(rng.choice(BASE_SPECS))
    for _ in range(rng.randint(1, 3)):
        op = rng.random()
        paths = _leaves(doc)
        if op < 0.55 and paths:
            _set(doc, rng.choice(paths), copy.deepcopy(rng.choice(HOSTILE_VALUES)))
        elif op < 0.7:
            tables = [p for p in paths if isinstance(_get(doc, p), dict)] or [()]
            t = rng.choice(tables)
            _get(doc, t)[rng.choice(["extra", "kind", "name", "device", "directory", "size", "bs", "job_text",
                                     "controller", "image_dir", "tunables"])] = \
                                     copy.deepcopy(rng.choice(HOSTILE_VALUES))
        elif op < 0.8:
            w = doc.get("workload") or (doc.get("workloads") or [{}])[0]
            if isinstance(w, dict):
                for key in rng.sample(["bs", "iodepth", "size", "runtime", "rw", "record", "mode", "a", "b",
                                       "probes", "targets", "recordcount", "nfiles"], 4):
                    w[key] = [str(i) + "k" for i in range(1, rng.choice([3, 40, 400]))]
        elif op < 0.9 and paths:
            p = rng.choice(paths)
            parent = _get(doc, p[:-1]) if len(p) > 1 else doc
            if isinstance(parent, dict):
                parent.pop(p[-1], None)
        else:
            doc[rng.choice(["study", "target", "workload", "targets", "workloads"])] = \
                copy.deepcopy(rng.choice(HOSTILE_VALUES))
    return doc


def _get(doc: Any, path: tuple) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def spec_bytes(rng: random.Random) -> bytes:
    """A mutated spec as TOML bytes, sometimes with raw damage on top."""
    doc = mutate_spec(rng)
    try:
        text = tomli_w.dumps(doc).encode()
    except (TypeError, ValueError):
        text = b'[study]\nname = "damaged"\n'
    r = rng.random()
    if r < 0.1:
        text = text[: rng.randrange(len(text) + 1)]
    elif r < 0.2:
        i = rng.randrange(len(text) + 1)
        text = text[:i] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 4))) + text[i:]
    elif r < 0.25:
        depth = rng.choice([50, 2000, 20000])
        text += b"deep = " + b"[" * depth + b"1" + b"]" * depth + b"\n"
    elif r < 0.3:
        text += b"inline = " + b"{a = " * 300 + b"1" + b"}" * 300 + b"\n"
    return text


def job_bytes(rng: random.Random) -> bytes:
    if rng.random() < 0.5:
        return _safe_job(rng)
    lines = []
    if rng.random() < 0.5:
        lines += ["[global]"] + rng.sample(JOB_OPTIONS[:15], 3)
    for s in range(rng.randint(1, 3)):
        lines.append(rng.choice([f"[job{s}]", f"[job{s}]", "[../x]", "[a b]", "[]", f"[global{s}]", "[job"]))
        for _ in range(rng.randint(1, 5)):
            opt = rng.choice(JOB_OPTIONS)
            if rng.random() < 0.4:
                opt = rng.choice(OBFUSCATIONS)(opt)
            lines.append(opt)
    text = ("\r\n" if rng.random() < 0.1 else "\n").join(lines) + "\n"
    data = text.encode("utf-8", "surrogatepass")
    if rng.random() < 0.05:
        data = data.replace(b"=", b"=\xff\xfe", 1)
    return data


def _safe_job(rng: random.Random) -> bytes:
    """A job file iolab should mostly accept, with the comments, spacing and substitutions fio handles."""
    lines = ["; " + "fuzzed"]
    if rng.random() < 0.5:
        lines += ["[global]"] + [rng.choice(SAFE_OBFUSCATIONS)(o) for o in rng.sample(SAFE_OPTIONS, 3)]
    for s in range(rng.randint(1, 4)):
        lines.append(f"[job{s}]" if rng.random() < 0.8 else f"[global{s}]")
        for _ in range(rng.randint(0, 5)):
            lines.append(rng.choice(SAFE_OBFUSCATIONS)(rng.choice(SAFE_OPTIONS)))
        if rng.random() < 0.1:
            lines.append(rng.choice(OBFUSCATIONS)(rng.choice(JOB_OPTIONS)))
    lines.append(f"[last{rng.randint(0, 9)}]")
    return ("\n".join(lines) + "\n").encode()


def write_cases(directory: Path, n_specs: int, n_jobs: int, seed: int) -> list[Path]:
    rng = random.Random(seed)
    out = []
    for i in range(n_specs):
        p = directory / f"spec{i:04d}.toml"
        p.write_bytes(spec_bytes(rng))
        out.append(p)
    for i in range(n_jobs):
        p = directory / f"job{i:04d}.fio"
        p.write_bytes(job_bytes(rng))
        out.append(p)
    return out
