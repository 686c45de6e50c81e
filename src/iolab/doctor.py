"""`iolab doctor`: what this machine can do, and what would make its numbers untrustworthy.

Every line is a check that can fail: facts are read at the edge (`gather`), then a pure
decision turns them into a state and a detail that says what to do. The decisions are
tested on given facts (both outcomes) in tests/doctor/test_doctor.py.

States: ok; warn (iolab works, but a result may be off or a study may not run: the detail
says why and what to do); missing (a program or facility a study needs is absent); fail
(iolab cannot work here as it is; `iolab doctor` then exits 1).

Size: about twenty short pure decisions, each beside the fact-reading it needs; the next
check should move the decisions into a package (doctor/decisions.py, doctor/facts.py).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from iolab.cgroups import trial as trial_cgroups
from iolab.cgroups.registry import describe
from iolab.core import children, paths, registry, sizing
from iolab.core.errors import IolabError
from iolab.core.sizing import Llc, Memory, mib
from iolab.fleet import serve as fleet_serve
from iolab.report.format import fmt_size
from iolab.runner.manifest import cgroup_mode, environment, sched_autogroup
from iolab.store import registry as stores
from iolab.store import schema
from iolab.store.spool import Spool
from iolab.vm import saved_states
from iolab.vm.accel import detect_accel

State = Literal["ok", "warn", "missing", "fail"]
GiB = 1 << 30
CPUFREQ = Path("/sys/devices/system/cpu")
OTHERS_BUSY = 0.10  # share of all CPUs others may use before timing results are at risk
LOAD_PER_CPU = 0.5  # 1-minute load average per CPU above which the machine counts as busy
WEIGHT_BACKENDS = ("v1-bfq", "v2-bfq", "v2-iocost", "v1-cfq")  # backends that enforce weights


@dataclass(frozen=True)
class Check:
    name: str
    state: State
    detail: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


# Programs some studies need besides fio and QEMU: name -> what needs it.
TOOLS: dict[str, str] = {
    "sysbench": "vm-profile (CPU) and the memory cross-check",
    "iperf3": "vm-profile (network)", "strace": "sync-amplification's host syscall counts",
    "db_bench": "cgroup-weights' database tenant", "chromium": "checking HTML reports in the tests",
    "java": "the ycsb workload, YCSB's Java client (./setup.sh install builds its jars)",
}
# Where a tool's name is not its Debian package's.
INSTALL: dict[str, str] = {"db_bench": "rocksdb-tools", "java": "default-jdk-headless"}


# ---------------------------------------------------------------------------- pure decisions

def store_check(location: str, problem: str | None, version: int | None, latest: int, spooled: int,
                write_problem: str | None = None, rejected: int = 0,
                quota: tuple[str, int, int] | None = None, migrates: bool = True) -> Check:
    """The results store runs would write to: reachable and readable (`problem` otherwise) and
    writable (`write_problem` otherwise: a reader's role, a read-only server), its schema version
    against this iolab's (an older one is migrated by a run here only if this role `migrates` it;
    else written as it is), writes still waiting in the local spool or set aside there, and how much
    of this role's quota is used (a team store: (role, used, allowed) bytes)."""
    if problem:
        return Check("store", "fail", problem if location in problem else f"{location}: {problem}")
    state: State = "ok"
    if version is None:
        detail = f"{location}: no store yet; created (schema v{latest}) by the first run"
    elif version < latest and migrates:
        detail = f"{location}: schema v{version}, migrated to v{latest} on first use; writable"
    elif version < latest:
        detail = (f"{location}: schema v{version}, written as it is (this role may not migrate it; the role "
                  f"that owns the store brings it to v{latest} with `iolab migrate --db URL`); writable")
    elif version > latest:
        detail = f"{location}: schema v{version} (newer than this iolab's v{latest}, compatible); writable"
    else:
        detail = f"{location}: schema v{version}, writable"
    if write_problem:
        state = "warn"
        if version is not None and version < latest:  # a reader migrates nothing: its owner must
            detail = (f"{location}: schema v{version}, older than this iolab's v{latest}; the role that owns "
                      f"the store migrates it (`iolab migrate --db URL`), a run here cannot")
        detail = detail.replace("; writable", "").replace(", writable", "") + \
            f"; readable (runs, report, compare, history) but not writable here: {write_problem}"
    if quota:
        role, used, allowed = quota
        detail += f"; role {role} has used {fmt_size(used)}B of its {fmt_size(allowed)}B quota"
        if used > 0.9 * allowed:
            state = "warn"
    if spooled:
        state = "warn"
        detail += (f"; {spooled} write(s) wait in the local spool (the store could not take them): "
                   f"`iolab push --spool --to URL` writes them, and so does the next run into it")
    if rejected:
        state = "warn"
        detail += f"; {rejected} write(s) the store refused for good are set aside in the spool's .rejected.jsonl"
    return Check("store", state, detail)

