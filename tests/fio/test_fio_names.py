"""fio_names computes the paths fio opens: fio itself is the oracle.

Each job runs for real with `create_only=1` in an empty directory, so fio lays out exactly
the files it would open and nothing else; every file it made must be one fio_names predicted
(an explicit path, or a name a Generated pattern matches), and the pattern must not match
names fio would not make. Then the check built on it refuses a link planted at any of them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from iolab.fio import names as fio_names
from iolab.fio import sandbox as fio_sandbox

pytestmark = pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio")

JOBS = {
    "default": "[j]\nsize=4k\n",
    "numjobs-nrfiles": "[j]\nsize=48k\nnumjobs=3\nnrfiles=2\n",
    "format-filenum": "[g]\nsize=48k\nnrfiles=3\nfilename_format=f$filenum\n",
    "format-case": "[g]\nsize=4k\nnumjobs=2\nfilename_format=X$JobNum-$FILENUM.$jobname\n",
    "format-clientuid": "[g]\nsize=4k\nfilename_format=c$clientuid.$jobnum\n",
    "format-repeat": "[g]\nsize=4k\nnumjobs=2\nfilename_format=$jobnum.$jobnum\n",
    "dir-list": "[j]\nsize=4k\nnumjobs=3\ndirectory=a:b\n",
    "global-filename": "[global]\nfilename=shared\nsize=4k\n[j1]\n[j2]\n",
    "global-dir-own-file": "[global]\ndirectory=a\n[j]\nfilename=own\nsize=4k\n",
    "own-dir-after-global-file": "[global]\nfilename=g1\nsize=4k\n[j]\ndirectory=b\nfilename=own\n",
    "filename-list": "[j]\nfilename=x:y:z\nsize=48k\n",
    "absolute-under-directory": "[j]\ndirectory=a\nfilename=/dev/zram7\nsize=4k\n",
    "two-jobs": "[ja]\nsize=4k\n[jb]\nsize=4k\nnumjobs=2\n",
}


def _fio_creates(tmp: Path, text: str) -> set[str]:
    work = tmp / "work"
    for sub in ("a", "b", "a/dev"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    before = {str(p) for p in work.rglob("*")}
    (tmp / "job.fio").write_text("[global]\ncreate_only=1\nioengine=psync\n" + text)
    r = subprocess.run(["fio", str(tmp / "job.fio")], cwd=work, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return {str(p) for p in work.rglob("*") if p.is_file()} - before


@pytest.mark.parametrize("case", sorted(JOBS))
def test_every_file_fio_creates_is_predicted(tmp_path: Path, case: str) -> None:
    created = _fio_creates(tmp_path, JOBS[case])
    assert created, "fio made no file: the oracle saw nothing"
    job = fio_sandbox.parse(JOBS[case], "t.fio", env={})
    work = str(tmp_path / "work")
    named, generated = fio_names.opened(job, work, None)
    explicit = {os.path.normpath(n.path) for n in named}
    for path in created:
        hit = path in explicit or any(g.directory == os.path.dirname(path) and g.matches(os.path.basename(path))
                                      for g in generated)
        assert hit, f"fio made {path}, fio_names predicted {sorted(explicit)} and {generated}"
    if case == "absolute-under-directory":
        assert f"{work}/a/dev/zram7" in created, "fio prefixes the directory also before an absolute name"


def test_patterns_match_only_what_fio_makes() -> None:
    g = fio_names.Generated("filename_format", 1, "/d", "job", "f$filenum.$jobnum", (0, 1), 3)
    assert g.matches("f2.1") and not g.matches("job")  # the bare job name only with nrfiles=1
    for other in ("f3.0", "f0.2", "f01.0", "f0.0x", "xf0.0", "f.0", "f-1.0"):
        assert not g.matches(other), other
    d = fio_names.Generated("[j]", 1, "/d", "j", fio_names.DEFAULT_FORMAT, (0,), 1)
    assert d.matches("j.0.0") and d.matches("j") and not d.matches("j.1.0") and not d.matches("j.0.1")


@pytest.mark.parametrize("case", ["default", "numjobs-nrfiles", "format-filenum", "format-case", "dir-list",
                                  "two-jobs"])
def test_a_link_at_any_name_fio_makes_is_refused(tmp_path: Path, case: str) -> None:
    """Plant a symlink at each name fio made for real (in a fresh directory), then ask the check."""
    created = sorted(_fio_creates(tmp_path, JOBS[case]))
    work = tmp_path / "work"
    job = fio_sandbox.parse(JOBS[case], "t.fio", env={})
    for path in created:
        for p in created:
            Path(p).unlink(missing_ok=True)
        Path(path).symlink_to("/dev/zero")
        with pytest.raises(fio_sandbox.JobFileRefused, match="symbolic link"):
            fio_sandbox.check_paths(job, [str(work)], str(work), None)
        Path(path).unlink()


