"""Every registered workload on every registered target: runnable, or refused before the run
with a reason, and the verdict is true.

The targets are sampled in each shape that changes what they offer (a loop device raw and
with ext4, a guest bare and with ext4, its applications and a network, a cgroups target raw
and with ext4, a fleet of one fio server on a unix socket here, a device, a filesystem image).
For every pair:

* spec validation either accepts it or refuses it with exit-2 text naming the workload, the
  target (its name, kind and deciding keys) and why (targets/offer.py);
* every accepted pair passes `iolab run --dry-run` (the targets' preflights run);
* one accepted pair per workload really runs on a host-side target (one study, every trial ok);
* every refused pair on a host-side target, forced past validation, really fails when run:
  a refusal is never a guess that a run would have disproved.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.core.helpers import Lab, _toml, drive, make_lab, needs_fio, needs_root, one_line

from iolab.core import registry
from iolab.core.errors import SpecError
from iolab.core.paths import cache_dir
from iolab.spec import study as specs
from iolab.targets.base import refusal

pytestmark = [needs_root, needs_fio]

JOB = "[pairs]\nrw=randwrite\nbs=4k\nsize=4m\nioengine=psync\n"
# the smallest valid configuration of each workload (the defaults where they are small already)
WORKLOADS: dict[str, dict[str, Any]] = {
    "fio": {"size": "8M", "runtime": 1, "ramp_time": 0},
    "fio-jobfile": {"job_file": "pairs.fio", "job_text": JOB},
    "iozone": {"file_size": "4M", "record": "64k"},
    "writemode": {"mode": "buffered", "bs": "4k", "size": "1M"},
    "fio-groups": {"groups": 2, "weights": [100, 200], "runtime": 5, "warmup": 0.5, "iodepth": 4},
    "sync-writes": {"bs": "4k", "count": 8},
    "primes": {"limits": [1000, 10000]},
    "sysbench-cpu": {"time": 1},
    "stream": {"array_mib": 4, "ntimes": 2},
    "iperf3": {"time": 1, "omit": 0},
    "varmail": {"nfiles": 50, "iterations": 200, "nthreads": 2},
    "ycsb": {"recordcount": 200, "operationcount": 200, "heap": "256M"},
    "qemu_img_bench": {"count": 256, "depth": 4},
}
# programs a workload runs on the host (absent: its pairs are judged, not run)
PROGRAMS = {"sysbench-cpu": "sysbench", "iperf3": "iperf3", "ycsb": "java", "qemu_img_bench": "qemu-img"}


def target_samples(device: str, image: Path, sock: Path, data: Path) -> dict[str, dict[str, Any]]:
    helpers = ["iolab_primes", "iolab_stream", "iolab_varmail", "iolab_writemode"]
    return {
        "host": {"kind": "host"},
        "loop-raw": {"kind": "loop", "size": "64M"},
        "loop-ext4": {"kind": "loop", "size": "128M", "filesystem": "ext4"},
        "device": {"kind": "device", "device": device},
        "cgroups-raw": {"kind": "cgroups", "controller": "none", "size": "128M"},
        "cgroups-ext4": {"kind": "cgroups", "controller": "none", "size": "256M", "filesystem": "ext4",
                         "data_size": "64M"},
        "fsimage": {"kind": "fsimage", "image": str(image)},
        "qemu-raw": {"kind": "qemu"},
        "qemu-full": {"kind": "qemu", "guest_fs": "ext4", "disk_size": "256M", "memory": "1G", "guest_apps": ["ycsb"],
                      "native_helpers": helpers, "extra_binaries": ["/usr/bin/sysbench", "/usr/bin/iperf3"],
                      "network": "user", "net_peer": True},
        "fleet": {"kind": "fleet", "hosts": [{"name": "h1", "address": str(sock), "filename": str(data)}]},
    }


HOST_SIDE = ("host", "loop-raw", "loop-ext4", "device", "cgroups-raw", "cgroups-ext4", "fsimage")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A free block device (a loop device over a zeroed file), an ext4 image, a fio server."""
    base = Path(tempfile.mkdtemp(prefix="iolab-test-pairs-", dir="/var/tmp"))
    raw, image, sock = base / "device.img", base / "image.ext4", base / "fio.sock"
    subprocess.run(["truncate", "-s", "64M", str(raw)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image), "128M"], check=True, capture_output=True)
    dev = subprocess.run(["losetup", "--find", "--show", str(raw)], capture_output=True, text=True,
                         check=True).stdout.strip()
    server = subprocess.Popen(["fio", f"--server=sock:{sock}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lab = make_lab(tmp_path_factory.mktemp("pairs"))
    lab.env["IOLAB_CACHE"] = str(cache_dir())  # YCSB's jars and guest bundle, and the guest image (set-up built them)
    try:
        deadline = time.monotonic() + 20
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sock.exists(), "fio --server did not make its socket"
        samples = target_samples(dev, image, sock, base / "fleet.dat")
        # the device is the test's, not iolab's: runs name it as a user would (--destroy-data)
        yield {"lab": lab, "targets": samples, "verdicts": verdicts(samples), "destroy": ["--destroy-data", dev]}
    finally:
        server.kill()
        server.wait()
        lab.force_cleanup()
        subprocess.run(["losetup", "-d", dev], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def _doc(pairs: list[tuple[str, str]], targets: dict[str, dict[str, Any]], name: str, reps: int = 1) -> dict:
    """One study: each workload table runs on the one target its pair names."""
    used = sorted({t for _, t in pairs})
    return {"study": {"name": name, "repetitions": reps, "max_repetitions": reps},
            "targets": [{"name": t, **targets[t]} for t in used],
            "workloads": [{"name": f"{w}@{t}", "targets": [t], **{"kind": w}, **WORKLOADS.get(w, {})}
                          for w, t in pairs]}


def verdicts(targets: dict[str, dict[str, Any]]) -> dict[tuple[str, str], str | None]:
    """(workload, target) -> None when spec validation accepts the pair, else its message."""
    out: dict[tuple[str, str], str | None] = {}
    for w in registry.WORKLOADS:
        for t in targets:
            try:
                specs.from_dict(_doc([(w, t)], targets, "pair"), "pair.toml")
                out[(w, t)] = None
            except SpecError as exc:
                out[(w, t)] = "; ".join(msg for _, msg in exc.problems)
    return out


def _toml_doc(doc: dict[str, Any]) -> str:
    lines = ["[study]", *(f"{k} = {_toml(v)}" for k, v in doc["study"].items())]
    for table in ("targets", "workloads"):
        for entry in doc[table]:
            lines.append(f"[[{table}]]")
            nested = {k: v for k, v in entry.items() if isinstance(v, list) and v and isinstance(v[0], dict)}
            lines += [f"{k} = {_toml(v)}" for k, v in entry.items() if k not in nested]
            for k, rows in nested.items():
                for row in rows:
                    lines += [f"[[{table}.{k}]]", *(f"{rk} = {_toml(rv)}" for rk, rv in row.items())]
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------- judged

def test_every_pair_is_runnable_or_refused_naming_workload_target_and_reason(world: dict[str, Any]) -> None:
    targets, got = world["targets"], world["verdicts"]
    unsampled = set(registry.TARGETS) - {t["kind"] for t in targets.values()}
    assert not unsampled, f"add a sample of each registered target kind to target_samples(): {sorted(unsampled)}"
    assert {w for w, _ in got} == set(registry.WORKLOADS)
    for (w, t), message in got.items():
        if message is None:
            continue
        kind = targets[t]["kind"]
        named = f"target {kind} (" if t == kind else f"target '{t}' ({kind}: "
        assert f"workload '{w}@{t}' ({w}) cannot run on {named}" in message, message
        reason = message.split("): ", 1)[1]
        assert reason.startswith(("it needs", "it runs only")) or "refused" in reason, message
        # the same sentence the model gives: the spec names what refusal() decided, nothing else
        cls = registry.target_class(kind)
        offer = cls.offer(cls.Params(**targets[t]))
        needs = registry.workload_class(w).needs(registry.workload_class(w).Params(
            **{"kind": w, **WORKLOADS.get(w, {})}).model_dump(mode="json"))
        assert refusal(needs, offer) in message, (w, t, message)
    table = "\n".join(f"{w:>15}: " + " ".join(f"{t}={'ok' if got[(w, t)] is None else 'REFUSED'}" for t in targets)
                      for w in registry.WORKLOADS)
    print(f"\n{table}\n{sum(v is None for v in got.values())} runnable, "
          f"{sum(v is not None for v in got.values())} refused of {len(got)} pairs")
    # what the offers must say on this machine, whatever else changes (each a reason users rely on)
    refused = {k: v for k, v in got.items() if v is not None}
    expect = {("varmail", "loop-raw"): 'set filesystem = "ext4"', ("writemode", "device"): "a raw block device",
              ("ycsb", "qemu-raw"): 'guest_apps = ["ycsb"]', ("qemu_img_bench", "qemu-full"): "runs only on the host",
              ("primes", "fleet"): "on a fleet of fio servers", ("fio-groups", "host"): "weighted cgroups",
              ("iperf3", "qemu-raw"): 'set network = "user"',
              ("stream", "qemu-raw"): 'native_helpers = ["iolab_stream"]'}
    for pair, words in expect.items():
        assert pair in refused and words in refused[pair], (pair, refused.get(pair))
    for pair in [("fio", "fleet"), ("ycsb", "qemu-full"), ("writemode", "fsimage"), ("varmail", "cgroups-ext4"),
                 ("qemu_img_bench", "device"), ("iperf3", "qemu-full"), ("fio-groups", "cgroups-raw")]:
        assert got[pair] is None, (pair, got[pair])


def test_every_runnable_pair_passes_dry_run(world: dict[str, Any]) -> None:
    lab: Lab = world["lab"]
    runnable = [p for p, v in world["verdicts"].items() if v is None and shutil.which(PROGRAMS.get(p[0], "true"))]
    paths = []
    for i, pair in enumerate(runnable):
        p = lab.root / f"dry-{i}.toml"
        p.write_text(_toml_doc(_doc([pair], world["targets"], "dry")))
        paths.append(p)
    results = drive(lab, [["run", str(p), "--dry-run", *world["destroy"]] for p in paths])
    for pair, res in zip(runnable, results, strict=True):
        assert res["exit"] == 0 and not res["traceback"], (pair, one_line(res["stderr"]))
        assert f"{world['targets'][pair[1]]['kind']}: runs workloads" in one_line(res["stdout"] + res["stderr"]), pair
    assert not lab.db.exists() and lab.scratch_entries() == []


# -------------------------------------------------------------------------------- really run

def _host_side(world: dict[str, Any], accepted: bool) -> list[tuple[str, str]]:
    return [p for p, v in world["verdicts"].items() if (v is None) == accepted and p[1] in HOST_SIDE
            and shutil.which(PROGRAMS.get(p[0], "true"))]


def test_a_runnable_pair_of_each_workload_really_runs(world: dict[str, Any]) -> None:
    """One study: each workload on one host-side target that accepts it, the targets taken in
    turn so every host-side target is used; every trial ok."""
    lab: Lab = world["lab"]
    pairs: list[tuple[str, str]] = []
    uses: dict[str, int] = dict.fromkeys(HOST_SIDE, 0)
    for w in registry.WORKLOADS:
        options = [t for ww, t in _host_side(world, True) if ww == w]
        if options:
            t = min(options, key=lambda t: (uses[t], HOST_SIDE.index(t)))
            uses[t] += 1
            pairs.append((w, t))
    missing = [w for w in registry.WORKLOADS if w not in {p[0] for p in pairs}]
    print(f"\nreal runs: {pairs}; not run here (program missing): {missing}")
    assert len(pairs) >= 10 and all(uses.values()), (pairs, uses)
    spec = lab.root / "real.toml"
    spec.write_text(_toml_doc(_doc(pairs, world["targets"], "pairs-real")))
    r = lab.iolab("run", spec, *world["destroy"], timeout=1500)
    assert r.returncode == 0, r.stderr[-3000:]
    trials = lab.report_json()["trials"]
    assert sorted(t["params"]["workload"] for t in trials) == sorted(f"{w}@{t}" for w, t in pairs)
    bad = {t["params"]["workload"]: t["error"] for t in trials if t["status"] != "ok"}
    assert bad == {}, bad
    lab.assert_nothing_left()


def test_a_refused_host_side_pair_really_cannot_run(world: dict[str, Any]) -> None:
    """Every refused host-side pair, forced past spec validation (refusal() answers None): each
    of its trials fails, so no refusal stands where a run would have gone through."""
    lab: Lab = world["lab"]
    pairs = _host_side(world, False)
    assert len(pairs) >= 8, pairs
    spec = lab.root / "forced.toml"
    spec.write_text(_toml_doc(_doc(pairs, world["targets"], "pairs-forced")))
    forced = ("import sys\nimport iolab.spec.study as s\ns.refusal = lambda needs, offer: None\n"
              f"sys.argv = ['iolab', 'run', {str(spec)!r}, '--db', {str(lab.root / 'forced.sqlite')!r}, "
              f"*{world['destroy']!r}]\n"
              "from iolab.entry import main\nmain()\n")
    r = subprocess.run([sys.executable, "-c", forced], env=lab.env, capture_output=True, text=True, timeout=1500,
                       cwd=lab.root)
    assert r.returncode == 1, (r.returncode, r.stderr[-3000:])  # 1: no trial of the run succeeded
    con = sqlite3.connect(f"file:{lab.root / 'forced.sqlite'}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT config_id, status, error FROM trials").fetchall()
    finally:
        con.close()
    assert rows and all(status == "failed" for _, status, _ in rows), rows
    assert len({c for c, _, _ in rows}) == len(pairs), (len(rows), pairs)
    print("\nforced refused pairs and what the run said:\n" + "\n".join(sorted({e[:160] for _, _, e in rows})))
    lab.assert_nothing_left()