def root_check(euid: int) -> Check:
    if euid == 0:
        return Check("root", "ok", "running as root")
    return Check("root", "fail", "not root: loop devices, cgroups and schedulers need root; run iolab as root")


def tool_check(name: str, found: str | None, use: str, version: str | None = None,
               install: str | None = None) -> Check:
    if found:
        return Check(name, "ok", f"{version or found} ({use})")
    return Check(name, "missing", f"install {install or name}: {use}")


def compiler_check(cc: str | None, gcc: str | None) -> Check:
    found = cc or gcc
    if found:
        return Check("compiler", "ok", f"{found} builds iolab's native helpers")
    return Check("compiler", "missing", "no cc or gcc: install gcc (iolab builds its native helpers on demand)")


def accel_check(accel: str | None, reason: str, kvm_log: list[str]) -> Check:
    """KVM or TCG, with the reason; kernel log lines about KVM explain a KVM that exists but fails."""
    if accel is None:
        return Check("accel", "missing", f"cannot tell KVM from TCG: {reason}")
    if accel == "kvm":
        return Check("accel", "ok", f"KVM works ({reason})")
    hint = ""
    log = [re.sub(r"^\[\s*[\d.]+\]\s*", "", ln).strip() for ln in kvm_log]
    pvm = sorted((ln for ln in log if ln.startswith("kvm-pvm")), key=lambda ln: "loaded" not in ln)
    if pvm:
        hint = (f"; this host's KVM is kvm-pvm (nested, paravirtualised; dmesg: '{pvm[0]}'), whose guests "
                "do not boot with QEMU's CPU models")
    elif log:
        hint = f"; dmesg: '{log[-1]}'"
    reason = " / ".join(part.strip() for part in reason.splitlines() if part.strip())
    return Check("accel", "warn", f"guests run under TCG software emulation: {reason}{hint}. Guest/host speed "
                                  "ratios are not representative (counts of syncs and flushes hold); for KVM run "
                                  "on a host with usable /dev/kvm")


def cgroup_check(mode: str, backends: dict[str, str]) -> Check:
    usable = [b for b in WEIGHT_BACKENDS if backends.get(b) == "ok"]
    if usable:
        return Check("cgroups", "ok", f"mode {mode}; weight-enforcing I/O backends usable: {', '.join(usable)}")
    if mode == "none" or not backends:
        return Check("cgroups", "missing", "no cgroup I/O controller mounted (blkio on v1 or io on v2): "
                                           "cgroup-weights cannot run; mount one")
    why = "; ".join(f"{b}: {backends[b]}" for b in WEIGHT_BACKENDS if b in backends)
    return Check("cgroups", "warn", f"mode {mode}; no weight-enforcing I/O backend: cgroup-weights cannot run ({why})")


def trial_cgroup_check(info: dict[str, Any], env_name: str) -> Check:
    """Where each trial's processes will live (cgroups/trial.py): no hierarchy, no run."""
    if info.get("flavour") is None:
        return Check("trial-cgroups", "fail", f"{info.get('error')}: every trial runs in its own cgroup; "
                                              "mount cgroup2, or cpuacct and freezer on v1")
    return Check("trial-cgroups", "ok", f"{info['flavour']} in {', '.join(info['roots'])} "
                                        f"(override with ${env_name}=v1|v2)")


