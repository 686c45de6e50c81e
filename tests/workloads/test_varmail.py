"""varmail: the helper does varmail.f's flow, counted by hand and seen by strace; `iolab run`
gives every declared metric on an ext4 loop target; hostile parameters are exit 2 by key.

The strace checks read what the helper really asked of the kernel (`strace -f -y`: every
descriptor with its path) and replay it against a model of Filebench's file set written
here from its documented rules (one rotor over the existing entries, one over the absent
ones): the files it deleted, created, opened and fsynced must be exactly the ones Filebench
would pick, in varmail.f's order, and the bytes it appended must be what is on disk at the
end. A helper that counted without doing, fsynced the wrong descriptor, wrote at offset 0
instead of appending, picked files at random or appended a fixed size fails here.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.core.helpers import Lab, drive, needs_root, one_line, study_table

from iolab.core import registry
from iolab.core.metrics import Metric
from iolab.native import build

needs_strace = pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (apt-get install strace)")
APPEND = 16384  # varmail.f's meanappendsize
OPS_PER_ITERATION = {"delete": 1, "create": 1, "append": 2, "fsync": 2, "open": 2, "read": 2, "close": 3}


@pytest.fixture(scope="module")
def helper(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built with -Werror: the source stays warning-free."""
    return build.compile_helper("iolab_varmail", tmp_path_factory.mktemp("bin") / "iolab_varmail",
                                build.STRICT_CFLAGS)


@pytest.fixture
def disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A directory on a disk filesystem (fsync must reach a device, not tmpfs)."""
    d = Path(subprocess.run(["mktemp", "-d", "/var/tmp/iolab-test-varmail-XXXXXX"], capture_output=True,
                            text=True, check=True).stdout.strip())
    yield d
    shutil.rmtree(d, ignore_errors=True)


def run_helper(helper: Path, fileset: Path, *args: str, strace_log: Path | None = None) -> dict[str, Any]:
    argv = [str(helper), "--dir", str(fileset), *args]
    if strace_log is not None:
        argv = ["strace", "-f", "-qq", "-y", "-o", str(strace_log), "-e",
                "trace=openat,unlink,unlinkat,fsync,write,read,lseek,close,mkdir,newfstatat,statx,syncfs", *argv]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


# -- reading strace -----------------------------------------------------------------------

@dataclass
class Call:
    name: str
    path: str  # the file the call is about ('' if none)
    args: str
    ret: int


_LINE = re.compile(r"^(\d+)\s+(.*)$")
_CALL = re.compile(r"^(\w+)\((.*)\)\s+=\s+(-?\d+)")


def read_strace(log: Path, root: Path) -> list[Call]:
    """The calls about files under `root`, in order; unfinished/resumed halves of a thread's call joined."""
    pending: dict[str, str] = {}
    calls = []
    for line in log.read_text().splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        pid, text = m.groups()
        if text.endswith("<unfinished ...>"):
            pending[pid] = text[: -len("<unfinished ...>")].rstrip()
            continue
        resumed = re.match(r"^<\.\.\. \w+ resumed>(.*)$", text)
        if resumed:
            text = pending.pop(pid) + resumed.group(1)
        c = _CALL.match(text)
        if not c:
            continue
        name, args, ret = c.group(1), c.group(2), int(c.group(3))
        if name in ("openat", "unlink", "unlinkat", "mkdir", "newfstatat", "statx"):
            quoted = re.findall(r'"([^"]*)"', args)
            path = quoted[0] if quoted else ""
        else:
            fd = re.match(r"^\d+<([^>]*)>", args)
            path = fd.group(1) if fd else ""
        # the set's own directory: only its syncfs, which ends the preallocation
        if path.startswith(f"{root}/") or (path == str(root) and name == "syncfs"):
            calls.append(Call(name, path, args, ret))
    return calls


def split_prealloc(calls: list[Call]) -> tuple[list[Call], list[Call]]:
    """(preallocation, flow): syncfs on the file set's directory ends the preallocation."""
    end = next(i for i, c in enumerate(calls) if c.name == "syncfs")
    return calls[:end], calls[end + 1:]


