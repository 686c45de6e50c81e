"""What differs between two runs besides what they measured: every recorded fact a number may
depend on, so a comparison never reads as like-for-like when it is not.

Compared: the study; every key of the runs' environments (machine, CPU, kernel, fio, QEMU,
qemu-img, iolab, Python, cgroup mode, CPU frequency governor, autogroup and the session
placement iolab gives workloads, ...; only the start time and the command line are left
out); the I/O schedulers the trials ran under; and the confounder flags raised on the trials
("load flags": cpu_contended, cpu_saturated, generator_cpu_bound, tcg_emulation, ...), as
"k of n trials" per run. Pure: two result documents in, sentences out.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from iolab.analysis.flags import name_of

# What each environment key is called in a sentence; keys not listed are shown by their name.
LABELS = {"hostname": "machine", "cpu_model": "CPU", "cpus": "CPUs", "kernel": "kernel",
          "kernel_version": "kernel build", "fio_version": "fio", "qemu_version": "QEMU",
          "qemu_img_version": "qemu-img", "iolab_version": "iolab", "python": "Python",
          "cgroup_mode": "cgroup mode", "memory_bytes": "memory", "machine": "architecture",
          "cpu_governor": "CPU governor", "sched_autogroup": "autogroup (kernel.sched_autogroup_enabled)",
          "workload_session": "workload session placement"}
IGNORED = frozenset({"started_utc", "command"})  # differ between any two runs, by design


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """One line per difference; [] when everything recorded agrees."""
    out = []
    if a.get("study") != b.get("study"):
        out.append(f"study differs: A {_known(a.get('study'))}, B {_known(b.get('study'))}")
    ea, eb = a.get("environment") or {}, b.get("environment") or {}
    ordered = [k for k in LABELS if k in ea or k in eb] + sorted((set(ea) | set(eb)) - set(LABELS) - IGNORED)
    for key in ordered:
        if ea.get(key) != eb.get(key):
            out.append(f"{LABELS.get(key, key)} differs: A {_known(ea.get(key))}, B {_known(eb.get(key))}")
    sa, sb = schedulers(a), schedulers(b)
    if sa != sb:
        out.append(f"scheduler differs: A {', '.join(sa) or 'unknown'}, B {', '.join(sb) or 'unknown'}")
    fa, fb = flag_counts(a), flag_counts(b)
    na, nb = _trials(a), _trials(b)
    for flag in sorted(set(fa) | set(fb)):
        if fa.get(flag, 0) / max(na, 1) != fb.get(flag, 0) / max(nb, 1):
            out.append(f"flag {flag} differs: A {fa.get(flag, 0)} of {na} trials, B {fb.get(flag, 0)} of {nb}")
    return out


def _known(v: Any) -> str:
    return "unknown" if v is None else str(v)


def _trials(doc: dict[str, Any]) -> int:
    return sum(t.get("status") == "ok" for t in doc.get("trials") or [])


def flag_counts(doc: dict[str, Any]) -> Counter[str]:
    """How many successful trials raised each confounder flag (a trial counts once per flag)."""
    c: Counter[str] = Counter()
    for t in doc.get("trials") or []:
        if t.get("status") == "ok":
            c.update({name_of(f) for f in t.get("flags") or []})
    return c


def schedulers(doc: dict[str, Any]) -> list[str]:
    """The active I/O schedulers of the devices the trials ran on (from each trial's manifest)."""
    found = set()
    for t in doc.get("trials") or []:
        queue = ((t.get("manifest") or {}).get("target") or {}).get("queue") or {}
        if isinstance(queue, dict) and queue.get("scheduler_active"):
            found.add(str(queue["scheduler_active"]))
    return sorted(found)
