"""Issue 25, point 5: the session (and so the autogroup) iolab gives a workload is a choice, stated.

With kernel.sched_autogroup_enabled = 1 the scheduler shares CPU between sessions first; iolab
started every workload in a session of its own and said so nowhere. Now `[study]
workload_session` chooses ("own", the default, or "shared": iolab's session, a process group of
its own so the terminal's Ctrl-C still reaches iolab alone), the host executor does it for real
(checked here on the child's own /proc entries), every run's environment records it with
`sched_autogroup`, `doctor` explains it, and compare names a difference (test_compare_two_levels).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.core.helpers import make_lab, needs_root

from iolab import doctor as d
from iolab.cgroups.executor import HostExecutor
from iolab.core import exec as ex
from iolab.runner.manifest import environment, sched_autogroup
from iolab.spec.study import from_dict

# /proc/self/autogroup is empty for a process in the default autogroup (a session started
# before autogroups were made, such as init's, which a CI job may inherit): the line is tagged,
# so an empty one is still a line.
PROBE = ["sh", "-c",
         "echo \"ag:$(cat /proc/self/autogroup 2>/dev/null || echo none)\"; cut -d' ' -f5,6 /proc/self/stat"]


def _placement(policy: str, tmp_path: Path) -> tuple[str, int, int]:
    """(autogroup line, session id, process group id) of a child the host executor starts."""
    previous = ex.set_session_policy(policy)
    executor = HostExecutor(tmp_path)
    try:
        res = executor.run(ex.ExecRequest(PROBE, timeout_s=30))
    finally:
        ex.set_session_policy(previous)
        executor.close()
    assert res.returncode == 0, res.stderr
    group, ids = res.stdout.strip().splitlines()
    group = group.removeprefix("ag:").strip()
    pgrp, sid = (int(x) for x in ids.split())
    return group, sid, pgrp


@needs_root
def test_own_gives_a_session_and_autogroup_of_its_own_shared_keeps_iolabs(tmp_path: Path) -> None:
    mine = Path("/proc/self/autogroup").read_text().strip() if Path("/proc/self/autogroup").exists() else "none"
    # "" when iolab itself is in the default autogroup (e.g. under init's session)
    group, sid, pgrp = _placement("own", tmp_path)
    assert sid != os.getsid(0) and pgrp == sid  # a new session, its leader
    if sched_autogroup() == 1:
        assert group != mine and group.startswith("/autogroup-"), (group, mine)
    group, sid, pgrp = _placement("shared", tmp_path)
    assert sid == os.getsid(0)  # iolab's session ...
    assert pgrp != os.getpgrp()  # ... but not iolab's process group: the terminal's Ctrl-C is iolab's alone
    if sched_autogroup() == 1:
        assert group == mine
    assert ex.session_policy() == "own"  # restored
    with pytest.raises(ValueError):
        ex.set_session_policy("nobody's")


def test_the_setting_is_validated_and_recorded() -> None:
    doc = {"study": {"name": "s", "workload_session": "shared"}, "target": {"kind": "host"},
           "workload": {"kind": "sysbench-cpu", "time": 1}}
    assert from_dict(doc, "t").settings.workload_session == "shared"
    assert from_dict({**doc, "study": {"name": "s"}}, "t").settings.workload_session == "own"
    with pytest.raises(Exception, match="workload_session"):
        from_dict({**doc, "study": {"name": "s", "workload_session": "mine"}}, "t")
    env = environment()
    assert "sched_autogroup" in env and "cpu_governor" in env
    assert env["sched_autogroup"] == sched_autogroup()


def test_doctor_states_the_placement_and_what_it_means() -> None:
    on = d.autogroup_check(1)
    assert on.state == "ok" and "session of its own" in on.detail and "workload_session" in on.detail
    assert "one session's share" in on.detail
    assert "thread by thread" in d.autogroup_check(0).detail
    assert "no autogroups" in d.autogroup_check(None).detail


@needs_root
def test_a_run_records_its_placement(tmp_path: Path) -> None:
    lab = make_lab(tmp_path / "lab")
    try:
        spec = lab.spec('[study]\nname = "placed"\nrepetitions = 1\nmax_repetitions = 1\nworkload_session = "shared"\n'
                        '[target]\nkind = "host"\n[workload]\nkind = "sysbench-cpu"\nthreads = 1\ntime = 1\n')
        r = lab.iolab("run", spec, timeout=300)
        assert r.returncode == 0, r.stderr
        doc = lab.report_json()
        assert doc["environment"]["workload_session"] == "shared"
        assert doc["environment"]["sched_autogroup"] == sched_autogroup()
        r = lab.iolab("doctor", "--json")
        checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
        assert "autogroup" in checks
    finally:
        lab.force_cleanup()