def token(c: Call) -> str:
    """One letter per call, so varmail.f's order can be matched as a regular expression."""
    if c.name == "openat":
        return "C" if "O_CREAT" in c.args else "O"
    if c.name == "lseek":
        return {"SEEK_END": "E", "SEEK_SET": "B"}[c.args.split(", ")[-1]]
    if c.name == "read":
        return "R" if c.ret > 0 else "Z"
    return {"unlink": "U", "unlinkat": "U", "newfstatat": "S", "statx": "S", "write": "W", "fsync": "F",
            "close": "X"}[c.name]


# deletefile; createfile, appendfilerand, fsync, closefile; openfile, readwholefile, appendfilerand,
# fsync, closefile; openfile, readwholefile, closefile (createfile stats the parent directory first)
ITERATION = re.compile(r"U(S)C(EW)F(X)(O)(B)R*Z(EW)F(X)(O)(B)R*Z(X)")


# -- Filebench's file set, as its documentation and source describe it ------------------------

@dataclass
class FileSetModel:
    """Entries by index; picks by rotor: the first entry in the wanted state at or after the rotor
    (wrapping), the rotor then just past it. One rotor for existing files (deletefile and openfile
    share it), one for absent ones (createfile)."""

    n: int
    width: int
    exists: set[int] = field(default_factory=set)
    exrotor: int = 0
    nerotor: int = 0

    def index(self, root: Path, path: str) -> int:
        d, f = Path(path).relative_to(root).parts
        return (int(d) - 1) * self.width + int(f) - 1

    def pick(self, want: bool) -> int:
        rotor = self.exrotor if want else self.nerotor
        for k in range(self.n):
            i = (rotor + k) % self.n
            if (i in self.exists) == want:
                if want:
                    self.exrotor = i + 1
                else:
                    self.nerotor = i + 1
                return i
        raise AssertionError("no entry in the wanted state: Filebench would stop the run here")


# -- (a) the helper against a count by hand ------------------------------------------------

@needs_strace
def test_one_thread_follows_varmail_flow_and_filebench_picks(helper: Path, disk: Path) -> None:
    n_iter, nfiles = 60, 40
    fs = disk / "fs"
    log = disk / "strace.log"
    res = run_helper(helper, fs, "--iterations", str(n_iter), "--nthreads", "1", "--nfiles", str(nfiles),
                     "--meandirwidth", "16", "--iosize", "4096", "--seed", "11", strace_log=log)
    assert res["appends_zero"] == 0  # (this seed) so every append is one lseek + write below

    # by hand, from varmail.f: 13 operations per iteration
    assert res["iterations"] == n_iter
    assert {op: res["ops"][op]["count"] for op in OPS_PER_ITERATION} == \
        {op: k * n_iter for op, k in OPS_PER_ITERATION.items()}
    assert res["all"]["count"] == 13 * n_iter and res["delete_skipped"] == 0
    assert res["files_at_end"] == res["prealloc"]["files"] == len(list(fs.rglob("0*/*")))
    assert res["prealloc"]["dirs"] == 3 == len([d for d in fs.iterdir() if d.is_dir()])  # 40 files, 16 per dir

    calls = read_strace(log, fs)
    pre, flow = split_prealloc(calls)
    created = [c for c in pre if c.name == "openat"]
    assert len(created) == res["prealloc"]["files"]
    assert sum(c.ret for c in pre if c.name == "write") == res["prealloc"]["bytes"]

    text = "".join(token(c) for c in flow)
    assert ITERATION.fullmatch(text[: text.index("U", 1)]), text[:80]
    iterations = list(ITERATION.finditer(text))
    assert len(iterations) == n_iter and "".join(m.group(0) for m in iterations) == text

    # the strace counts agree with the helper's counters
    by = {name: [c for c in flow if c.name == name] for name in ("unlink", "fsync", "write", "read", "openat")}
    assert len(by["unlink"]) == n_iter and all(c.ret == 0 for c in by["unlink"])
    assert len(by["fsync"]) == 2 * n_iter == res["ops"]["fsync"]["count"]
    assert len(by["openat"]) == 3 * n_iter
    assert len(by["write"]) == res["append_writes"] and sum(c.ret for c in by["write"]) == res["bytes_appended"]
    assert len(by["read"]) == res["read_calls"] and sum(c.ret for c in by["read"]) == res["bytes_read"]

    # replay: the files are the ones Filebench picks, each block of calls is about the file just
    # opened, and the on-disk sizes are the preallocated bytes plus every append (at the end)
    model = FileSetModel(nfiles, 16)
    model.exists = {model.index(fs, c.path) for c in created}
    size = {i: 0 for i in model.exists}
    for c in pre:
        if c.name == "write":
            size[model.index(fs, c.path)] += c.ret
    for m in iterations:
        group = flow[m.start():m.end()]
        toks = [token(c) for c in group]
        o1, o2 = (i for i, t in enumerate(toks) if t == "O")
        closes = [i for i, t in enumerate(toks) if t == "X"]
        deleted, made, opened1, opened2 = (model.index(fs, group[i].path) for i in (0, 2, o1, o2))
        assert deleted == model.pick(True), "deletefile picked another file than Filebench would"
        model.exists.discard(deleted)
        del size[deleted]
        assert made == model.pick(False), "createfile picked another file than Filebench would"
        model.exists.add(made)
        size[made] = 0
        assert opened1 == model.pick(True), "the first openfile picked another file than Filebench would"
        assert opened2 == model.pick(True), "the second openfile picked another file than Filebench would"
        assert Path(group[1].path) == Path(group[2].path).parent  # createfile looks at the directory first
        for lo, hi in ((2, closes[0]), (o1, closes[1]), (o2, closes[2])):
            assert {c.path for c in group[lo:hi + 1]} == {group[lo].path}, toks[lo:hi + 1]
        for c in group:
            if c.name == "write":
                assert 0 < c.ret <= APPEND - 2  # appendfilerand: 0 .. meanappendsize-2 bytes
                size[model.index(fs, c.path)] += c.ret
    on_disk = {model.index(fs, str(p)): p.stat().st_size for p in fs.rglob("0*/*")}
    assert on_disk == size