def scheduler_check(offered: dict[str, list[str]], bfq_module: bool) -> Check:
    """BFQ must be offered by the kernel for cgroup-weights (its weights are BFQ's)."""
    if not offered and not bfq_module:
        return Check("schedulers", "warn", "no block device to inspect and no bfq module: cannot tell whether BFQ "
                                           "is available (cgroup-weights needs it)")
    kinds = sorted({s for lst in offered.values() for s in lst})
    if "bfq" in kinds or bfq_module:
        return Check("schedulers", "ok", f"offered: {', '.join(kinds) or 'bfq (module)'}")
    return Check("schedulers", "warn", f"BFQ not offered (only {', '.join(kinds)}): modprobe bfq, or cgroup-weights "
                                       "cannot compare weighted groups")


def governor_check(governors: dict[str, str], driver: str | None) -> Check:
    if not governors:
        return Check("cpu-governor", "ok", "no cpufreq interface (a VM, or fixed clock): the frequency is not "
                                           "controlled here; other tenants of the host can still vary it")
    slow = sorted({g for g in governors.values() if g != "performance"})
    if not slow:
        return Check("cpu-governor", "ok", f"performance on all {len(governors)} CPUs ({driver or 'cpufreq'})")
    n_slow = sum(g != "performance" for g in governors.values())
    return Check("cpu-governor", "warn", f"governor {', '.join(slow)} on {n_slow} of {len(governors)} CPUs "
                                         f"({driver or 'cpufreq'}): the clock follows the load, so "
                                         "short trials run slower; set performance "
                                         "(cpupower frequency-set -g performance)")


def autogroup_check(enabled: int | None) -> Check:
    """How the scheduler will share CPU between iolab's workloads and everything else: with
    autogroups on, per session first. iolab starts each host workload in a session of its own
    ([study] workload_session = "own", the default), so it gets its own group."""
    if enabled is None:
        return Check("autogroup", "ok", "no autogroups in this kernel: CPU is shared thread by thread, whatever the "
                                        "session; workload_session changes nothing here")
    if enabled == 0:
        return Check("autogroup", "ok", "kernel.sched_autogroup_enabled = 0: CPU is shared thread by thread; a "
                                        "workload competes with every busy thread on the machine")
    return Check("autogroup", "ok", "kernel.sched_autogroup_enabled = 1: the scheduler shares CPU between sessions "
                                    "first. iolab starts each host workload in a session of its own (workload_session "
                                    "= \"own\", recorded in every run's manifest), so under contention a CPU-bound "
                                    "workload gets one session's share, however many threads other sessions run: it "
                                    "measures more than the same command run inside a busy session would. "
                                    "workload_session = \"shared\" keeps workloads in iolab's session; compare names "
                                    "a difference in either setting")


def boost_check(boost: str | None, no_turbo: str | None) -> Check:
    """Turbo/boost on: the clock depends on temperature and on what the other cores do."""
    if no_turbo is not None:
        on = no_turbo.strip() == "0"
        ctl = "/sys/devices/system/cpu/intel_pstate/no_turbo"
        fix = f"echo 1 > {ctl}"
    elif boost is not None:
        on = boost.strip() == "1"
        ctl = "/sys/devices/system/cpu/cpufreq/boost"
        fix = f"echo 0 > {ctl}"
    else:
        return Check("cpu-boost", "ok", "no turbo/boost control here (a VM, or none): nothing to set")
    if on:
        return Check("cpu-boost", "warn", f"turbo/boost on ({ctl}): the clock varies with temperature and with the "
                                          f"load of the other cores; for stable numbers: {fix}")
    return Check("cpu-boost", "ok", f"turbo/boost off ({ctl})")


def swap_check(mem: Memory | None) -> Check:
    if mem is None:
        return Check("swap", "warn", "could not read /proc/meminfo")
    if mem.swap_used > 0:
        return Check("swap", "warn", f"{mib(mem.swap_used)} of {mib(mem.swap_total)} swap in use: trials may page "
                                     "(memory and guest results suffer); free memory or swapoff -a")
    if mem.swap_total:
        return Check("swap", "ok", f"swap {mib(mem.swap_total)}, none in use")
    return Check("swap", "ok", "no swap configured: nothing can page")


