"""The job-file sandbox reads a job file as fio does, refuses what it must, and fio runs what it checked.

fio itself is the oracle (`fio --showcmd`, tests/core/fio_oracle.py): every walk-around below
is first shown to work on fio (fio really reads the line as exec_prerun, as an include, ...),
then shown to be refused; every accepted file reads the same to fio before and after the
sandbox renders it, and fio's reading of what runs names nothing outside the sandbox.
"""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest
from tests.core.fio_oracle import escapes_sandbox, fio_view, normalised

from iolab.core.errors import RefusedError
from iolab.fio import allowlist as allow
from iolab.fio import engine as fio_engine
from iolab.fio import sandbox as sb
from iolab.fio.reading import bc_integer

needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio")
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/root", "IOLAB_T_SPLIT": "exec_pre", "IOLAB_T_DIR": "../../etc"}


def _refusal(text: str) -> sb.JobFileRefused:
    with pytest.raises(sb.JobFileRefused) as info:
        sb.check_paths(sb.parse(text, "t.fio", env=ENV))
    return info.value


# (job text, line, words in the reason, what fio itself makes of the offending line)
WALKAROUNDS = {
    "env-prefix": ("[j]\n${IOLAB_T_UNSET}exec_prerun=touch /tmp/x\n", 2, ["exec_prerun", "after fio's substitutions"],
                   ("exec_prerun", "touch /tmp/x")),
    "env-split-name": ("[j]\n${IOLAB_T_SPLIT}run=touch /tmp/x\n", 2, ["exec_prerun"], ("exec_prerun", "touch /tmp/x")),
    "env-inside-name": ("[j]\nexec_${IOLAB_T_UNSET}prerun=touch /tmp/x\n", 2, ["exec_prerun"],
                        ("exec_prerun", "touch /tmp/x")),
    "env-path": ("[j]\nfilename=${IOLAB_T_DIR}/passwd\n", 2, ["climbs out", "'../../etc/passwd'"],
                 ("filename", "../../etc/passwd")),
    "comment-cut-engine": ("[j]\nioengine=exec#libaio\n", 2, ["engine 'exec'"], ("ioengine", "exec")),
    "leading-blanks": ("[j]\n \t exec_postrun=true\n", 2, ["exec_postrun"], ("exec_postrun", "true")),
    "blanks-around-eq": ("[j]\nexec_prerun   =true\n", 2, ["exec_prerun"], ("exec_prerun", "true")),
    "alias-readwrite-trim": ("[j]\nreadwrite=randtrim\n", 2, ["trims"], ("rw", "randtrim")),
    "dotdot-in-directory": ("[j]\ndirectory=a/../../..\n", 2, ["climbs out"], ("directory", "a/../../..")),
    "absolute-log": ("[j]\nwrite_lat_log=/etc/cron.d/x\n", 2, ["absolute"], ("write_lat_log", "/etc/cron.d/x")),
    "filename-list": ("[j]\nfilename=ok:/etc/passwd\n", 2, ["/etc/passwd"], ("filename", "ok:/etc/passwd")),
    "format-absolute": ("[j]\nfilename_format=/tmp/$jobname.$jobnum\n", 2, ["absolute"],
                        ("filename_format", "/tmp/$jobname.$jobnum")),
    "jobname-option": ("[j]\nname=../../x\n", 2, ["job name"], None),
    "dlopen-engine": ("[j]\nioengine=/tmp/iolab-evil.so\n", 2, ["dlopen"], ("ioengine", "/tmp/iolab-evil.so")),
    "external-engine": ("[j]\nioengine=external:/tmp/iolab-evil.so\n", 2, ["shared object"], None),
    "keyword-engine": ("[j]\nioengine=$ncpus\n", 2, ["ioengine"], None),
    "cgroup": ("[j]\ncgroup=iolab-x\n", 2, ["cgroup"], ("cgroup", "iolab-x")),
    "ioscheduler": ("[j]\nioscheduler=none\n", 2, ["scheduler"], None),
    "unlink": ("[j]\nunlink=1\n", 2, ["deletes"], ("unlink", "1")),
    "read_iolog": ("[j]\nread_iolog=log\n", 2, ["names its own files"], None),
    "replay_redirect": ("[j]\nreplay_redirect=/dev/sda\n", 2, ["another device"], None),
    "filedelete": ("[j]\nioengine=filedelete\n", 2, ["deletes files"], ("ioengine", "filedelete")),
    "section-traversal": ("[../../etc/x]\nsize=1m\n", 1, ["section header"], None),
    "numjobs-bomb": ("[j]\nnumjobs=100000\n", 2, ["up to 256"], ("numjobs", "100000")),
    "option-before-section": ("exec_prerun=true\n[j]\nsize=1m\n", 1, ["outside any [section]"], None),
}

