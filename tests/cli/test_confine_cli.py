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
def test_the_three_confirmed_cases_write_nothing_of_the_users(lab: Lab, canaries: Canaries, tmp_path: Path,
                                                              case: str) -> None:
    """A link planted at the name fio opens, in the user's directory, reaches nothing: every trial's
    files are in a directory iolab makes inside it, the only writable place. The run succeeds,
    the canary disk and the link are as they were, and iolab's directory is gone afterwards."""
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
    before = {p.name: os.readlink(p) for p in host.iterdir()}
    r = lab.iolab("run", spec, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert canaries.changed() == []
    assert {p.name: os.readlink(p) for p in host.iterdir()} == before, "the user's directory is as it was"
    placed = lab.report_json()["trials"][0]["manifest"]["target"]
    assert placed["in"] == str(host) and Path(placed["directory"]).parent == host
    assert placed["confinement"]["writable"][0] == placed["directory"]


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


def test_a_real_run_writes_only_in_its_own_directory_and_leaves_the_users_as_it_was(lab: Lab,
                                                                                     tmp_path: Path) -> None:
    """The user's files stay byte for byte, no name is added (a spec naming ~/.ssh cannot leave an
    authorized_keys), and iolab's own directory is removed with the study."""
    host = tmp_path / "mine"
    (host / "photos").mkdir(parents=True)
    (host / "photos" / "a.jpg").write_bytes(b"jpeg" * 1000)
    (host / "notes.txt").write_text("keep me\n")
    spec = lab.spec(study_table("beside", repetitions=1, max_repetitions=1)
                    + f'[target]\nkind = "host"\ndirectory = "{host}"\n' + fio_workload(rw="randwrite", size="1M"))
    r = lab.iolab("run", spec, "--dry-run")
    assert f"makes a directory of its own in {host}" in one_line(r.stdout), r.stdout
    assert "nothing else in" in one_line(r.stdout) and "(2 entries there now)" in one_line(r.stdout), r.stdout
    for _ in range(2):  # a second run needs nothing of the first's: nothing of it is left
        r = lab.iolab("run", spec, timeout=300)
        assert r.returncode == 0, r.stderr
        assert sorted(p.name for p in host.iterdir()) == ["notes.txt", "photos"]
        assert (host / "notes.txt").read_text() == "keep me\n"
        assert (host / "photos" / "a.jpg").read_bytes() == b"jpeg" * 1000
    trial = lab.report_json()["trials"][0]
    assert trial["status"] == "ok" and trial["metrics"]["write_iops"] > 0
    conf = trial["manifest"]["target"]["confinement"]
    assert conf["writable"][0] == trial["manifest"]["target"]["directory"] and "protected" not in conf
    assert conf["network"] == "none" and conf["unix_sockets"] == "refused"


def test_a_spec_cannot_add_a_file_to_the_directory_it_names(lab: Lab, tmp_path: Path) -> None:
    """The attack, for real, on a stand-in for ~/.ssh: a job file that writes a chosen line at a
    new name (authorized_keys) and one that copies a root-only file into its data. The first runs
    and leaves nothing in the directory; the second is refused by the pattern grammar."""
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True, mode=0o700)
    secret = tmp_path / "secret"
    secret.write_text("TOP-SECRET\n")
    secret.chmod(0o600)
    key = b"ssh-ed25519 AAAATESTKEY attacker@example".hex()
    job = f"[authorized_keys]\nfilename=authorized_keys\nrw=write\nbs=41\nsize=41\nbuffer_pattern=0x{key}\n"
    r = lab.iolab("run", _jobfile_spec(lab, ssh, job), timeout=300)
    assert r.returncode == 0, r.stderr
    assert list(ssh.iterdir()) == [], "nothing was added to the directory the spec named"
    trial = lab.report_json()["trials"][0]
    assert trial["status"] == "ok" and trial["metrics"]["iops"] > 0, "the job did run"
    job = f"[j]\nrw=write\nbs=64\nsize=64\nbuffer_pattern='{secret}'\n"
    r = lab.iolab("run", _jobfile_spec(lab, ssh, job), timeout=300)
    assert r.returncode == 2 and "read that file" in one_line(r.stderr), r.stderr
    assert list(ssh.iterdir()) == []
