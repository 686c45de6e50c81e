"""`iolab doctor` tells the truth: every check's decision on given facts (both outcomes), then
the real command on this machine, with a real CPU hog beside it."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from iolab import doctor as d
from iolab.core import sizing
from iolab.core.sizing import Llc, Memory
from iolab.targets.loop import loop_check

MiB = 1 << 20
GiB = 1 << 30
BIG_HOST = Memory(total=24 * GiB, available=23 * GiB)


def test_root_and_tools() -> None:
    assert d.root_check(0).state == "ok"
    assert d.root_check(1000).state == "fail" and "need root" in d.root_check(1000).detail
    assert d.tool_check("fio", "/usr/bin/fio", "disks", "fio-3.33") == d.Check("fio", "ok", "fio-3.33 (disks)")
    missing = d.tool_check("qemu", None, "the VM studies", install="qemu-system-x86")
    assert missing.state == "missing" and missing.detail.startswith("install qemu-system-x86")


def test_compiler_line_names_what_is_there() -> None:
    # the bug of issue 10: gcc alone said "install gcc"
    only_gcc = d.compiler_check(None, "/usr/bin/gcc")
    assert only_gcc.state == "ok" and "/usr/bin/gcc" in only_gcc.detail and "install" not in only_gcc.detail
    assert d.compiler_check("/usr/bin/cc", None).state == "ok"
    assert d.compiler_check(None, None).state == "missing"


def test_loop() -> None:
    assert loop_check(True, "/sbin/losetup").state == "ok"
    assert loop_check(False, "/sbin/losetup").state == "fail"
    assert loop_check(True, None).state == "missing"


def test_each_target_kind_brings_its_own_lines() -> None:
    """doctor lists no target kind: the loop line comes from the loop target (Target.machine_checks)."""
    lines = {c.name: c for c in d.target_checks()}
    assert lines["loop"] == d.Check("loop", *[getattr(loop_check(Path("/dev/loop-control").exists(),
                                                                 shutil.which("losetup")), f)
                                              for f in ("state", "detail")])


def test_accel_says_kvm_or_tcg_and_why() -> None:
    assert d.accel_check("kvm", "a KVM guest printed its first kernel line", []).state == "ok"
    log = ["[    0.365685] kvm-pvm: mmio caching disabled", "[    0.365943] kvm-pvm: loaded (native=1)"]
    tcg = d.accel_check("tcg", "KVM unusable: -cpu host: QEMU failed: x\ny", log)
    assert tcg.state == "warn" and "TCG" in tcg.detail and "kvm-pvm: loaded (native=1)" in tcg.detail
    assert "\n" not in tcg.detail and "not representative" in tcg.detail
    assert d.accel_check("tcg", "/dev/kvm missing", []).detail.count("dmesg") == 0
    assert d.accel_check(None, "could not probe: no QEMU", []).state == "missing"


def test_cgroups_and_schedulers_can_fail() -> None:
    ok = d.cgroup_check("hybrid-v1", {"v1-bfq": "ok", "v2-bfq": "no io controller"})
    assert ok.state == "ok" and "v1-bfq" in ok.detail
    none_enforce = d.cgroup_check("v2", {"v2-bfq": "BFQ not loaded", "v2-iocost": "no io.cost.qos", "v2-none": "ok"})
    assert none_enforce.state == "warn" and "BFQ not loaded" in none_enforce.detail
    assert d.cgroup_check("none", {}).state == "missing"
    assert d.scheduler_check({"loop0": ["none", "mq-deadline", "bfq"]}, False).state == "ok"
    no_bfq = d.scheduler_check({"vda": ["none", "mq-deadline"]}, False)
    assert no_bfq.state == "warn" and "modprobe bfq" in no_bfq.detail
    assert d.scheduler_check({}, True).state == "ok" and d.scheduler_check({}, False).state == "warn"


def test_governor_and_boost() -> None:
    assert d.governor_check({"cpu0": "performance", "cpu1": "performance"}, "acpi-cpufreq").state == "ok"
    slow = d.governor_check({"cpu0": "performance", "cpu1": "powersave"}, "intel_pstate")
    assert slow.state == "warn" and "powersave on 1 of 2 CPUs" in slow.detail and "cpupower" in slow.detail
    assert d.governor_check({}, None).state == "ok"
    assert d.boost_check("1\n", None).state == "warn" and d.boost_check("0\n", None).state == "ok"
    assert d.boost_check(None, "0\n").state == "warn" and "no_turbo" in d.boost_check(None, "0\n").detail
    assert d.boost_check("1\n", "1\n").state == "ok"  # intel_pstate's no_turbo decides when present
    assert d.boost_check(None, None).state == "ok"


def test_swap_memory_space() -> None:
    assert d.swap_check(Memory(GiB, GiB, swap_total=GiB, swap_free=GiB)).state == "ok"
    paging = d.swap_check(Memory(GiB, GiB, swap_total=GiB, swap_free=GiB - 300 * MiB))
    assert paging.state == "warn" and "300 MiB of 1024 MiB swap in use" in paging.detail
    assert d.memory_check(BIG_HOST).state == "ok"
    assert d.memory_check(Memory(4 * GiB, 2 * GiB)).state == "warn"
    assert d.memory_check(Memory(4 * GiB, 512 * MiB)).state == "fail"
    assert d.space_check("/s", 70 * GiB).state == "ok"
    assert d.space_check("/s", 3 * GiB).state == "warn"
    assert d.space_check("/s", 512 * MiB).state == "fail" and "IOLAB_SCRATCH" in d.space_check("/s", 0).detail


def test_cpu_load() -> None:
    quiet = d.cpu_load_check(d.CpuUse(0.1, 2, 0.02, 1.0, [(1, "systemd", 0.01)]))
    assert quiet.state == "ok" and "pid 1 systemd" in quiet.detail
    hog = d.cpu_load_check(d.CpuUse(0.3, 2, 0.99, 1.0, [(42, "stress-ng-cpu", 0.98)]))
    assert hog.state == "warn" and "pid 42 stress-ng-cpu 98%" in hog.detail and "cpu_contended" in hog.detail
    assert d.cpu_load_check(d.CpuUse(1.5, 2, 0.0, 1.0)).state == "warn"  # the load average alone


def test_trial_cgroups_fail_without_a_hierarchy_and_name_the_override() -> None:
    bad = d.trial_cgroup_check({"flavour": None, "error": "no cgroup2 and no cpuacct+freezer"}, "IOLAB_X")
    assert bad.state == "fail" and "no cgroup2" in bad.detail
    good = d.trial_cgroup_check({"flavour": "v1", "roots": ["/sys/fs/cgroup/cpuacct"]}, "IOLAB_X")
    assert good.state == "ok" and "$IOLAB_X=v1|v2" in good.detail


def test_llc_says_what_iolab_sizes_from_it() -> None:
    here = d.llc_check(Llc(32 * MiB, "sysfs"), BIG_HOST)
    assert here.state == "ok" and "arrays 3 x 128 MiB" in here.detail and "guest memory 1024 MiB" in here.detail
    xeon = d.llc_check(Llc(260 * MiB, "sysfs"), Memory(8 * GiB, 2 * GiB))
    assert xeon.state == "warn" and "would not fit" in xeon.detail
    assert d.llc_check(Llc(32 * MiB, "assumed"), BIG_HOST).state == "warn"
    fake = d.llc_check(Llc(260 * MiB, sizing.FAKE_LLC_ENV), BIG_HOST)
    assert fake.state == "warn" and "meant for tests" in fake.detail
    assert d.llc_check(Llc(260 * MiB, "sysfs"), Memory(GiB, 2 * MiB)).state == "fail"


# ---------------------------------------------------------------------------- the real command

def _doctor(env: dict[str, str] | None = None) -> tuple[int, dict]:
    r = subprocess.run([sys.executable, "-m", "iolab.cli", "doctor", "--json"], capture_output=True, text=True,
                       timeout=300, env=env)
    return r.returncode, json.loads(r.stdout)


def test_real_doctor_agrees_with_the_machine() -> None:
    rc, out = _doctor()
    checks = {c["name"]: c for c in out["checks"]}
    assert all(c["state"] in ("ok", "warn", "missing", "fail") and c["detail"] for c in checks.values())
    assert rc == (1 if any(c["state"] == "fail" for c in checks.values()) else 0)
    expected = {"root", "fio", "bwrap", "qemu", "accel", "cgroups", "schedulers", "compiler", "cpu-governor",
                "autogroup",
                "cpu-boost", "cpu-load", "swap", "memory", "scratch", "llc", "trial-cgroups", "fio-server", "store",
                "restore", *d.TOOLS, *(c.name for c in d.target_checks())}  # each target kind's own lines ("loop", ...)
    assert "loop" in expected
    assert set(checks) == expected
    from iolab.cgroups import trial as trial_cgroups
    flavour = trial_cgroups.describe()["flavour"]
    assert checks["trial-cgroups"]["state"] == ("ok" if flavour else "fail")
    assert flavour is None or checks["trial-cgroups"]["detail"].startswith(flavour)
    assert (checks["fio"]["state"] == "ok") == bool(shutil.which("fio"))
    assert (checks["compiler"]["state"] == "ok") == bool(shutil.which("cc") or shutil.which("gcc"))
    assert checks["root"]["state"] == ("ok" if os.geteuid() == 0 else "fail")
    llc = sizing.read_llc()
    assert f"last-level cache {sizing.mib(llc.bytes)}" in checks["llc"]["detail"]
    mem = sizing.host_memory()
    assert mem and f"of {sizing.mib(mem.total)}" in checks["memory"]["detail"]
    cached = os.path.expanduser("~/.cache/iolab/accel.json")
    if os.path.exists(cached):
        accel = json.load(open(cached))["accel"]
        assert checks["accel"]["state"] == ("ok" if accel == "kvm" else "warn")


def test_real_doctor_text_lines_up_state_name_and_detail() -> None:
    """The text form: one line per check, state words right-aligned in one column, names in the next
    (padding rich's markup instead of the word once shifted 'warn' two columns left of 'ok')."""
    _, want = _doctor()
    r = subprocess.run([sys.executable, "-m", "iolab.cli", "doctor"], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, COLUMNS="400"))
    rows = [re.match(r"^( *)(ok|warn|missing|fail)  (\S+) +\S", line) for line in r.stdout.splitlines()]
    assert all(rows), r.stdout
    assert [m[3] for m in rows if m] == [c["name"] for c in want["checks"]], r.stdout
    assert len({m.end(2) for m in rows if m}) == 1, f"state words end in different columns:\n{r.stdout}"


@pytest.mark.skipif(shutil.which("stress-ng") is None, reason="stress-ng not installed")
@pytest.mark.whole_machine  # starts a CPU hog of its own, and the hog it names must be that one
def test_real_doctor_sees_a_cpu_hog() -> None:
    hog = subprocess.Popen(["stress-ng", "--cpu", "1", "--timeout", "60"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(1.0)
        _, out = _doctor()
    finally:
        os.killpg(hog.pid, signal.SIGTERM)
        hog.wait(timeout=30)
    load = next(c for c in out["checks"] if c["name"] == "cpu-load")
    assert load["state"] == "warn" and "stress-ng" in load["detail"], load


def test_fake_llc_is_reported() -> None:
    _, out = _doctor(dict(os.environ, IOLAB_FAKE_LLC="260M"))
    llc = next(c for c in out["checks"] if c["name"] == "llc")
    assert llc["state"] == "warn" and "IOLAB_FAKE_LLC is set" in llc["detail"] and "4 x LLC (260 MiB" in llc["detail"]