INCLUDES = ["include other.fio", "include=other.fio", "include\tother.fio", "includeother.fio", "include_me=1",
            "   include other.fio", "include other.fio ; a comment", "include"]


@needs_fio
@pytest.mark.parametrize("case", sorted(WALKAROUNDS))
def test_walkaround_fio_accepts_is_refused(case: str) -> None:
    """fio reads the line as the forbidden option (so a raw-text check is walked around); iolab refuses it."""
    text, line, words, fio_reads = WALKAROUNDS[case]
    if fio_reads is not None:
        view = fio_view(text, ENV)
        assert fio_reads in [(n, v) for _, n, v in view], f"fio reads {view}, not {fio_reads}"
    exc = _refusal(text)
    assert exc.line == line and str(exc).startswith(f"t.fio:{line}: ")
    for w in words:
        assert w in str(exc), str(exc)


@needs_fio
@pytest.mark.parametrize("spelling", INCLUDES)
def test_every_include_spelling_is_an_include_to_fio_and_refused(spelling: str, tmp_path) -> None:
    """fio treats any line starting with 'include' as an include of the text after 8 characters."""
    job = tmp_path / "job.fio"
    job.write_text(f"[j]\nsize=1m\n{spelling}\n")
    res = subprocess.run(["fio", "--showcmd", str(job)], capture_output=True, text=True, cwd=tmp_path, timeout=30)
    # fio tries to open the rest of the line as a job file (a bare "include" makes it read past the line: SIGSEGV)
    assert "include file" in res.stdout + res.stderr or "job file" in res.stdout + res.stderr \
        or res.returncode < 0, f"fio did not try to include for {spelling!r}: {res.stdout}{res.stderr}"
    exc = _refusal(f"[j]\nsize=1m\n{spelling}\n")
    assert exc.line == 3 and "include" in exc.reason


@needs_fio
def test_long_line_is_read_in_pieces_by_fio_and_refused() -> None:
    """fgets(8192): the 8192nd byte of a line starts a new line for fio: a hidden option."""
    text = "[j]\ndescription=" + "x" * (8191 - len("description=")) + "exec_prerun=touch /tmp/x\n"
    assert ("exec_prerun", "touch /tmp/x") in [(n, v) for _, n, v in fio_view(text, ENV)]
    exc = _refusal(text)
    assert exc.line == 2 and "pieces" in exc.reason


@pytest.mark.parametrize("text,line,word", [
    ("[j]\nsize=1m\x00exec_prerun=x\n", 2, "NUL"),
    ("[j]\nsize=1m\x1b[2J\n", 2, "control character"),
    ("[j]\nfilename=a\rb\n", 2, "control character"),
    ("", None, "no job"),
    ("[global]\nbs=4k\n", None, "no job"),
    ("[j]\nbs=$pagesize*4k\n", 2, "bc"),
    ("[j]\nbs=$pagesize/0\n", 2, "bc"),
    ("[j]\nfilename=a\\:b\n", 2, "'\\\\'"),
    ("[j]\nbuffer_pattern=$HOME\n", 2, "'$'"),
    ("[j]\nmem=mmaphuge:/dev/hugepages/f\n", 2, "expected one of"),
    ("[j]\nfilename=\n", 2, "empty"),
    ("[j]\ndirectory=${IOLAB_T_UNSET}\n", 2, "unset ${VAR}"),
    ("[a b]\nsize=1m\n", 1, "section header"),
    ("[.hidden]\nsize=1m\n", 1, "section header"),
    ("[j]\nrw=randread,trim\n", 2, "expected one of"),
    ("[j]\nEXEC_PRERUN=true\n", 2, "exec_prerun"),
    ("[j]\nfill_fs=1\n", 2, "fills"),
    ("[j]\nprofile=tiobench\n", 2, "profile"),
])
def test_refused_with_line(text: str, line: int | None, word: str) -> None:
    exc = _refusal(text)
    assert exc.line == line, str(exc)
    assert word in str(exc), str(exc)


@pytest.mark.parametrize("value", ["'/root/.ssh/id_ed25519'", "0xff'/etc/shadow'", "\"key\"'secret'%o",
                                   "abc", "0xZZ", "\"open", "%p"])
