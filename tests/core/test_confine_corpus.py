"""The hostile corpus (tests/core/confine_corpus.py), run for real inside the confinement.

Canaries stand where the inputs point: a loop device of random bytes that iolab did not make
(for the root disk), canary files, a file hard-linked into the host directory, and the files
each host directory held before. Every input gets host directories of its own, on a small
ext4 filesystem this test makes (so a space bomb fills that, not the machine's disk), with
its links, device nodes, FIFOs and hard links planted at the names it aims at. Then:

A. the product's first line: `iolab run SPEC --dry-run` (in-process) refuses it or not;
B. what it accepted runs for real: one `iolab run` of all of them (confined, bounded trials);
C. with the parser out of the way: fio runs each raw job text in the confinement a host
   target gives its trials, in a bounded trial cgroup, so the confinement alone must hold.

After all three: every canary's checksum is unchanged, no file appeared outside the host
directories, and no trial exceeded its bounds. The counts are printed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner
from tests.core.canary import Canaries, sha256
from tests.core.confine_corpus import Input, corpus
from tests.core.helpers import Lab, needs_fio, needs_root

from iolab.cgroups import executor as host_exec  # MAX_OUTPUT as the host executor reads it
from iolab.cgroups.executor import HostExecutor
from iolab.cgroups.trial import Bounds, TrialCgroup
from iolab.core.confine import Confinement
from iolab.core.exec import ExecRequest

pytestmark = [needs_root, needs_fio, pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")]

OS_REFUSALS = re.compile(r"Read-only file system|Permission denied|Operation not permitted|No such file or directory|"
                         r"No such device|Resource temporarily unavailable|Device or resource busy")
RAW_TIMEOUT_S = 6.0
RAW_BOUNDS = Bounds(pids=1024, memory=1 << 30)


@dataclass
class World:
    """Everything the corpus points at, and the places it runs in."""

    root: Path
    canaries: Canaries
    userfs: Path
    links: Path
    procmount: Path
    hardlink_canary: Path
    users_files: dict[str, str] = field(default_factory=dict)  # checksums of what host dirs held before

    def subst(self, text: str, host: Path) -> str:
        dev = self.canaries.device
        return (text.replace("{DEVNAME}", os.path.basename(dev)).replace("{DEVLINK}", str(self.links / "fastdisk"))
                .replace("{DEV}", dev).replace("{CFILE}", str(self.canaries.files[0]))
                .replace("{CETC}", str(self.canaries.files[1])).replace("{CROOT}", str(self.canaries.root))
                .replace("{SYSLINK}", str(self.links / "etc")).replace("{PROCMOUNT}", str(self.procmount))
                .replace("{H}", str(host)))

    def host_dir(self, phase: str, inp: Input) -> Path:
        """A fresh host directory: two files of the user's, then what the input plants."""
        h = self.userfs / phase / inp.id
        (h / "sub").mkdir(parents=True)
        (h / "user.dat").write_bytes(b"user " + os.urandom(2048))
        (h / "sub" / "deep.txt").write_text("the user's\n")
        for f in (h / "user.dat", h / "sub" / "deep.txt"):
            self.users_files[str(f)] = sha256(f)
        rdev = os.stat(self.canaries.device).st_rdev
        targets = {"dev": self.canaries.device, "file": str(self.canaries.files[0]),
                   "etc": str(self.canaries.files[1]), "croot": str(self.canaries.root), "root": "/",
                   "devdir": "/dev", "proc": "/proc"}
        for name, what in inp.plant.items():
            p = h / name
            if what in targets:
                p.symlink_to(targets[what])
            elif what == "node":
                os.mknod(p, stat.S_IFBLK | 0o600, rdev)
            elif what == "fifo":
                os.mkfifo(p)
            elif what == "hardlink":
                os.link(self.hardlink_canary, p)
        return h

    def sums(self) -> dict[str, str]:
        """Checksums of every canary."""
        out = self.canaries.now()
        out[str(self.hardlink_canary)] = sha256(self.hardlink_canary)
        return out

    def users_files_changed(self) -> list[str]:
        return sorted(f for f, digest in self.users_files.items()
                      if not os.path.exists(f) or sha256(f) != digest)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    canaries = Canaries(tmp_path / "canaries").make()
    img = tmp_path / "userfs.img"
    with open(img, "wb") as f:
        f.truncate(512 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-N", "200000", str(img)], check=True, capture_output=True)
    userfs = tmp_path / "userfs"
    userfs.mkdir()
    loop = subprocess.run(["losetup", "--find", "--show", str(img)], check=True, capture_output=True,
                          text=True).stdout.strip()
    procmount = tmp_path / "procmnt"
    procmount.mkdir()
    try:
        subprocess.run(["mount", loop, str(userfs)], check=True, capture_output=True)
        subprocess.run(["mount", "-t", "proc", "proc", str(procmount)], check=True, capture_output=True)
        links = tmp_path / "links"
        links.mkdir()
        (links / "fastdisk").symlink_to(canaries.device)
        (links / "etc").symlink_to("/etc")
        hardlink_canary = userfs / "canary-hardlinked"
        hardlink_canary.write_bytes(b"canary " + os.urandom(4096))
        yield World(tmp_path, canaries, userfs, links, procmount, hardlink_canary)
    finally:
        subprocess.run(["umount", str(procmount)], capture_output=True)
        subprocess.run(["umount", "-l", str(userfs)], capture_output=True)
        subprocess.run(["losetup", "-d", loop], capture_output=True)
        canaries.close()


def _spec_text(world: World, inp: Input, host: Path) -> str:
    if inp.spec is not None:
        return world.subst(inp.spec, host)
    text = world.subst(inp.job or "", host)
    return ('[study]\nname = "corpus"\nrepetitions = 1\nmax_repetitions = 1\ntrial_timeout = 30\n'
            f'[target]\nkind = "host"\ndirectory = "{host}"\n'
            f'[workload]\nkind = "fio-jobfile"\njob_file = "{inp.id}.fio"\njob_text = {json.dumps(text)}\n')


def _phase_a(world: World, lab: Lab, inputs: list[Input], monkeypatch: pytest.MonkeyPatch) -> dict[str, str | None]:
    """iolab run SPEC --dry-run, in this process: None when accepted, else the refusal."""
    from iolab.cli import _register_studies, cli
    from iolab.core.errors import IolabError

    _register_studies()
    for k, v in lab.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("IOLAB_CORPUS_UNSET", raising=False)
    runner = CliRunner()
    out: dict[str, str | None] = {}
    for inp in inputs:
        host = world.host_dir("a", inp)
        spec = lab.root / "specs" / f"{inp.id}.toml"
        spec.parent.mkdir(exist_ok=True)
        spec.write_text(_spec_text(world, inp, host))
        r = runner.invoke(cli, ["run", str(spec), "--dry-run"], catch_exceptions=True)
        if isinstance(r.exception, IolabError):  # what iolab's main() prints and exits with
            assert r.exception.exit_status == 2, f"{inp.id}: {r.exception}"
            out[inp.id] = " ".join(str(r.exception).split())[-300:]
            continue
        assert r.exception is None or isinstance(r.exception, SystemExit), (inp.id, r.output, r.exc_info)
        assert r.exit_code in (0, 2), f"{inp.id}: exit {r.exit_code}\n{r.output}"
        out[inp.id] = None if r.exit_code == 0 else " ".join(r.output.split())[-300:]
    return out


def _phase_b(world: World, lab: Lab, accepted: list[Input]) -> dict[str, tuple[str, str | None]]:
    """The accepted inputs, run for real by one `iolab run`: {id: (status, error)}."""
    jobs = [i for i in accepted if i.job is not None]
    out: dict[str, tuple[str, str | None]] = {}
    if jobs:
        parts = ['[study]\nname = "corpus-real"\nrepetitions = 1\nmax_repetitions = 1\ntrial_timeout = 30\n']
        where: dict[str, str] = {}
        for n, inp in enumerate(jobs):
            host = world.host_dir("b", inp)
            where[str(host)] = inp.id
            parts.append(f'[[targets]]\nname = "t{n}"\nkind = "host"\ndirectory = "{host}"\n')
            parts.append(f'[[workloads]]\nname = "w{n}"\nkind = "fio-jobfile"\njob_file = "{inp.id}.fio"\n'
                         f'targets = ["t{n}"]\njob_text = {json.dumps(world.subst(inp.job or "", host))}\n')
        spec = lab.spec("".join(parts), name="corpus-real.toml")
        r = lab.iolab("run", spec, timeout=900)
        assert r.returncode in (0, 1), r.stderr[-3000:]
        for t in lab.report_json()["trials"]:
            out[where[t["params"]["_target"]["directory"]]] = (t["status"], t["error"])
            bounds = t["manifest"].get("trial_cgroup", {}).get("bounds", {}) if t["manifest"] else {}
            peaks = t["manifest"].get("trial_cgroup", {}) if t["manifest"] else {}
            if bounds.get("pids") and "pids_peak" in peaks:
                assert peaks["pids_peak"] <= bounds["pids"], t["id"]
            if bounds.get("memory") and "memory_peak" in peaks:
                assert peaks["memory_peak"] <= bounds["memory"], t["id"]
    for inp in (i for i in accepted if i.spec is not None):  # none expected: a whole spec the parser let through
        spec = lab.spec(_spec_text(world, inp, world.host_dir("b", inp)), name=f"{inp.id}.toml")
        r = lab.iolab("run", spec, timeout=300)
        out[inp.id] = ("ok" if r.returncode == 0 else "failed", None if r.returncode == 0 else r.stderr[-300:])
    return out


@dataclass
class Raw:
    returncode: int
    refused_by_os: bool
    timed_out: bool
    output_exceeded: bool
    pids_peak: int | None
    memory_peak: int | None


def _phase_c_one(world: World, inp: Input, host: Path) -> Raw:
    """fio on the raw job text (with iolab's directory, but no check at all) in the trial confinement,
    as the `host` target gives it: only a directory made inside the user's (with the planted links,
    the user's files and every other name of it read-only) is writable."""
    own = host / "iolab-raw"  # made with the plants: a bomb filling the filesystem must not stop a mkdir
    text = world.subst(inp.job or "", host)
    if "directory" not in text:  # as iolab renders a job: its directory first, unless the file sets its own
        text = f"[global]\ndirectory={own}\n" + text
    cg = TrialCgroup.create(None, bounds=RAW_BOUNDS)
    ex = HostExecutor(world.root / "scratch", confinement=Confinement(writable=(str(own),))).within(cg)
    try:
        r = ex.run(ExecRequest(["fio", "job.fio"], timeout_s=RAW_TIMEOUT_S, files={"job.fio": text}))
        peaks = cg.peaks()
    finally:
        ex.close()
        cg.close()
    shutil.rmtree(own, ignore_errors=True)  # as the target's teardown: a bomb's files go, the next run has room
    return Raw(r.returncode, bool(OS_REFUSALS.search(r.stdout + r.stderr)), r.timed_out, r.output_exceeded,
               peaks.get("pids_peak"), peaks.get("memory_peak"))


def test_hostile_corpus_runs_for_real_and_every_canary_survives(world: World, lab: Lab,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = corpus()
    assert len(inputs) >= 300
    before = world.sums()
    outside_before = _outside(world)
    t0 = time.monotonic()

    refused = _phase_a(world, lab, inputs, monkeypatch)
    accepted = [i for i in inputs if refused[i.id] is None]
    t_a = time.monotonic() - t0

    real = _phase_b(world, lab, accepted)
    t_b = time.monotonic() - t0 - t_a

    monkeypatch.setattr(host_exec, "MAX_OUTPUT", 4 << 20)
    jobs = [i for i in inputs if i.job is not None]
    hosts = {i.id: world.host_dir("c", i) for i in jobs}  # all planted first: a space bomb must not stop a plant
    for host in hosts.values():
        (host / "iolab-raw").mkdir()  # the directory the host target would make inside the user's
    bombs = [i for i in jobs if i.family.startswith("resource bombs")]
    rest = [i for i in jobs if i not in bombs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        raw = dict(zip([i.id for i in rest], pool.map(lambda i: _phase_c_one(world, i, hosts[i.id]), rest),
                       strict=True))
    with ThreadPoolExecutor(max_workers=2) as pool:  # two at a time: each bomb meets the bounds it tests
        raw.update(zip([i.id for i in bombs], pool.map(lambda i: _phase_c_one(world, i, hosts[i.id]), bombs),
                       strict=True))
    t_c = time.monotonic() - t0 - t_a - t_b

    changed = sorted(k for k, v in world.sums().items() if before.get(k) != v)
    assert changed == [], f"canaries changed: {changed}"
    users = world.users_files_changed()
    assert users == [], f"{len(users)} files of the users' changed, e.g. {users[:5]}"
    assert _outside(world) == outside_before, "something appeared outside the host directories"
    for i, r in raw.items():
        assert r.pids_peak is None or r.pids_peak <= RAW_BOUNDS.pids, (i, r)
        assert r.memory_peak is None or r.memory_peak <= (RAW_BOUNDS.memory or 0), (i, r)
    measured = [r for r in raw.values() if r.pids_peak is not None]
    most_pids = max((r.pids_peak or 0 for r in raw.values()), default=0)
    most_memory = max((r.memory_peak or 0 for r in raw.values()), default=0)

    by_confinement = [i for i in accepted if i.id in real and real[i.id][0] != "ok"
                      and OS_REFUSALS.search(real[i.id][1] or "")]
    harmless = [i for i in accepted if i.id in real and real[i.id][0] == "ok"]
    other = [i for i in accepted if i not in by_confinement and i not in harmless]
    hostile_raw = [i for i in jobs if i.aims]
    stopped_raw = [i for i in hostile_raw if raw[i.id].returncode != 0 or raw[i.id].refused_by_os]
    print(f"\nconfinement corpus: {len(inputs)} inputs ({len(jobs)} job files, {len(inputs) - len(jobs)} specs), "
          f"{dict(Counter(i.family for i in inputs))}")
    print(f"  refused by the parser: {len(inputs) - len(accepted)}; accepted and run for real: {len(accepted)} "
          f"(stopped only by the confinement: {len(by_confinement)}, accepted and harmless: {len(harmless)}, "
          f"failed otherwise: {len(other)})")
    print(f"  parser bypassed, raw job text run by fio in the confinement: {len(raw)} runs, {len(hostile_raw)} aiming "
          f"at a canary: all stopped (every canary unchanged); fio failed on {len(stopped_raw)} of them "
          f"({sum(r.refused_by_os for r in raw.values())} runs saw the kernel refuse a path) and wrote only in "
          f"its own directory in the others; {sum(r.timed_out for r in raw.values())} timed out, "
          f"{sum(r.output_exceeded for r in raw.values())} killed for flooding stdout; most tasks in one trial "
          f"{most_pids} (bound {RAW_BOUNDS.pids}), most memory {most_memory >> 20} MiB "
          f"(bound {(RAW_BOUNDS.memory or 0) >> 20} MiB)")
    print(f"  canaries: {len(before)} checksums and {len(world.users_files)} files of the users' unchanged; "
          f"time: parser {t_a:.0f} s, real runs {t_b:.0f} s, raw runs {t_c:.0f} s")
    reasons = Counter(" ".join((real[i.id][1] or "").split())[:90] for i in other)
    for why, n in reasons.most_common(5):
        print(f"  accepted, failed for fio's own reason ({n}): {why}")
    assert all(i.id in real for i in accepted)
    assert len(measured) == len(raw) or not (Path("/sys/fs/cgroup/pids").is_dir()), "peaks were not measured"
    assert not [i.id for i in inputs if i.family == "controls" and refused[i.id] is not None], \
        "the controls must be accepted (a parser that refuses everything passes nothing)"
    assert not [i.id for i in accepted if i.family == "controls" and real[i.id][0] != "ok"], real


def _outside(world: World) -> dict[str, list[str]]:
    """What the places around the host directories hold: nothing may appear there but the
    phases' own directories (userfs/a, b, c; the lab's data and the raw runs' scratch dir)."""
    allowed = {"a", "b", "c", "lab", "scratch"}
    return {str(d): sorted(p.name for p in d.iterdir() if p.name not in allowed)
            for d in (world.canaries.root, world.links, world.userfs, world.root)}