@dataclass(frozen=True)
class CpuUse:
    """Who used the CPUs over a short sample: load average, others' CPUs, top consumers."""

    load1: float
    cpus: int
    others_cpus: float  # CPUs used by processes other than iolab over the sample
    seconds: float
    top: list[tuple[int, str, float]] = field(default_factory=list)  # (pid, name, CPUs)


def cpu_load_check(use: CpuUse) -> Check:
    top = ", ".join(f"pid {pid} {name} {cpus:.0%}" for pid, name, cpus in use.top[:3]) or "none"
    facts = (f"load {use.load1:.2f} on {use.cpus} CPUs; over {use.seconds:.1f} s other processes used "
             f"{use.others_cpus:.2f} CPUs (top: {top})")
    busy = use.others_cpus >= OTHERS_BUSY * use.cpus or use.load1 >= LOAD_PER_CPU * use.cpus
    if busy:
        return Check("cpu-load", "warn", f"{facts}: timing results will be flagged cpu_contended or be slower; "
                                         "wait for them or stop them before a study")
    return Check("cpu-load", "ok", facts)


def memory_check(mem: Memory | None) -> Check:
    if mem is None:
        return Check("memory", "warn", "could not read /proc/meminfo")
    facts = f"{mib(mem.available)} available of {mib(mem.total)} ({mem.bound})"
    if mem.available < GiB:
        return Check("memory", "fail", f"{facts}: guests (512 MiB-1 GiB each) and STREAM's arrays need more; "
                                       "stop other programs")
    if mem.available < 4 * GiB:
        return Check("memory", "warn", f"{facts}: vm-profile's guests and STREAM arrays will be sized down; "
                                       "the report says so")
    return Check("memory", "ok", facts)


def space_check(directory: str, free: int) -> Check:
    facts = f"{directory}: {free / GiB:.1f} GiB free"
    if free < GiB:
        return Check("scratch", "fail", f"{facts}: scratch images need 256 MiB-6 GiB; set IOLAB_SCRATCH to a "
                                        "directory on a larger filesystem")
    if free < 8 * GiB:
        return Check("scratch", "warn", f"{facts}: the --quick studies fit, full vm-profile (5 GiB disks) may not; "
                                        "set IOLAB_SCRATCH to a larger filesystem")
    return Check("scratch", "ok", facts)


def restore_check(facts: dict[str, Any], now: float) -> Check:
    """Guests restored from saved states (vm/restore.py): what the cache holds against its bound,
    and whether the last restore worked (a failure means guests boot, slower; the reason says why)."""
    if facts.get("bound_problem"):
        return Check("restore", "fail", facts["bound_problem"])
    held = (f"{facts['count']} saved guest state(s), {facts['bytes'] / 1e6:.0f} MB of "
            f"{facts['bound'] / 1e6:.0f} MB ({saved_states.MAX_ENV}) in {facts['directory']}")
    last = facts.get("last")
    if last and not last.get("ok"):
        ago = (now - float(last.get("at", now))) / 60
        return Check("restore", "warn", f"{held}; the last restore failed {ago:.0f} min ago, so that guest "
                                        f"booted: {last.get('error')}")
    free = facts.get("free")
    if free is not None and free < GiB:
        return Check("restore", "warn", f"{held}; only {free / GiB:.1f} GiB free there: a new guest shape may not "
                                        "be saved (its guests then boot); set IOLAB_CACHE to a larger filesystem")
    if last:
        return Check("restore", "ok", f"{held}; the last restore worked: guests start from saved states")
    return Check("restore", "ok", f"{held}; none restored yet: the first guest of each shape saves one, "
                                  "later ones restore it (virtio-blk, virtio-scsi, nvme; ide and ahci boot)")