@needs_strace
def test_threads_share_the_file_set_and_counts_still_add_up(helper: Path, disk: Path) -> None:
    n_iter = 400
    fs = disk / "fs"
    log = disk / "strace.log"
    res = run_helper(helper, fs, "--iterations", str(n_iter), "--nthreads", "4", "--nfiles", "200",
                     "--iosize", "65536", "--seed", "3", strace_log=log)
    ops = {op: res["ops"][op]["count"] for op in OPS_PER_ITERATION}
    assert res["iterations"] == n_iter and ops["create"] == n_iter
    assert ops["delete"] + res["delete_skipped"] == n_iter
    assert {op: ops[op] for op in ("append", "fsync", "open", "read", "close")} == \
        {op: OPS_PER_ITERATION[op] * n_iter for op in ("append", "fsync", "open", "read", "close")}
    assert res["files_at_end"] == res["prealloc"]["files"] + res["delete_skipped"] == len(list(fs.rglob("0*/*")))

    _, flow = split_prealloc(read_strace(log, fs))
    names = [c.name for c in flow]
    assert names.count("unlink") == ops["delete"] and names.count("fsync") == 2 * n_iter
    assert names.count("openat") == 3 * n_iter
    writes = [c.ret for c in flow if c.name == "write"]
    assert len(writes) == res["append_writes"] == 2 * n_iter - res["appends_zero"]
    assert sum(writes) == res["bytes_appended"]
    # 800 uniform draws on 0..16382: mean 8191, standard error ~167
    assert abs(res["bytes_appended"] / (2 * n_iter) - (APPEND - 2) / 2) < 5 * 4730 / (2 * n_iter) ** 0.5
    assert all(c.ret == 0 for c in flow if c.name in ("unlink", "fsync", "close"))


@needs_strace
def test_a_file_open_in_another_thread_is_not_deleted(helper: Path, disk: Path) -> None:
    """Filebench skips a delete whose file another thread has open. With few existing files the
    shared rotor comes back to files still open, so skips are frequent; strace lists calls in the
    order they returned, and a thread's open count drops only after its close returned, so at
    every unlink no descriptor of that file may be open."""
    fs = disk / "fs"
    log = disk / "strace.log"
    res = run_helper(helper, fs, "--iterations", "150", "--nthreads", "4", "--nfiles", "128", "--prealloc", "5",
                     "--iosize", "65536", "--seed", "3", strace_log=log)
    assert res["prealloc"]["files"] > 4  # (this seed) more files than threads: every pick finds one
    _, flow = split_prealloc(read_strace(log, fs))
    open_now: Counter[str] = Counter()
    unlinked = 0
    for c in flow:
        if c.name == "openat" and c.ret >= 0:
            open_now[c.path] += 1
        elif c.name == "close":
            open_now[c.path] -= 1
        elif c.name == "unlink":
            assert open_now[c.path] == 0, f"deleted {c.path} while {open_now[c.path]} descriptor(s) had it open"
            unlinked += 1
    assert res["delete_skipped"] > 0 and unlinked == res["ops"]["delete"]["count"] == 150 - res["delete_skipped"]
    assert res["files_at_end"] == res["prealloc"]["files"] + res["delete_skipped"]


