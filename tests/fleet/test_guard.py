"""Fleet hosts are guarded like devices (issue 23 item 4): a host's `filename` that exists, or that
names a block device, needs `--destroy-data HOST:PATH`. Hosts on this machine are examined here
(core/diskguard.py for devices, by number); hosts on another machine by their own fio server,
which reports what it would open (a 512-byte read that may not create). The canaries are this
test's loop devices and files; the machine's own disk is only ever named in a spelling refused
before anything looks at it."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.core.helpers import Lab, fio_workload, make_lab, one_line, study_table
from tests.fleet.netns_hosts import NsHost


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    lab = make_lab(tmp_path / "lab")
    try:
        yield lab
    finally:
        lab.force_cleanup()


def _spec(lab: Lab, hosts: list[NsHost], files: dict[str, str], same_machine: bool, runtime: float = 1) -> Path:
    text = study_table("guard", repetitions=1, max_repetitions=1) + fio_workload(size="4M", runtime=runtime)
    text += '[target]\nkind = "fleet"\n'
    for h in hosts:
        text += (f'[[target.hosts]]\nname = "{h.name}"\naddress = "{h.address}"\nport = {h.port}\n'
                 f'filename = "{files[h.name]}"\nsame_machine = {"true" if same_machine else "false"}\n')
    return lab.spec(text)


def _sum(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("spelling", ["//dev/vda", "/dev/./vda", "/dev/vda/", "/srv//x"])
def test_a_second_spelling_of_a_path_is_an_input_error(lab: Lab, spelling: str) -> None:
    """fio's own "appears mounted" check compares path strings: one spelling per file, decided before
    anything connects or looks at the path."""
    spec = lab.spec(study_table("g") + fio_workload() + '[target]\nkind = "fleet"\n[[target.hosts]]\nname = "a"\n'
                    f'address = "127.0.0.1"\nfilename = "{spelling}"\n')
    r = lab.iolab("run", spec, "--dry-run")
    assert r.returncode == 2 and "write it as" in one_line(r.stderr) and "Traceback" not in r.stderr, r.stderr
    assert "connecting" not in r.stderr


def test_local_hosts_files_go_through_the_local_guard(lab: Lab, fleet3: list[NsHost], tmp_path: Path) -> None:
    """Hosts sharing this machine: a file that exists, a link (to a canary loop device) and a block
    device named as a file are refused, each naming `--destroy-data HOST:PATH`, before any connection;
    a file that does not exist is iolab's to make (and to remove afterwards)."""
    h0, h1, h2 = fleet3
    existing = tmp_path / "existing.dat"
    existing.write_bytes(os.urandom(1 << 16))
    before = _sum(existing)
    link = tmp_path / "link.dat"
    link.symlink_to(h2.device)
    files = {h0.name: str(existing), h1.name: str(link), h2.name: h2.device}
    r = lab.iolab("run", _spec(lab, fleet3, files, same_machine=True), "--dry-run")
    text = one_line(r.stderr)
    assert r.returncode == 2, r.stderr
    assert f"--destroy-data {h0.name}:{existing}" in text and "it exists (a regular file, 65536 bytes)" in text
    assert f"--destroy-data {h1.name}:{link}" in text and "symbolic link" in text
    assert f"--destroy-data {h2.name}:{h2.device}" in text and "block device" in text
    assert "connecting" not in text and not lab.trial_rows()
    # named: it runs, and a file that was there before is left there (overwritten as asked, not removed)
    fresh = tmp_path / "fresh.dat"
    files = {h0.name: str(existing), h1.name: str(fresh), h2.name: str(tmp_path / "fresh2.dat")}
    r = lab.iolab("run", _spec(lab, fleet3, files, same_machine=True), "--destroy-data",
                  f"{h0.name}:{existing}", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert existing.exists() and _sum(existing) != before  # written, as the user allowed
    assert not fresh.exists() and not (tmp_path / "fresh2.dat").exists()  # iolab's own: removed
    lab.assert_nothing_left()


def test_remote_hosts_files_are_examined_by_their_own_fio_server(lab: Lab, fleet3: list[NsHost],
                                                                 tmp_path: Path) -> None:
    """Hosts on another machine (declared so; their servers run in namespaces here, on the same
    files): the server reports what it would open. A file that exists, a block device and a
    directory are refused; a file that is not there is not; nothing is written or created by the
    examination; `--destroy-data HOST:PATH` lets it through."""
    h0, h1, h2 = fleet3
    existing = tmp_path / "remote-existing.dat"
    existing.write_bytes(os.urandom(1 << 16))
    before = _sum(existing)
    device_before = _sum(Path(h2.device))
    absent = tmp_path / "absent.dat"
    files = {h0.name: str(existing), h1.name: str(absent), h2.name: h2.device}
    r = lab.iolab("run", _spec(lab, fleet3, files, same_machine=False), "--dry-run", timeout=300)
    text = one_line(r.stderr)
    assert r.returncode == 2, r.stderr
    assert text.index("connecting to 3 host(s)") < text.index("refusing")  # said before it connects
    assert f"--destroy-data {h0.name}:{existing}" in text and "its fio server opened and read it" in text
    assert f"--destroy-data {h2.name}:{h2.device}" in text
    assert f"{h1.name}:{absent}" not in text
    assert not absent.exists() and _sum(existing) == before and _sum(Path(h2.device)) == device_before
    files = {h0.name: str(tmp_path), h1.name: str(absent), h2.name: str(existing)}
    r = lab.iolab("run", _spec(lab, fleet3, files, same_machine=False), "--dry-run", "--destroy-data",
                  f"{h2.name}:{existing}", timeout=300)
    text = one_line(r.stderr)
    assert r.returncode == 2 and f"--destroy-data {h0.name}:{tmp_path}" in text, r.stderr
    assert f"{h2.name}:{existing}" not in text.split("refusing", 1)[1]
    files = {h0.name: str(tmp_path / "a0.dat"), h1.name: str(absent), h2.name: str(existing)}
    r = lab.iolab("run", _spec(lab, fleet3, files, same_machine=False), "--dry-run", "--destroy-data",
                  f"{h2.name}:{existing}", timeout=300)
    assert r.returncode == 0, r.stderr
    assert not absent.exists() and not (tmp_path / "a0.dat").exists() and _sum(existing) == before


def test_a_remote_device_still_needs_naming(lab: Lab, fleet3: list[NsHost]) -> None:
    spec = lab.spec(study_table("g") + fio_workload() + '[target]\nkind = "fleet"\n[[target.hosts]]\n'
                    f'name = "r"\naddress = "{fleet3[0].address}"\ndevice = "{fleet3[0].device}"\n'
                    'same_machine = false\n')
    r = lab.iolab("run", spec, "--dry-run")
    assert r.returncode == 2 and "cannot be examined from here" in one_line(r.stderr), r.stderr
    assert f"--destroy-data r:{fleet3[0].device}" in one_line(r.stderr)
    r = lab.iolab("run", spec, "--dry-run", "--destroy-data", f"r:{fleet3[0].device}", timeout=300)
    assert r.returncode == 0, r.stderr