def llc_check(llc: Llc, host: Memory | None) -> Check:
    """The last-level cache and what iolab will size from it (STREAM arrays, vm-profile guests)."""
    try:
        arrays = sizing.stream_arrays(llc, host)
    except sizing.DoesNotFit as exc:
        return Check("llc", "fail", f"last-level cache {mib(llc.bytes)}: {exc}")
    guest = sizing.guest_memory_for(arrays.array_mib, host)
    detail = f"last-level cache {mib(llc.bytes)} ({llc.source}): {arrays.reason}; vm-profile: {guest.reason}"
    if llc.source == "assumed":
        return Check("llc", "warn", f"no cache sizes in {sizing.CACHE_DIR}: iolab assumes {mib(llc.bytes)}, so "
                                    f"STREAM's 4 x LLC rule may not hold (flagged llc_unknown). {detail}")
    if llc.source == sizing.FAKE_LLC_ENV:
        return Check("llc", "warn", f"{sizing.FAKE_LLC_ENV} is set (meant for tests): sizes follow a pretend cache; "
                                    f"unset it for real results. {detail}")
    if arrays.reduced or guest.reduced:
        return Check("llc", "warn", f"{detail}: arrays below 4 x LLC are flagged; free memory for full-size arrays")
    return Check("llc", "ok", detail)


# ---------------------------------------------------------------------------- facts (edges)

def _cpufreq() -> tuple[dict[str, str], str | None, str | None, str | None]:
    """(governor per CPU, driver, cpufreq/boost, intel_pstate/no_turbo); empty/None when absent."""
    governors = {}
    driver = None
    for d in sorted(CPUFREQ.glob("cpu[0-9]*/cpufreq")):
        try:
            governors[d.parent.name] = (d / "scaling_governor").read_text().strip()
            driver = driver or (d / "scaling_driver").read_text().strip()
        except OSError:
            continue
    read = lambda p: p.read_text() if p.exists() else None  # noqa: E731
    return governors, driver, read(CPUFREQ / "cpufreq" / "boost"), read(CPUFREQ / "intel_pstate" / "no_turbo")


def _proc_ticks() -> dict[int, tuple[str, int]]:
    """pid -> (name, utime + stime in clock ticks) of every process."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name = text[text.find("(") + 1:text.rfind(")")]
        fields = text[text.rfind(")") + 2:].split()
        out[int(entry)] = (name, int(fields[11]) + int(fields[12]))
    return out


def cpu_use(seconds: float = 1.0) -> CpuUse:
    """Sample every process's CPU time over `seconds` (iolab itself and its children excluded)."""
    hz = os.sysconf("SC_CLK_TCK")
    a = _proc_ticks()
    t0 = time.monotonic()
    time.sleep(seconds)
    b = _proc_ticks()
    dt = time.monotonic() - t0
    me = os.getpid()
    used = sorted(((pid, name, (ticks - a[pid][1]) / hz / dt) for pid, (name, ticks) in b.items()
                   if pid in a and pid != me), key=lambda x: -x[2])
    others = sum(c for _, _, c in used)
    return CpuUse(os.getloadavg()[0], os.cpu_count() or 1, others, dt, [u for u in used if u[2] >= 0.01][:5])


def _kvm_log() -> list[str]:
    """Kernel log lines about KVM (they explain a /dev/kvm whose guests do not boot)."""
    try:
        out = children.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [ln for ln in out.splitlines() if re.search(r"\bkvm(-\w+)?:", ln) and "kvm-clock" not in ln
            and "kvm-guest" not in ln][-5:]


def _accel() -> tuple[str | None, str]:
    try:
        info = detect_accel()
    except Exception as exc:  # doctor reports, never crashes
        return None, f"could not probe: {exc}"
    return info.accel, info.reason


def _schedulers() -> dict[str, list[str]]:
    out = {}
    for dev in sorted(Path("/sys/block").iterdir()):
        p = dev / "queue" / "scheduler"
        try:
            out[dev.name] = p.read_text().replace("[", " ").replace("]", " ").split()
        except OSError:
            continue
    return out


def _cgroups() -> tuple[str, dict[str, str]]:
    try:
        info = describe()
        return info["mode"], info["backends"]
    except Exception as exc:  # doctor reports, never crashes
        return cgroup_mode(), {"detection": f"failed: {exc}"}