def test_file_sizes_follow_the_gamma_mean(helper: Path, disk: Path) -> None:
    """varmail.f's $filesize: gamma, mean 16384; shape 0 = every file exactly the mean."""
    res = run_helper(helper, disk / "g", "--iterations", "1", "--nthreads", "1", "--nfiles", "4000",
                     "--prealloc", "100", "--seed", "5")
    mean = res["prealloc"]["bytes"] / res["prealloc"]["files"]
    # gamma shape 1.5: sd = mean / sqrt(1.5); over 4000 files the mean's standard error is ~212 bytes
    assert res["prealloc"]["files"] == 4000 and abs(mean - 16384) < 5 * 212, mean
    sizes = [p.stat().st_size for p in (disk / "g").rglob("0*/*")]
    assert len(set(sizes)) > 1000  # really drawn, not one size
    fixed = run_helper(helper, disk / "f", "--iterations", "1", "--nthreads", "1", "--nfiles", "50",
                       "--prealloc", "100", "--filesize-gamma", "0", "--meanfilesize", "3000")
    assert fixed["prealloc"]["bytes"] == 50 * 3000


def test_duration_ends_the_run_at_an_iteration_boundary(helper: Path, disk: Path) -> None:
    res = run_helper(helper, disk / "d", "--duration", "1", "--nthreads", "2", "--nfiles", "100", "--seed", "2")
    assert 1.0 <= res["elapsed_s"] < 3.0
    assert res["iterations"] >= 2 and res["ops"]["create"]["count"] == res["iterations"]
    assert res["ops"]["close"]["count"] == 3 * res["iterations"]
    for h in (*res["ops"].values(), res["all"]):
        assert 0 < h["p50_us"] <= h["p95_us"] <= h["p99_us"] <= h["max_us"]
        assert 0 < h["mean_us"] <= h["max_us"]
    # on a disk filesystem an fsync waits for the device, a close does not
    assert res["ops"]["fsync"]["p50_us"] > 5 * res["ops"]["close"]["p50_us"]


def test_helper_refuses_what_cannot_fit_and_bad_arguments(helper: Path, disk: Path) -> None:
    p = subprocess.run([str(helper), "--dir", str(disk / "x"), "--iterations", "1", "--min-free", str(1 << 62)],
                       capture_output=True, text=True)
    assert p.returncode == 1 and "not enough space" in p.stderr and p.stdout == ""
    assert not (disk / "x").exists()  # refused before anything was made
    for bad in (["--iterations", "-1"], ["--iterations", "1", "--duration", "2"], ["--nthreads", "0", "--iterations",
                "1"], ["--iterations", "1", "--prealloc", "101"], ["--iterations", "1", "--bogus", "1"]):
        p = subprocess.run([str(helper), "--dir", str(disk / "y"), *bad], capture_output=True, text=True)
        assert p.returncode == 2 and "usage:" in p.stderr and p.stdout == "", bad
    assert not (disk / "y").exists()


# -- (b) through `iolab run` on an ext4 loop target ----------------------------------------------

def expand(m: Metric) -> set[str]:
    """Every concrete name a declaration with word-list placeholders stands for."""
    names = [m.name]
    while any("{" in n for n in names):
        out = []
        for n in names:
            ph = re.search(r"\{[a-z_]+:([^{}]+)\}", n)
            assert ph, n
            out += [n[: ph.start()] + w + n[ph.end():] for w in ph.group(1).split("|")]
        names = out
    return set(names)


