"""A trial's failure is that trial's: an unexpected exception in a workload's parsing or in a
probe fails that trial (error + traceback in the store), and the study goes on.

Real workloads and probes, real broken input from the environment: a `fio` on PATH that
answers one configuration with JSON missing "iops" (fio's parser then raises KeyError),
and a block device whose sysfs stat file is unreadable numbers in iolab's mount namespace
(the host_disk probe's parser then raises ValueError).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess

from tests.core.helpers import IOLAB, LOOP_TARGET, Lab, fio_workload, needs_fio, needs_root, study_table

pytestmark = [needs_root, needs_fio]

FAKE_FIO = """#!/bin/sh
# fio for every job but the 8 KiB one, which gets a JSON fio would never print (no "iops")
if grep -q '^bs=8192$' job.fio 2>/dev/null; then
  printf '{"fio version": "fio-3.33", "jobs": [{"jobname": "iolab", "error": 0, "read": {"total_ios": 10}}]}' \\
    > fio-result.json
  exit 0
fi
exec @FIO@ "$@"
"""


def test_a_parse_error_in_one_configuration_fails_only_its_trials(lab: Lab) -> None:
    bindir = lab.root / "bin"
    bindir.mkdir()
    fake = bindir / "fio"
    fake.write_text(FAKE_FIO.replace("@FIO@", str(shutil.which("fio"))))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    lab.env["PATH"] = f"{bindir}:{lab.env['PATH']}"
    spec = lab.spec(study_table("parse-error", repetitions=2, max_repetitions=2) + LOOP_TARGET
                    + fio_workload(bs=["4k", "8k"]))
    r = lab.iolab("run", spec, timeout=180)
    assert r.returncode == 0, r.stderr  # partial is not a failure of the command
    assert "Traceback" not in r.stderr, r.stderr
    doc = lab.report_json()
    assert doc["status"] == "partial"
    by_bs: dict[int, list[dict]] = {}
    for t in doc["trials"]:
        by_bs.setdefault(t["params"]["bs"], []).append(t)
    assert [t["status"] for t in by_bs[4096]] == ["ok", "ok"]
    assert all(t["traceback"] is None for t in by_bs[4096])
    broken = by_bs[8192]
    assert len(broken) == 2 and all(t["status"] == "failed" for t in broken)  # abandoned after two, not retried forever
    for t in broken:
        assert t["error"] == "KeyError: 'iops'", t["error"]
        assert "iolab/fio/engine.py" in t["traceback"] and "job_metrics" in t["traceback"], t["traceback"]
        assert t["traceback"].rstrip().endswith("KeyError: 'iops'")
    lab.assert_nothing_left()


def test_an_exception_in_a_probe_fails_only_the_trials_it_observes(lab: Lab) -> None:
    """Two targets: a device whose stat file reads garbage (for iolab only, through a private
    mount namespace) and a normal loop device. The probe's ValueError fails the first
    target's trials with their traceback; the second target's trials run and succeed."""
    img = lab.scratch / "test-device.img"
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    dev = subprocess.run(["losetup", "--find", "--show", str(img)], check=True, capture_output=True,
                         text=True).stdout.strip()
    try:
        bad = lab.root / "bad-stat"
        bad.write_text("these are not numbers\n")
        sysfs_stat = os.path.realpath(f"/sys/class/block/{os.path.basename(dev)}/stat")
        spec = lab.spec(study_table("probe-error", repetitions=2, max_repetitions=2)
                        + f'[[targets]]\nname = "broken-stat"\nkind = "device"\ndevice = "{dev}"\n\n'
                        + '[[targets]]\nname = "scratch"\nkind = "loop"\nsize = "64M"\n\n'
                        + fio_workload())
        # iolab alone sees the garbage: the bind mount lives in its private mount namespace
        script = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
        r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                            str(bad), sysfs_stat, str(IOLAB), "run", str(spec), "--destroy-data", dev],
                           env=lab.env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=180,
                           cwd=lab.root)
    finally:
        subprocess.run(["losetup", "-d", dev], capture_output=True)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    doc = lab.report_json()
    assert doc["status"] == "partial"
    by_target: dict[str, list[dict]] = {}
    for t in doc["trials"]:
        by_target.setdefault(t["params"]["_target"]["kind"], []).append(t)
    assert [t["status"] for t in by_target["loop"]] == ["ok", "ok"], by_target["loop"]
    assert all("host_disk" in t["probes"] for t in by_target["loop"])
    failed = by_target["device"]
    assert len(failed) == 2 and all(t["status"] == "failed" for t in failed)
    for t in failed:
        assert t["error"].startswith("ValueError: invalid literal for int()"), t["error"]
        assert "probes/diskstats.py" in t["traceback"] and "parse_stat" in t["traceback"], t["traceback"]
    img.unlink()
    lab.assert_nothing_left()


FIO_FAILING_PREFILL = """#!/bin/sh
# fio for every job but the overwrite prefill on a directory target, which prints no JSON at all
if grep -q '^\\[prefill\\]$' job.fio && grep -q 'iolab-sync-overwrite.dat' job.fio; then
  echo "fio: pretend the prefill went wrong" >&2
  exit 0
fi
exec @FIO@ "$@"
"""


def test_a_failing_study_hook_fails_its_targets_trials_and_the_run_goes_on(lab: Lab) -> None:
    """sync-amplification's before_group writes the overwrite region once per target; when it
    fails on one target, that target's trials fail with the hook's reason and the next
    target still runs (before, the exception ended the whole run)."""
    bindir = lab.root / "bin"
    bindir.mkdir()
    fake = bindir / "fio"
    fake.write_text(FIO_FAILING_PREFILL.replace("@FIO@", str(shutil.which("fio"))))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    lab.env["PATH"] = f"{bindir}:{lab.env['PATH']}"
    spec = lab.spec(study_table("hook-error", repetitions=2, max_repetitions=2, analysis="sync-amplification")
                    + '[[targets]]\nname = "dir"\nkind = "host"\n\n'
                    + '[[targets]]\nname = "dev"\nkind = "loop"\nsize = "64M"\n\n'
                    + '[workload]\nkind = "sync-writes"\npattern = "overwrite"\ncount = 16\n')
    r = lab.iolab("run", spec, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    doc = lab.report_json()
    assert doc["status"] == "partial"
    by_target: dict[str, list[dict]] = {}
    for t in doc["trials"]:
        by_target.setdefault(t["params"]["_target"]["kind"], []).append(t)
    hooked = by_target["host"]
    assert len(hooked) == 1 and hooked[0]["status"] == "failed", hooked
    assert hooked[0]["error"].startswith("study hook before_group failed: TrialFailed: fio printed no job results")
    assert "prepare_overwrite" in hooked[0]["traceback"], hooked[0]["traceback"]
    assert [t["status"] for t in by_target["loop"]] == ["ok", "ok"], by_target["loop"]
    lab.assert_nothing_left()