def target_checks() -> list[Check]:
    """What each registered target kind needs of this machine (Target.machine_checks), each
    line once: a new target brings its own lines, doctor lists no target kind."""
    found: dict[str, Check] = {}
    for kind in registry.TARGETS:
        try:
            lines = registry.target_class(kind).machine_checks()
        except Exception as exc:  # doctor reports, never crashes
            found[kind] = Check(kind, "warn", f"could not check what the {kind} target needs: {exc}")
            continue
        for c in lines:
            found.setdefault(c.name, Check(c.name, c.state, c.detail))
    return list(found.values())


def fio_server_check(state: str, detail: str) -> Check:
    """A fio server on this machine that other machines can reach runs any job it is sent."""
    return Check("fio-server", "warn" if state == "warn" else "ok", detail)


def _store(ref: str, what: str) -> Check:
    """Facts about the store at `ref` (reachable, writable, version), read without changing it."""
    location = stores.shown(ref)
    write_problem = None
    try:
        cls = stores.backend_for(ref, what)
        stored = cls.stored_schema(ref, what)
        schema.check_read(stored, location)  # a store too new to read: a fail
        try:
            cls.check_target(ref, what)
        except IolabError as exc:
            if stored.version is None:
                raise
            write_problem = str(exc).replace(f"{what} {location}: ", "").replace(f"{location} ", "")
    except IolabError as exc:
        return store_check(location, str(exc), None, schema.LATEST, 0)
    spool = Spool(location)
    remote = stores.scheme_of(ref) != "sqlite"
    used, migrates = None, True
    try:
        used = None if write_problem else cls.quota(ref, what)
        migrates = bool(write_problem) or (stored.version or schema.LATEST) >= schema.LATEST or cls.migrates(ref, what)
    except IolabError:
        pass  # details: what could not be read is said by the lines above
    return store_check(location, None, stored.version, schema.LATEST, spool.count() if remote else 0, write_problem,
                       spool.rejected_count() if remote else 0, used, migrates)


def checks(store: tuple[str, str] | None = None) -> dict[str, Any]:
    """Every check; `store` is the (--db value, how to name it) of the results store to check."""
    env = environment()
    host = sizing.host_memory()
    governors, driver, boost, no_turbo = _cpufreq()
    scratch = paths.scratch_dir()
    items = [
        root_check(os.geteuid()),
        tool_check("fio", shutil.which("fio"), "every disk workload", env["fio_version"]),
        tool_check("bwrap", shutil.which("bwrap"), "confines every trial's processes and QEMU: runs stop without it",
                   install="bubblewrap"),
        tool_check("qemu", shutil.which("qemu-system-x86_64"), "the VM studies", env["qemu_version"],
                   "qemu-system-x86 and qemu-utils"),
        accel_check(*_accel(), _kvm_log()),
        restore_check(saved_states.status(), time.time()),
        cgroup_check(*_cgroups()),
        trial_cgroup_check(trial_cgroups.describe(), trial_cgroups.FLAVOUR_ENV),
        scheduler_check(_schedulers(), Path("/sys/module/bfq").exists()),
        *target_checks(),
        compiler_check(shutil.which("cc"), shutil.which("gcc")),
        governor_check(governors, driver),
        boost_check(boost, no_turbo),
        autogroup_check(sched_autogroup()),
        cpu_load_check(cpu_use()),
        swap_check(host),
        memory_check(host),
        space_check(str(scratch), sizing.free_bytes(scratch)),
        llc_check(sizing.read_llc(), host),
        *[tool_check(tool, shutil.which(tool), use, install=INSTALL.get(tool)) for tool, use in TOOLS.items()],
        fio_server_check(*fleet_serve.security_line(
            fleet_serve.running_servers(), [s for s, uid in fleet_serve.running_server_processes() if uid == 0])),
        _store(*(store or (str(paths.default_db()), "results database"))),
    ]
    return {"environment": env, "checks": [c.as_dict() for c in items]}
