"""Hostile specs and job files: every one is an exit 2 naming the file and the key or line.

Each corpus case runs the real `iolab` command *without* --dry-run (a wrongly accepted input
would really run) and must: exit 2; name the file and the key or line; print no Python
traceback; create nothing in IOLAB_DATA or IOLAB_SCRATCH; and leave a canary directory
outside the sandbox (the place the case aims at) exactly as it was. A fuzz loop then
mutates valid specs and job files (fixed seed, --dry-run, one process: cli_driver) and
asserts exit 0 or 2, never a traceback, never a hang, nothing created; every job file it
accepts is read by fio itself and must name nothing outside the sandbox.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tests.core.fio_oracle import escapes_sandbox, fio_view, normalised
from tests.core.helpers import REPO, Lab, needs_fio, needs_root, one_line
from tests.core.hostile_gen import write_cases

from iolab.core.paths import cache_dir
from iolab.fio import sandbox as fio_sandbox

GOOD_STUDY = '[study]\nname = "hostile"\n'
HOST = '[target]\nkind = "host"\n'
FIO = '[workload]\nkind = "fio"\nrw = "randread"\nbs = "4k"\nsize = "16M"\nruntime = 1\nramp_time = 0\n'


@dataclass
class Canary:
    """A directory outside the sandbox that hostile cases aim at; it must never change."""

    dir: Path
    snapshot: dict[str, tuple[int, float, bytes]] = field(default_factory=dict)

    def take(self) -> dict[str, tuple[int, float, bytes]]:
        out = {}
        for p in sorted(self.dir.rglob("*")):
            st = os.lstat(p)
            out[str(p.relative_to(self.dir))] = (st.st_mode, st.st_mtime, p.read_bytes() if p.is_file() else b"")
        return out


@pytest.fixture
def canary() -> Iterator[Canary]:
    d = Path(tempfile.mkdtemp(prefix="iolab-canary-", dir="/tmp"))
    (d / "victim").write_text("canary: must never be written\n")
    (d / "sub").mkdir()
    c = Canary(d)
    c.snapshot = c.take()
    try:
        yield c
    finally:
        shutil.rmtree(d, ignore_errors=True)


@dataclass
class Case:
    """argv after `iolab`; words the message must contain (besides the file); extra environment."""

    argv: list[str]
    words: list[str]
    env: dict[str, str] = field(default_factory=dict)
    file: str | None = None  # what the message must name (default: the spec file)


def _job(lab: Lab, text: str | bytes, name: str = "hostile.fio") -> Path:
    p = lab.root / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


def _spec(lab: Lab, text: str | bytes, name: str = "hostile.toml") -> Path:
    p = lab.root / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


def _jobcase(text: str, line: int, *words: str, env: dict[str, str] | None = None) -> Callable[[Lab, Canary], Case]:
    def build(lab: Lab, c: Canary) -> Case:
        job = _job(lab, text.format(c=c.dir))
        return Case(["run", str(job)], [f"{job}:{line}:", *[w.format(c=c.dir) for w in words]], env or {})
    return build


def _speccase(text: str, key: str, *words: str) -> Callable[[Lab, Canary], Case]:
    def build(lab: Lab, c: Canary) -> Case:
        spec = _spec(lab, text.format(c=c.dir))
        return Case(["run", str(spec)], [f"{spec}: {key}", *words])
    return build


def _deep(lab: Lab, c: Canary) -> Case:
    spec = _spec(lab, GOOD_STUDY + HOST + FIO + "deep = " + "[" * 5000 + "]" * 5000 + "\n")
    return Case(["run", str(spec)], [f"{spec}: (syntax)", "nested too deeply"])


def _huge_matrix(lab: Lab, c: Canary) -> Case:
    axes = "\n".join(f'{k} = [{", ".join(str(i) for i in range(1, 41))}]'
                     for k in ("iodepth", "numjobs", "fsync", "fdatasync", "rwmixread"))
    spec = _spec(lab, GOOD_STUDY + HOST + '[workload]\nkind = "fio"\n' + axes + "\n")
    return Case(["run", str(spec)], [f"{spec}: (matrix)", "102400000 configurations", "at most 100000"])


def _special(path_of: Callable[[Lab, Canary], str], key: str, *words: str) -> Callable[[Lab, Canary], Case]:
    def build(lab: Lab, c: Canary) -> Case:
        p = path_of(lab, c)
        return Case(["run", p], [f"{p}: {key}", *words], file=p)
    return build


def _fifo(lab: Lab, c: Canary) -> str:
    p = lab.root / "fifo.toml"
    os.mkfifo(p)
    return str(p)


def _bigfile(lab: Lab, c: Canary) -> str:
    p = lab.root / "big.toml"
    with open(p, "wb") as f:
        f.truncate(64 << 20)
    return str(p)


def _dir(lab: Lab, c: Canary) -> str:
    p = lab.root / "dir.toml"
    p.mkdir()
    return str(p)


def _option(option: str, value: Callable[[Lab, Canary], str], *words: str) -> Callable[[Lab, Canary], Case]:
    def build(lab: Lab, c: Canary) -> Case:
        spec = _spec(lab, GOOD_STUDY + HOST + FIO)
        v = value(lab, c)
        return Case(["run", str(spec), option, v], [f"{option} {v}", *words], file=v)
    return build


CASES: dict[str, Callable[[Lab, Canary], Case]] = {
    # -- job files: every item of the point 3 ---------------------------------------------
    "include-space": _jobcase("[j]\nsize=1m\ninclude {c}/victim\n", 3, "include"),
    "include-eq": _jobcase("[j]\nsize=1m\ninclude={c}/victim\n", 3, "include"),
    "include-tab": _jobcase("[j]\nsize=1m\ninclude\t{c}/victim\n", 3, "include"),
    "include-glued": _jobcase("[j]\nsize=1m\ninclude_{c}\n", 3, "include"),
    "engine-dlopen": _jobcase("[j]\nioengine={c}/evil.so\n", 2, "dlopen"),
    "engine-external": _jobcase("[j]\nioengine=external:{c}/evil.so\n", 2, "shared object"),
    "engine-exec": _jobcase("[j]\nioengine=exec\nprogram=/bin/touch\narguments={c}/pwned\n", 2, "runs a program"),
    "engine-filedelete": _jobcase("[j]\nioengine=filedelete\nfilename={c}/victim\n", 2, "deletes files"),
    "engine-sg": _jobcase("[j]\nioengine=sg\n", 2, "SCSI"),
    "exec-prerun": _jobcase("[j]\nexec_prerun=touch {c}/pwned\n", 2, "exec_prerun"),
    "exec-postrun": _jobcase("[j]\nsize=1m\nexec_postrun=touch {c}/pwned\n", 3, "exec_postrun"),
    "exec-via-env": _jobcase("[j]\n${{IOLAB_HOSTILE_UNSET}}exec_prerun=touch {c}/pwned\n", 2, "exec_prerun",
                             "after fio's substitutions"),
    "exec-via-env-split": _jobcase("[j]\n${{IOLAB_HOSTILE_HALF}}_prerun=touch {c}/pwned\n", 2, "exec_prerun",
                                   env={"IOLAB_HOSTILE_HALF": "exec"}),
    "exec-after-comment-cut": _jobcase("[j]\nexec_prerun=touch {c}/pwned # harmless?\n", 2, "exec_prerun"),
    "exec-in-long-line": _jobcase("[j]\ndescription=" + "x" * 8180 + "exec_prerun=touch {c}/pwned\n", 2,
                                  "pieces"),
    "trigger": _jobcase("[j]\ntrigger=touch {c}/pwned\n", 2, "runs a command"),
    "ioscheduler": _jobcase("[j]\nioscheduler=none\n", 2, "scheduler"),
    "cgroup": _jobcase("[j]\ncgroup=iolab-hostile\n", 2, "cgroup"),
    "cgroup-weight": _jobcase("[j]\ncgroup_weight=100\n", 2, "cgroup"),
    "unlink": _jobcase("[j]\nfilename=data\nunlink=1\n", 3, "deletes"),
    "trim": _jobcase("[j]\nrw=trim\n", 2, "trims"),
    "randtrim-alias": _jobcase("[j]\nreadwrite=randtrim\n", 2, "trims"),
    "trimwrite": _jobcase("[j]\nrw=trimwrite\n", 2, "trims"),
    # -- paths ------------------------------------------------------------------------------------
    "filename-absolute": _jobcase("[j]\nrw=write\nsize=4k\nfilename={c}/victim\n", 4, "{c}/victim", "absolute"),
    "filename-traversal": _jobcase("[j]\nfilename=../../../../../../{c}/victim\n", 2, "climbs out"),
    "filename-list": _jobcase("[j]\nfilename=ok:{c}/victim\n", 2, "{c}/victim"),
    "directory": _jobcase("[j]\ndirectory={c}\n", 2, "absolute"),
    "directory-traversal": _jobcase("[j]\ndirectory=../../..\n", 2, "climbs out"),
    "filename-format": _jobcase("[j]\nfilename_format={c}/$jobname\n", 2, "absolute"),
    "opendir": _jobcase("[j]\nopendir={c}\n", 2, "absolute"),
    "read-iolog": _jobcase("[j]\nread_iolog={c}/victim\n", 2, "names its own files"),
    "write-iolog": _jobcase("[j]\nwrite_iolog={c}/log\n", 2, "absolute"),
    "bw-log": _jobcase("[j]\nwrite_bw_log={c}/bw\n", 2, "absolute"),
    "hist-log-traversal": _jobcase("[j]\nwrite_hist_log=../../h\n", 2, "climbs out"),
    "replay-redirect": _jobcase("[j]\nreplay_redirect=/dev/sda\n", 2, "another device"),
    "section-traversal": _jobcase("[../../../{c}/x]\nsize=1m\n", 1, "section header"),
    "name-traversal": _jobcase("[j]\nname=../x\n", 2, "job name"),
    "filename-dev-directory": _jobcase("[j]\nfilename=/dev/shm\n", 2, "not a block device"),
    "newline-via-env": _jobcase("[j]\ndescription=${{IOLAB_HOSTILE_NL}}\n", 2, "description",
                                env={"IOLAB_HOSTILE_NL": "x\nexec_prerun=true"}),
    "nul-in-job": _jobcase("[j]\nsize=1m\x00\nexec_prerun=touch {c}/pwned\n", 2, "NUL"),
    "non-utf8-job": lambda lab, c: Case(["run", str(_job(lab, b"[j]\nsize=1m\ndescription=\xff\xfe\n"))],
                                        ["(line 3)", "not UTF-8"]),
    # -- specs ------------------------------------------------------------------------------------
    "spec-nul-string": _speccase(GOOD_STUDY + '[target]\nkind = "host"\ndirectory = "/tmp\\u0000x"\n' + FIO,
                                 "target.directory:", "NUL"),
    "spec-newline-in-value": _speccase(GOOD_STUDY + HOST + FIO.replace('"randread"', '"randread\\nexec_prerun=x"'),
                                       "workload.rw:", "control characters"),
    "spec-long-path": _speccase(GOOD_STUDY + '[target]\nkind = "host"\ndirectory = "/' + "a" * 5000 + '"\n' + FIO,
                                "target.directory:", "at most 4096"),
    "spec-long-component": _speccase(GOOD_STUDY + '[target]\nkind = "host"\ndirectory = "/tmp/' + "a" * 300 + '"\n'
                                     + FIO, "target.directory:", "longer than 255"),
    "spec-traversal-device": _speccase(GOOD_STUDY + '[target]\nkind = "device"\ndevice = "{c}/../../dev/null"\n' + FIO,
                                       "target.device:", "not a block device"),
    "spec-device-regular-file": _speccase(GOOD_STUDY + '[target]\nkind = "device"\ndevice = "{c}/victim"\n' + FIO,
                                          "target.device:", "regular file"),
    "spec-device-under-sys": _speccase(GOOD_STUDY + '[target]\nkind = "device"\ndevice = "/sys/block/loop0"\n' + FIO,
                                       "target.device:", "directory"),
    "spec-cgroups-device-file": _speccase(GOOD_STUDY + '[target]\nkind = "cgroups"\ndevice = "{c}/victim"\n'
                                          '[workload]\nkind = "fio-groups"\n', "target.device:", "regular file"),
    "spec-cgroups-device-sys": _speccase(GOOD_STUDY + '[target]\nkind = "cgroups"\ndevice = "/sys/class/block/loop0"\n'
                                         '[workload]\nkind = "fio-groups"\n', "target.device:", "directory"),
    "spec-record-zero": _speccase(GOOD_STUDY + HOST + '[workload]\nkind = "iozone"\nrecord = 0\n', "workload.record:",
                                  "positive size"),
    "spec-runtime-inf": _speccase(GOOD_STUDY + HOST + FIO.replace("runtime = 1", "runtime = inf"), "workload.runtime:",
                                  "finite number"),
    "spec-size-1e400": _speccase(GOOD_STUDY + HOST + FIO.replace('"16M"', '"1e400"'), "workload.size:", "1e400"),
    "spec-bool-for-number": _speccase(GOOD_STUDY + HOST + FIO + "iodepth = true\n", "workload.iodepth:",
                                      "expected a number"),
    "spec-repetitions-nan": _speccase('[study]\nname = "h"\nci_target = nan\n' + HOST + FIO, "study.ci_target:",
                                      "finite number"),
    "spec-trial-timeout-zero": _speccase('[study]\nname = "h"\ntrial_timeout = 0\n' + HOST + FIO,
                                         "study.trial_timeout:", "longer than 0"),
    "spec-wrong-type-table": _speccase('target = "host"\n' + GOOD_STUDY + FIO, "target:", "expected a table"),
    "spec-huge-matrix": _huge_matrix,
    "spec-deep-nesting": _deep,
    "spec-non-utf8": lambda lab, c: Case(["run", str(_spec(lab, GOOD_STUDY.encode() + b"description = \"\xff\"\n"))],
                                         ["(line 3)", "not UTF-8"]),
    # -- the spec file itself ---------------------------------------------------------------------
    "file-fifo": _special(_fifo, "(file)", "FIFO"),
    "file-directory": _special(_dir, "(file)", "directory"),
    "file-dev-zero": _special(lambda lab, c: "/dev/zero", "(file)", "character device"),
    "file-dev-stdin": _special(lambda lab, c: "/dev/stdin", "(file)", "not a regular file"),
    "file-huge": _special(_bigfile, "(file)", "1024 KiB"),
    "file-proc": _special(lambda lab, c: "/proc/self/status", "(syntax)"),
    # -- where results go -------------------------------------------------------------------------
    "db-directory": _option("--db", lambda lab, c: str(c.dir), "directory"),
    "db-proc": _option("--db", lambda lab, c: "/proc/iolab.sqlite", "proc filesystem"),
    "db-sys": _option("--db", lambda lab, c: "/sys/kernel/iolab.sqlite", "sysfs"),
    "db-not-sqlite": _option("--db", lambda lab, c: str(c.dir / "victim"), "not an SQLite database"),
    "db-device": _option("--db", lambda lab, c: "/dev/null", "character device"),
    "db-under-a-file": _option("--db", lambda lab, c: str(c.dir / "victim" / "x.sqlite"), "not a directory"),
    "output-directory": _option("-o", lambda lab, c: str(c.dir), "directory"),
    "output-proc": _option("-o", lambda lab, c: "/proc/iolab.html", "proc filesystem"),
    "output-device": _option("-o", lambda lab, c: "/dev/full", "character device"),
    # a regular file is a file the user lets a study overwrite in a host directory: a directory is neither
    "destroy-data-not-a-device": _option("--destroy-data", lambda lab, c: str(c.dir), "a directory"),
}


@needs_root
@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_input_is_refused_with_exit_2(lab: Lab, canary: Canary, case: str) -> None:
    c = CASES[case](lab, canary)
    lab.env.update(c.env)
    t0 = time.monotonic()
    r = lab.iolab(*c.argv, timeout=120)
    msg = one_line(r.stderr)
    assert r.returncode == 2, f"exit {r.returncode}:\n{r.stdout}\n{r.stderr}"
    assert "Traceback" not in r.stderr, r.stderr
    assert (c.file or c.argv[1]) in msg, f"the message must name {c.file or c.argv[1]}:\n{r.stderr}"
    for w in c.words:
        assert one_line(w) in msg, f"the message must say {w!r}:\n{r.stderr}"
    assert time.monotonic() - t0 < 60, "refused, but only after a long time"
    assert not lab.data.exists(), f"created {sorted(p.name for p in lab.data.rglob('*'))} in IOLAB_DATA"
    assert lab.scratch_entries() == [], f"created {lab.scratch_entries()} in IOLAB_SCRATCH"
    assert canary.take() == canary.snapshot, "the canary directory outside the sandbox changed"


@needs_root
def test_ro_places_for_results_are_refused(lab: Lab) -> None:
    """A --db or -o on a read-only filesystem is refused before the run, not after it."""
    ro = lab.root / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "iolab-test-ro", str(ro)], check=True)
    try:
        spec = _spec(lab, GOOD_STUDY + HOST + FIO)
        for option, value in (("--db", ro / "r.sqlite"), ("-o", ro / "sub" / "report.html")):
            r = lab.iolab("run", spec, option, value)
            assert r.returncode == 2, r.stderr
            assert f"{option} {value}" in one_line(r.stderr) and "read-only" in r.stderr, r.stderr
            assert not lab.data.exists() and lab.scratch_entries() == []
    finally:
        subprocess.run(["umount", str(ro)], check=True)


@needs_root
def test_dry_run_creates_nothing_even_with_every_option(lab: Lab, tmp_path: Path) -> None:
    spec = _spec(lab, GOOD_STUDY + '[target]\nkind = "loop"\nsize = "64M"\n' + FIO)
    db, out = tmp_path / "new" / "r.sqlite", tmp_path / "new2" / "report.html"
    r = lab.iolab("run", spec, "--dry-run", "--db", db, "-o", out)
    assert r.returncode == 0, r.stderr
    assert "will create or touch" in r.stdout
    assert not db.parent.exists() and not out.parent.exists()
    assert not lab.data.exists() and lab.scratch_entries() == []


# -- the fuzz loop ------------------------------------------------------------------------------
FUZZ_SEED = 20240610
FUZZ_SPECS, FUZZ_JOBS = 500, 500
ORACLE_SAMPLE = 60  # accepted job files also read by fio itself (3 fio runs each)


@needs_fio
def test_fuzzed_specs_and_job_files_exit_0_or_2_never_a_traceback(lab: Lab, canary: Canary) -> None:
    cases_dir = lab.root / "fuzz"
    cases_dir.mkdir()
    paths = write_cases(cases_dir, FUZZ_SPECS, FUZZ_JOBS, FUZZ_SEED)
    for p in paths:  # aim the cases at the canary, not at /tmp
        p.write_bytes(p.read_bytes().replace(b"/tmp/", str(canary.dir).encode() + b"/"))
    env = {k: lab.env[k] for k in ("IOLAB_DATA", "IOLAB_SCRATCH")}
    env["IOLAB_CACHE"] = str(cache_dir())  # YCSB's jars (./setup.sh install): ycsb specs get past the build check
    argvs = [["run", str(p), "--dry-run"] for p in paths]
    argvs += [["run", str(paths[0]), "--dry-run", "--db", str(canary.dir)], ["runs", "--db", str(canary.dir / "x")],
              ["report", "latest", "-o", "/proc/x"], ["compare", "a", "b"], ["run", "--resume", "latest"]]
    cases, results = lab.root / "cases.json", lab.root / "results.json"
    cases.write_text(json.dumps([{"argv": a, "env": env} for a in argvs]))
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "tests.core.cli_driver", str(cases), str(results)], cwd=REPO, check=True,
                   timeout=900)
    elapsed = time.monotonic() - t0
    out = json.loads(results.read_text())
    bad = [(a, r) for a, r in zip(argvs, out, strict=False)
           if r["traceback"] or r["hang"] or r["exit"] not in (0, 2) or "Traceback" in r["stderr"]]
    assert not bad, "\n\n".join(f"{a}: exit {r['exit']} hang={r['hang']}\n{r['traceback'] or r['stderr']}"
                                for a, r in bad[:5])
    accepted = [Path(a[1]) for a, r in zip(argvs, out, strict=False) if r["exit"] == 0 and a[0] == "run"]
    compared = 0
    jobs = [p for p in accepted if p.suffix == ".fio"]
    for p in jobs[:ORACLE_SAMPLE]:  # fio's own reading of what would run names nothing outside the sandbox
        job = fio_sandbox.parse(p.read_text(), str(p))
        devices = fio_sandbox.check_paths(job)
        escapes = escapes_sandbox(fio_view(job.render("/var/tmp/iolab-x")), set(devices), ("/var/tmp/iolab-x",))
        assert escapes == [], f"{p}: {escapes}\n{p.read_text()}"
        # and where fio can read the original file, it reads it as iolab did: rendering changed nothing
        try:
            raw = fio_view(p.read_text())
        except AssertionError:
            continue  # e.g. `rw = write`: fio refuses the blank, iolab renders rw=write
        assert normalised(raw) == normalised(fio_view(job.render())), p.read_text()
        compared += 1
    refused = sum(r["exit"] == 2 for r in out)
    print(f"\nfuzz: {len(out)} cases in {elapsed:.0f} s: {len(accepted)} accepted ({compared} of the first "
          f"{ORACLE_SAMPLE} job files read identically by fio before and after rendering), {refused} refused, "
          "0 tracebacks")
    assert refused > len(out) // 2 and len(accepted) > 100 and compared > ORACLE_SAMPLE // 2, \
        "the generator should produce both kinds"
    assert not lab.data.exists() and lab.scratch_entries() == []
    assert canary.take() == canary.snapshot
