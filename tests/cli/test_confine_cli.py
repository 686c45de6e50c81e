"""Issue 23's confirmed cases, through `iolab run` for real (not --dry-run), against a canary disk.

On the code before the confinement each of the three ran ("1 successful trial") and overwrote
the canary; now each is refused before anything runs, and the canary is unchanged. The host
directory rules and a real run that writes its own files beside the user's are here too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.core.canary import Canaries
from tests.core.helpers import Lab, fio_workload, needs_fio, needs_root, one_line, study_table

pytestmark = [needs_root, needs_fio, pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")]



def _jobfile_spec(lab: Lab, host: Path, job: str) -> Path:
    return lab.spec(study_table("confirmed", repetitions=1, max_repetitions=1)
                    + f'[target]\nkind = "host"\ndirectory = "{host}"\n'
                    + f'[workload]\nkind = "fio-jobfile"\njob_file = "j.fio"\njob_text = {json.dumps(job)}\n')


@pytest.mark.parametrize("case", ["j.0.0", "f$filenum", "iolab-fio.dat"])
def test_the_three_confirmed_cases_are_stopped(lab: Lab, canaries: Canaries, tmp_path: Path, case: str) -> None:
    host = tmp_path / "host"
    host.mkdir()
    if case == "j.0.0":
        (host / "j.0.0").symlink_to(canaries.device)
        spec = _jobfile_spec(lab, host, "[j]\nrw=write\nsize=1m\n")
    elif case == "f$filenum":
        (host / "f0").symlink_to(canaries.device)
        spec = _jobfile_spec(lab, host, "[g]\nrw=write\nsize=1m\nfilename_format=f$filenum\n")
    else:
        (host / "iolab-fio.dat").symlink_to(canaries.device)
        spec = lab.spec(study_table("confirmed", repetitions=1, max_repetitions=1)
                        + f'[target]\nkind = "host"\ndirectory = "{host}"\n'
                        + fio_workload(rw="randwrite", size="1M"))
    r = lab.iolab("run", spec, timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "symbolic link" in one_line(r.stderr) and canaries.device in r.stderr, r.stderr
    assert canaries.changed() == []
    assert not lab.db.exists(), "refused before anything ran"


@pytest.mark.parametrize("directory", ["/", "/etc", "/usr", "/boot", "/proc", "/sys", "/dev", "/run", "/var/lib",
                                       "/proc/self", "/sys/fs/cgroup", "/dev/shm", "/etc/ssl", "", "//etc",
                                       "/var/lib/"])
def test_system_directories_are_refused(lab: Lab, directory: str) -> None:
    spec = lab.spec(study_table("sys", repetitions=1, max_repetitions=1)
                    + f'[target]\nkind = "host"\ndirectory = "{directory}"\n' + fio_workload(rw="randwrite"))
    r = lab.iolab("run", spec, "--dry-run")
    assert r.returncode == 2, r.stdout
    assert f"{spec}: target.directory:" in one_line(r.stderr), r.stderr
    assert not lab.data.exists()


def test_a_directory_on_a_pseudo_filesystem_is_refused(lab: Lab, tmp_path: Path) -> None:
    mnt = tmp_path / "looks-like-a-dir"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "proc", "proc", str(mnt)], check=True)
    try:
        spec = lab.spec(study_table("pseudo") + f'[target]\nkind = "host"\ndirectory = "{mnt}"\n' + fio_workload())
        r = lab.iolab("run", spec, "--dry-run")
        assert r.returncode == 2 and "a proc filesystem" in one_line(r.stderr), r.stderr
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_a_real_run_writes_beside_the_users_files_and_never_over_them(lab: Lab, tmp_path: Path) -> None:
    """The user's files stay byte for byte; iolab's own run needs --destroy-data to reuse its old file."""
    host = tmp_path / "mine"
    (host / "photos").mkdir(parents=True)
    (host / "photos" / "a.jpg").write_bytes(b"jpeg" * 1000)
    (host / "notes.txt").write_text("keep me\n")
    spec = lab.spec(study_table("beside", repetitions=1, max_repetitions=1)
                    + f'[target]\nkind = "host"\ndirectory = "{host}"\n' + fio_workload(rw="randwrite", size="1M"))
    r = lab.iolab("run", spec, "--dry-run")
    assert "what is there now stays read-only (2 entries" in one_line(r.stdout), r.stdout
    r = lab.iolab("run", spec, timeout=300)
    assert r.returncode == 0, r.stderr
    assert (host / "notes.txt").read_text() == "keep me\n"
    assert (host / "photos" / "a.jpg").read_bytes() == b"jpeg" * 1000
    data = host / "iolab-fio.dat"
    assert data.is_file() and data.stat().st_size == 1 << 20
    trial = lab.report_json()["trials"][0]
    conf = trial["manifest"]["target"]["confinement"]
    assert conf["writable"][0] == str(host) and conf["protected"] == 2 and conf["network"] == "none"
    r = lab.iolab("run", spec, timeout=300)
    assert r.returncode == 2 and f"--destroy-data {data}" in one_line(r.stderr), r.stderr
    r = lab.iolab("run", spec, "--destroy-data", str(data), timeout=300)
    assert r.returncode == 0, r.stderr
    assert (host / "notes.txt").read_text() == "keep me\n"
    assert os.path.getsize(data) == 1 << 20
