"""A data dir on a read-only mount (a snapshot, a full disk remounted read-only, an archive) still
reads: `runs`, `report -o`, `compare` and `history` work on its SQLite store, whose -shm file
cannot be made there (SQLite refuses to open a WAL database even with mode=ro then: "unable to
open database file", what a tester saw). Writing is refused as before, with the reason."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.core.helpers import IOLAB, Lab, needs_fio, needs_root, one_line, tmpfs_at

pytestmark = [needs_root, needs_fio]

JOB = "[j]\nioengine=null\nrw=randread\nsize=64m\n"


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[Path]:
    yield from tmpfs_at(tmp_path / "ro", "32M")


def test_a_store_on_a_read_only_mount_is_read(lab: Lab, mount: Path, tmp_path: Path) -> None:
    data = mount / "data"
    env = {**lab.env, "IOLAB_DATA": str(data)}
    env.pop("IOLAB_DB", None)
    job = tmp_path / "null.fio"
    job.write_text(JOB)

    def iolab(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(IOLAB), *args], env=env, capture_output=True, text=True, timeout=300)

    for _ in range(2):  # two runs: `compare` reads both, and a run against itself is refused
        r = iolab("run", str(job))
        assert r.returncode == 0, r.stderr
    ids = [x["id"] for x in json.loads(iolab("runs", "--json").stdout)]
    run_id, other = ids
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)

    r = iolab("runs", "--json")
    assert r.returncode == 0 and [x["id"] for x in json.loads(r.stdout)] == ids, r.stderr
    r = iolab("report", run_id, "--format", "json", "-o", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "r.json").read_text())["trials"]
    r = iolab("compare", other, run_id)
    assert r.returncode == 0, r.stderr
    assert iolab("history", "null").returncode == 0
    r = iolab("report", run_id)  # its default place is on the read-only mount
    assert r.returncode == 2 and "-o PATH" in one_line(r.stderr), r.stderr
    r = iolab("run", str(job))
    assert r.returncode == 2 and "read-only" in one_line(r.stderr), r.stderr
