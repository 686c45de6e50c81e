"""iperf3 through `iolab run` with every trial process confined (core/confine.py, issue 23).

The confinement gives each process a private network namespace by default, where 127.0.0.1
is its own. iperf3 has two ends in two processes: on the host (the baseline) both run on the
host, and for a guest with `network = "user"` the server runs on the host and QEMU's user
network (slirp, in the host's namespace) connects to it on 127.0.0.1. Both broke when the
trial's processes were first confined ("unable to connect to server: Connection refused" on
every host row of vm-profile), and iperf3's stream buffers (mkstemp in /tmp, read-only in the
confinement) broke next. Here they run for real: a loop target (client and server confined on
the host) and a TCG guest with user networking (server confined on the host, client and the
peer guest's server in guests); every trial must end ok with a rate, and nothing may be left.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from tests.core.helpers import IOLAB, Lab, make_lab, study_table  # noqa: E402

pytestmark = [
    pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 not installed (apt-get install iperf3)"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap not installed (apt-get install bubblewrap)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="loop devices and trial cgroups need root"),
]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    assert IOLAB.exists(), f"{IOLAB} missing: install the package into .venv first"
    lab = make_lab(tmp_path / "lab")
    lab.env.pop("IOLAB_CACHE", None)  # the built guest image is content-addressed: share the machine's
    try:
        yield lab
    finally:
        lab.force_cleanup()


def _iperf3(directions: list[str]) -> str:
    listed = ", ".join(f'"{d}"' for d in directions)
    return f'[workload]\nkind = "iperf3"\ntime = 1\nomit = 0\ndirection = [{listed}]\n'


def _trials(lab: Lab) -> list[dict]:
    doc = lab.report_json()
    return list(doc["trials"])


def _assert_all_ok(lab: Lab, r: subprocess.CompletedProcess[str], directions: list[str]) -> list[dict]:
    assert r.returncode == 0, r.stdout + r.stderr
    trials = _trials(lab)
    assert sorted(t["params"]["_workload"]["direction"] for t in trials) == sorted(directions), trials
    for t in trials:
        assert t["error"] is None, t["error"]
        assert t["metrics"]["mbit_s"] > 0, t["metrics"]
    lab.assert_nothing_left()
    return trials


def test_iperf3_on_a_confined_host_target_reaches_its_own_loopback_server(lab: Lab) -> None:
    """The loop target confines its trials with a private network namespace; the iperf3 client
    and its server must still meet on the host's loopback (each end in its own bwrap)."""
    directions = ["guest_to_host", "host_to_guest"]
    spec = lab.spec(study_table("iperf3-host", repetitions=1, max_repetitions=1)
                    + '[target]\nkind = "loop"\nsize = "64M"\nfilesystem = "ext4"\n'
                    + _iperf3(directions))
    r = lab.iolab("run", spec, timeout=300)
    trials = _assert_all_ok(lab, r, directions)
    for t in trials:
        assert t["metrics"]["mbit_s"] > 100, t["metrics"]  # loopback moves far more than 100 Mbit/s
        conf = t["manifest"]["target"]["confinement"]
        assert conf["tool"] == "bwrap" and conf["network"] == "none", conf  # fio's trials keep no network


@pytest.mark.vm
@pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="QEMU not installed")
def test_iperf3_in_a_user_network_guest_reaches_the_confined_host_server(lab: Lab) -> None:
    """A TCG guest (`network = "user"`, a peer guest for guest_to_guest): the host-side server
    runs confined in the trial's cgroup and slirp reaches it on 127.0.0.1."""
    directions = ["guest_to_host", "host_to_guest", "guest_to_guest"]
    spec = lab.spec(study_table("iperf3-guest", repetitions=1, max_repetitions=1)
                    + '[target]\nkind = "qemu"\nguest_fs = "ext4"\ndisk_size = "64M"\nmemory = "512M"\nvcpus = 1\n'
                      'network = "user"\nnet_peer = true\nextra_binaries = ["/usr/bin/iperf3"]\n'
                    + _iperf3(directions))
    r = lab.iolab("run", spec, timeout=1200)
    _assert_all_ok(lab, r, directions)