@needs_root
def test_iolab_run_on_ext4_loop_gives_every_declared_metric(lab: Lab) -> None:
    spec = lab.spec(study_table("varmail-loop", repetitions=1, max_repetitions=1) + """
[target]
kind = "loop"
size = "64M"
filesystem = "ext4"

[workload]
kind = "varmail"
nfiles = 200
nthreads = 4
iterations = 300
iosize = "64k"
""")
    r = lab.iolab("run", spec, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = lab.report_json()
    assert [t["status"] for t in doc["trials"]] == ["ok"], [t["error"] for t in doc["trials"]]
    trial = doc["trials"][0]
    cls = registry.workload_class("varmail")
    declared = cls.metric_set(trial["params"]["_workload"])
    own = set().union(*(expand(m) for m in cls.metrics))
    produced = set(trial["metrics"])
    assert own <= produced, f"declared but not produced: {sorted(own - produced)}"
    assert declared.undeclared(produced) == []
    m = trial["metrics"]
    assert m["iterations"] == 300 and m["create_ops"] == 300 and m["fsync_ops"] == 600
    assert m["ops_per_s"] == pytest.approx(sum(m[f"{op}_ops"] for op in OPS_PER_ITERATION) / m["seconds"])
    assert m["fsyncs_per_s"] == pytest.approx(600 / m["seconds"])
    assert m["mb_per_s"] == pytest.approx((m["appended_bytes"] + m["read_bytes"]) / m["seconds"] / 1e6)
    assert declared.get("ops_per_s").aggregate == "harmonic"  # fixed iterations: fixed work
    assert "--seed" in trial["manifest"]["job"] and trial["manifest"]["workload_facts"]["seed"] >= 0
    lab.assert_nothing_left()


# -- (c) hostile parameters ------------------------------------------------------------------

HOSTILE: list[tuple[str, str, str]] = [
    # (workload lines, key the error must name, words it must say)
    ("nfiles = -1", "workload.nfiles", "greater than or equal to 1"),
    ("nfiles = \"many\"", "workload.nfiles", "valid integer"),
    ("nfiles = 1.5", "workload.nfiles", "integer"),
    ("nfiles = true", "workload.nfiles", ""),
    ("nfiles = 1000000000000", "workload.nfiles", "less than or equal"),
    ("nthreads = 0", "workload.nthreads", ""),
    ("iosize = \"-4k\"", "workload.iosize", "size"),
    ("iosize = \"11m\"", "workload.iosize", "at most 10m"),
    ("meanappendsize = 0", "workload.meanappendsize", "positive"),
    ("meanfilesize = \"1e400\"", "workload.meanfilesize", "size"),
    ("prealloc = 150", "workload.prealloc", ""),
    ("filesize_gamma = nan", "workload.filesize_gamma", ""),
    ("duration = -5", "workload.duration", ""),
    ("duration = \"forever\"", "workload.duration", "duration"),
    ("duration = 5\niterations = 10", "workload", "duration or iterations, not both"),
    ("seed = -1", "workload.seed", ""),
    ("nfile = 10", "workload.nfile", "unknown key"),
    # valid alone, but the file set cannot fit on the target: refused naming nfiles
    ("nfiles = 1000000\nmeanfilesize = \"1m\"", "workload", "nfiles = 1000000"),
]
LOOP_EXT4 = '[target]\nkind = "loop"\nsize = "64M"\nfilesystem = "ext4"\n'


@needs_root
def test_hostile_parameters_are_exit_2_naming_file_and_key(lab: Lab) -> None:
    specs = []
    for i, (lines, _, _) in enumerate(HOSTILE):
        specs.append(lab.spec(study_table("hostile-varmail") + LOOP_EXT4 + f'[workload]\nkind = "varmail"\n{lines}\n',
                              name=f"hostile-{i}.toml"))
    raw = lab.spec(study_table("raw-loop") + '[target]\nkind = "loop"\nsize = "64M"\n[workload]\nkind = "varmail"\n',
                   name="raw-loop.toml")
    results = drive(lab, [["run", str(s)] for s in [*specs, raw]])
    for (lines, key, words), spec, r in zip([*HOSTILE, ("(raw loop)", "workload", 'filesystem = "ext4"')],
                                            [*specs, raw], results, strict=True):
        err = one_line(r["stderr"])
        assert r["exit"] == 2 and not r["traceback"] and "Traceback" not in err, (lines, r)
        assert f"{spec}: {key}" in err, (lines, key, err)
        assert words in err, (lines, words, err)
    assert not lab.data.exists(), f"created {sorted(p.name for p in lab.data.rglob('*'))} in IOLAB_DATA"
    assert lab.scratch_entries() == []