def test_a_data_pattern_outside_fios_grammar_is_refused(value: str) -> None:
    """fio's lib/pattern.c reads a 'quoted name' in a pattern as "open this file and write its bytes
    as the data": a copy of a root-only file into a file the job leaves behind. The value is
    checked against the grammar's allowed forms, so a file form anywhere in it is refused."""
    for option in ("buffer_pattern", "verify_pattern"):
        exc = _refusal(f"[j]\nsize=64k\n{option}={value}\n")
        assert exc.line == 3 and "refused" in exc.reason, str(exc)
        if "'" in value:
            assert "read that file" in exc.reason, str(exc)


@needs_fio
@pytest.mark.parametrize("value", ["\"abcd\"", "-1024", "66", "0xFF0X1", "%o", "\"123\"0xFFeeCC",
                                   "-100xab\"1\"%o\"2\"", "%o0xdeadbeef%o"])
def test_fios_own_pattern_examples_pass_and_fio_reads_them(value: str, tmp_path) -> None:
    """The examples of lib/pattern.c's own comment: accepted, and fio parses the rendered job."""
    option = "verify_pattern" if "%o" in value else "buffer_pattern"
    job = sb.parse(f"[j]\nsize=64k\nrw=write\nverify=pattern\n{option}={value}\n", "t.fio", env=ENV)
    assert sb.check_paths(job) == []
    f = tmp_path / "j.fio"
    f.write_text(f"[j]\nfilename={tmp_path}/d\nsize=64k\nrw=write\nverify=pattern\n{option}={value}\n")
    res = subprocess.run(["fio", "--parse-only", str(f)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


def test_huge_job_text_is_refused_without_parsing() -> None:
    exc = _refusal("[j]\n" + "bs=4k\n" * 200_000)
    assert "larger than" in exc.reason


# Accepted job files with everything fio transforms: fio must read them the same before and after.
ACCEPTED = {
    "plain": "[global]\nrw=randread\nbs=4k\nsize=16m\n[a]\niodepth=4\n[b]\nstonewall\n",
    "comments-and-blanks": "; head\n# head\n\n[global]  ; c\n  bs = 4k   # trailing\n\tsize=16m;c\n[job]\nrw=write\n",
    "crlf": "[global]\r\nbs=4k\r\n[job]\r\nsize=1m\r\n",
    "env": "[job]\nsize=${IOLAB_T_UNSET}16m\nbs=4${IOLAB_T_UNSET}k\ndescription=home is ${HOME}\n",
    "keywords": "[job]\nnumjobs=$ncpus\niodepth=$ncpus*2+1\nbs=$pagesize\nsize=$mb_memory/$mb_memory*16777216\n",
    "bc-arith": "[job]\niodepth=$ncpus*(3+1)-$ncpus%2\nbs=$pagesize*2\n",
    "aliases": "[job]\nreadwrite=randrw\nblocksize=8k\nnr_files=2\ntimeout=1\niomem=malloc\n",
    "paths": "[global]\ndirectory=sub:other\n[job]\nfilename=a:b::c\nfilename_format=$JOBNAME.$filenum\n"
             "write_bw_log=logs/bw\nwrite_lat_log\nwrite_iolog=io.log\n",
    "later-global": "[global]\nbs=4k\n[a]\nsize=1m\n[global2]\nrw=write\n[b]\nsize=2m\n",
    "devices": "[job]\nfilename=/dev/null\n[job2]\nfilename=/dev/zero\nrw=read\n",
    "engines": "".join(f"[{e}]\nioengine={e}\nsize=1m\n" for e in allow.ENGINES),
    "names": "[burn_2x50%_q]\nioengine=cpuio\ncpuload=50\n[a.b-c,d+e@f=g]\nsize=1m\n",
}


@needs_fio
@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_fio_reads_the_rendered_text_as_the_original(case: str) -> None:
    text = ACCEPTED[case]
    job = sb.parse(text, "t.fio", env=ENV)
    devices = sb.check_paths(job)
    rendered = job.render()
    raw_view, canon_view = fio_view(text, ENV), fio_view(rendered, ENV)
    assert normalised(canon_view) == normalised(raw_view), f"\nraw: {raw_view}\ncanonical: {canon_view}"
    assert escapes_sandbox(canon_view, set(devices)) == []
    # canonical text is a fixed point of the sandbox, and fio's substitutions have nothing left to do
    assert sb.parse(rendered, "t.fio", env={}).render() == rendered
    assert "${" not in rendered and not any(k in rendered for k in ("$pagesize", "$mb_memory", "$ncpus"))
    assert all(len(line.encode()) < 8191 for line in rendered.splitlines())


def test_rendered_text_puts_files_in_the_given_directory() -> None:
    job = sb.parse("[job]\nsize=1m\n", "t.fio", env={})
    assert job.render("/var/tmp/iolab/x").startswith("[global]\ndirectory=/var/tmp/iolab/x\n")
    own = sb.parse("[global]\ndirectory=sub\n[job]\nsize=1m\n", "t.fio", env={})
    assert "directory=/var" not in own.render("/var/tmp/iolab/x"), "the file's own (relative) directory wins"


def test_caps_bound_every_job() -> None:
    text = "[global]\nruntime=900\nsize=10g\n[a]\nramp_time=60\n[b]\nsize=4k\nruntime=2s\n[c]\nsize=50%\n"
    job = sb.parse(text, "t.fio", env={})
    out = job.render(caps=sb.Caps(runtime_s=1.0, size=16 << 20))
    sections = {s.split("]")[0]: s for s in out.split("\n[")}
    assert all(o in sections["a"] for o in ("runtime=1000ms", "ramp_time=1000ms", "size=16777216"))
    assert "size=4096" in sections["b"] and "runtime=1000ms" in sections["b"]
    assert "size=16777216" in sections["c"], "an unparsable size is replaced by the cap"
    assert "900" not in out and "10g" not in out
    assert job.estimate_seconds(sb.Caps(runtime_s=1.0)) < 10


@pytest.mark.skipif(shutil.which("bc") is None, reason="needs bc")
def test_bc_integer_agrees_with_bc() -> None:
    """The arithmetic fio hands to bc (scale 0), computed by iolab: same answers as bc itself."""
    rng = random.Random(5)
    exprs = ["4096*2", "10/3", "-7/2", "-7%3", "7%-3", "2^10", "-2^2", "(1+2)*3", "2*3+4*5", "100-1-1", "2^3^2",
             "17/4*4", "1+-1", "--3", "(((7)))", "8/(3-1)"]
    for _ in range(60):
        a, b, c = rng.randint(-50, 5000), rng.randint(1, 60), rng.randint(0, 9)
        exprs.append(f"{a}{rng.choice('+-*/%')}{b}{rng.choice('+-*/%')}{c or 1}")
    for e in exprs:
        out = subprocess.run(["bc"], input=e + "\n", capture_output=True, text=True).stdout.strip()
        assert bc_integer(e) == (int(out) if out else None), e  # bc prints nothing on stdout for an error
    for bad in ["4k*2", "x", "1/0", "2^-1", "a=1", "", "1+", "quit", "2^999", "--3", "++3", "1--2"]:
        assert bc_integer(bad) is None, bad


@needs_fio
def test_allowlisted_names_are_the_fio_options_they_claim() -> None:
    """Every allowlisted name or alias is a real fio option, and an alias names the option listed."""
    engine_options = set()
    for engine in allow.ENGINES:
        res = subprocess.run(["fio", f"--enghelp={engine}"], capture_output=True, text=True, timeout=30)
        out = res.stdout + res.stderr
        assert "not loadable" not in out and "not found" not in out, f"engine {engine}: {out}"
        engine_options |= {ln.split(":")[0].strip() for ln in res.stdout.splitlines() if ":" in ln}
    for name in list(allow.OPTIONS) + list(allow.ALIASES):
        canonical = allow.ALIASES.get(name, name)
        if name in engine_options:
            continue
        res = subprocess.run(["fio", f"--cmdhelp={name}"], capture_output=True, text=True, timeout=30)
        first = res.stdout.strip().split(":", 1)[0].strip()
        assert first == canonical, f"fio --cmdhelp={name} names {first!r}, the allowlist says {canonical!r}"


def test_renderer_refuses_what_the_sandbox_refuses() -> None:
    for opts in ({"exec_prerun": "true"}, {"ioengine": "exec"}, {"rw": "trim"}, {"filename": "a b"},
                 {"size": "1;exec_prerun=x"}, {"cgroup": "x"}, {"readwrite": "read"}):
        with pytest.raises(RefusedError):
            fio_engine.render_job(opts, [("j", {})])
    text = fio_engine.render_job({"filename": "/dev/loop7", "rw": "randread", "direct": True, "runtime": "10s"},
                                 [("iolab", {})])
    assert "filename=/dev/loop7" in text and "direct=1" in text


def test_architecture_doc_lists_every_allowed_option() -> None:
    """docs/architecture.md's allowlist table stays true: every allowed option is in it."""
    from tests.core.helpers import REPO

    doc = (REPO / "docs" / "architecture.md").read_text()
    section = doc[doc.index("## The job-file sandbox"):doc.index("## Dependencies")]
    missing = [name for name in allow.OPTIONS if f"`{name}`" not in section]
    assert missing == [], f"not in the doc's table: {missing}"
    for engine in allow.ENGINES:
        assert f"`{engine}`" in section
