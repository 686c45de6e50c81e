"""The qemu_img_bench workload through `iolab run`: real qemu-img, real loop devices.

What a wrong workload would still get past, and what here stops it:
* ignoring count, or computing the rate from wall time: `requests` must be the count asked,
  the job line must carry `-c COUNT`, and iops must be requests / qemu-img's own seconds;
* benching somewhere else than the target: the job must name the target's device or a file in
  the target's directory, and the loop device's own counters must see the bytes;
* reading holes (no prefill): a qcow2 read on ext4 must make the loop device read the bytes;
* leaving its image behind: a user's directory (which iolab never removes) must be empty after;
* accepting a wrong or hostile parameter: exit 2 naming the key, nothing created.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.core.helpers import Lab, drive, needs_root, one_line, study_table

from iolab.core.errors import TrialFailed
from iolab.core.exec import ExecResult
from iolab.workloads.qemu_img_bench import (
    QemuImgBenchParams,
    QemuImgBenchWorkload,
    _check_asked,
    flags_of,
    metrics_of,
    parse,
    resolution_of,
)

needs_qemu_img = pytest.mark.skipif(shutil.which("qemu-img") is None, reason="needs qemu-img")
MiB = 1 << 20
# what qemu-img 7.2 prints for `qemu-img bench -c 300 -d 2 -s 4096 -S 4096 -o 0 -w ...`
OUTPUT = ("Sending 300 write requests, 4096 bytes each, 2 in parallel (starting at offset 0, step size 4096)\n"
          "Run completed in 0.250 seconds.\n")


def _res(stdout: str = OUTPUT, rc: int = 0, stderr: str = "") -> ExecResult:
    return ExecResult(argv=["qemu-img"], returncode=rc, stdout=stdout, stderr=stderr, wall_s=0.3, cpu_user_s=0.01,
                      cpu_sys_s=0.02)


def test_the_command_line_is_the_one_asked_for() -> None:
    p = QemuImgBenchParams(format="qcow2", rw="write", bs="4k", count=300, depth=2, flush_interval=4)
    assert QemuImgBenchWorkload(p).bench_argv("/x/img.qcow2") == [
        "qemu-img", "bench", "-f", "qcow2", "-t", "none", "-i", "threads", "-c", "300", "-d", "2", "-s", "4096",
        "-S", "4096", "-o", "0", "-w", "--flush-interval=4", "/x/img.qcow2"]
    assert QemuImgBenchParams(bs="64k", size="1M").requests == 16
    assert QemuImgBenchParams(bs="64M").requests == 1, "the default amount never rounds down to no request"


def test_rates_come_from_what_qemu_img_said() -> None:
    p = QemuImgBenchParams(rw="write", bs="4k", count=300, depth=2)
    raw = parse(_res(), 60)
    _check_asked(raw, p)
    m = metrics_of(raw, p.depth)
    assert m == {"iops": 1200.0, "bw_mib_s": 1200 * 4096 / MiB, "lat_mean_us": pytest.approx(2 / 1200 * 1e6),
                 "seconds": 0.25, "requests": 300.0, "write_bytes": 300 * 4096.0}
    with pytest.raises(TrialFailed, match="requests 300 instead of 400"):
        _check_asked(raw, QemuImgBenchParams(rw="write", bs="4k", count=400, depth=2))
    with pytest.raises(TrialFailed, match="rw write instead of read"):
        _check_asked(raw, QemuImgBenchParams(rw="read", bs="4k", count=300, depth=2))
    with pytest.raises(TrialFailed, match="exited with status 1: .*Could not open"):
        parse(_res("", 1, "qemu-img: Could not open 'x': No such file"), 60)
    with pytest.raises(TrialFailed, match="printed no result"):
        parse(_res("Sending 300 write requests\n"), 60)
    with pytest.raises(TrialFailed, match="too short to time"):
        metrics_of(parse(_res(OUTPUT.replace("0.250", "0.000")), 60), 2)
    short = parse(_res(OUTPUT.replace("0.250", "0.020")), 60)
    assert [f.split(":")[0] for f in flags_of(short, _res())] == ["short_run"]


@pytest.fixture
def user_dir() -> Iterator[Path]:
    """A directory of the user's (on disk: cache=none needs O_DIRECT), which iolab must leave as it was."""
    d = Path(tempfile.mkdtemp(prefix="iolab-test-qib-", dir="/var/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _ok_trials(doc: dict[str, Any]) -> list[dict[str, Any]]:
    assert doc["status"] == "complete", [(t["id"], t["error"]) for t in doc["trials"] if t["error"]]
    assert all(t["status"] == "ok" for t in doc["trials"])
    return doc["trials"]


def _raw(lab: Lab) -> dict[str, dict[str, Any]]:
    """What each trial's qemu-img printed, as stored beside the metrics (trial id -> raw)."""
    return {tid: json.loads(raw) for tid, raw in lab.query("SELECT trial_id, raw_json FROM trials")}


def _check_rates(t: dict[str, Any], raw: dict[str, Any]) -> None:
    """The rates are qemu-img's count over qemu-img's own time; the latency is derived from them."""
    w, m = t["params"]["_workload"], t["metrics"]
    count = w["count"]
    assert m["requests"] == count and m[f"{w['rw']}_bytes"] == count * w["bs"], (t["id"], m)
    assert (f"Sending {count} {w['rw']} requests, {w['bs']} bytes each, {w['depth']} in parallel "
            f"(starting at offset 0, step size {w['bs']})") in raw["stdout"], raw["stdout"]
    assert f"Run completed in {m['seconds']:.3f} seconds." in raw["stdout"], (m["seconds"], raw["stdout"])
    assert f" -c {count} " in t["manifest"]["job"] and f" -s {w['bs']} " in t["manifest"]["job"]
    assert m["iops"] > 0 and m["iops"] == pytest.approx(count / m["seconds"], rel=1e-9)
    assert m["bw_mib_s"] == pytest.approx(m["iops"] * w["bs"] / MiB, rel=1e-9)
    assert m["lat_mean_us"] == pytest.approx(w["depth"] / m["iops"] * 1e6, rel=1e-9)


@needs_root
@needs_qemu_img
def test_images_in_a_user_directory_are_counted_and_removed(lab: Lab, user_dir: Path) -> None:
    spec = lab.spec(study_table("qib-dir", repetitions=2, max_repetitions=2) + f"""
[target]
kind = "host"
directory = "{user_dir}"

[[workloads]]
name = "plain"
kind = "qemu_img_bench"
format = ["raw", "qcow2"]
rw = ["write", "read"]
bs = "4k"
count = 300
depth = 2

[[workloads]]
name = "tuned"
kind = "qemu_img_bench"
format = "qcow2"
rw = "write"
bs = "64k"
count = 40
cluster_size = "16k"
lazy_refcounts = true
preallocation = "metadata"
aio = "io_uring"
""")
    r = lab.iolab("run", spec, timeout=300)
    assert r.returncode == 0, r.stderr
    trials, raw = _ok_trials(lab.report_json()), _raw(lab)
    assert len(trials) == 5 * 2
    for t in trials:
        _check_rates(t, raw[t["id"]])
        w, facts = t["params"]["_workload"], t["manifest"]["workload_facts"]
        placed = t["manifest"]["target"]["directory"]  # iolab's own directory inside the user's
        assert Path(placed).parent == user_dir and f" {placed}/iolab-qemu-img-bench-" in t["manifest"]["job"], \
            "the image is in the target's directory"
        assert t["manifest"]["job"].endswith(f".{w['format']}")
        assert facts["image"] == "file" and facts["image_size"] == w["count"] * w["bs"]
        assert ("prefill" in facts) == (w["rw"] == "read"), "reads, and only reads, write the image first"
        if w["cluster_size"]:
            assert facts["create_options"] == "preallocation=metadata,cluster_size=16384,lazy_refcounts=on"
            assert "-i io_uring" in t["manifest"]["job"]
    assert list(user_dir.iterdir()) == [], "every trial removes its own image"
    lab.assert_nothing_left()


@needs_root
@needs_qemu_img
def test_raw_on_the_device_and_qcow2_reads_reach_the_disk(lab: Lab) -> None:
    """format raw on a loop device benches the device; a qcow2 read on ext4 reads data, not holes.
    One study with two targets, each workload on its own (a workload's `targets`)."""
    spec = lab.spec(study_table("qib-dev", repetitions=2, max_repetitions=2) + """
[[targets]]
name = "dev"
kind = "loop"
size = "64M"

[[targets]]
name = "fs"
kind = "loop"
size = "64M"
filesystem = "ext4"

[[workloads]]
name = "device"
kind = "qemu_img_bench"
targets = ["dev"]
format = "raw"
rw = ["write", "read"]
bs = "64k"
count = 256
depth = 4
aio = "native"

[[workloads]]
name = "qcow2-read"
kind = "qemu_img_bench"
targets = ["fs"]
format = "qcow2"
rw = "read"
bs = "64k"
count = 256
""")
    r = lab.iolab("run", spec, timeout=300)
    assert r.returncode == 0, r.stderr
    trials, raw = _ok_trials(lab.report_json()), _raw(lab)
    assert sorted((t["params"]["target"], t["params"]["workload"]) for t in trials) == \
        [("dev", "device")] * 4 + [("fs", "qcow2-read")] * 2, "each workload on its own target only"
    total = 256 * 64 * 1024
    for t in trials:
        _check_rates(t, raw[t["id"]])
        w, facts, disk = t["params"]["_workload"], t["manifest"]["workload_facts"], t["probes"]["host_disk"]
        if t["params"]["target"] == "dev":
            assert facts["image"] == "device" and facts["image_size"] == 64 * MiB
            assert " /dev/loop" in t["manifest"]["job"] and "-i native" in t["manifest"]["job"]
        side = "read" if w["rw"] == "read" else "write"
        assert disk[f"{side}_bytes"] >= total, f"{t['id']}: the loop device saw {disk[f'{side}_bytes']} of {total}"
    lab.assert_nothing_left()


def _spec(workload: str, target: str = '[target]\nkind = "loop"\nsize = "64M"\nfilesystem = "ext4"\n') -> str:
    return study_table("qib-bad") + target + '[workload]\nkind = "qemu_img_bench"\n' + workload


BAD = {
    # id: (spec text, key path the message must name, words the message must contain)
    "format": (_spec('format = "vmdk"\n'), "workload.format", ["vmdk", "qcow2"]),
    "hostile-cache": (_spec('cache = "none,file.locking=off"\n'), "workload.cache", ["writeback"]),
    "hostile-bs": (_spec('bs = "4k -o /etc/passwd"\n'), "workload.bs", []),
    "bs-not-sectors": (_spec('bs = 1000\n'), "workload.bs", ["512"]),
    "native-needs-direct": (_spec('aio = "native"\ncache = "writeback"\n'), "workload.aio", ['cache = "none"']),
    "count-and-size": (_spec('count = 10\nsize = "1M"\n'), "workload.size", ["not both"]),
    "qcow2-option-on-raw": (_spec('lazy_refcounts = true\n'), "workload.lazy_refcounts", ["qcow2"]),
    "image-size-remainder": (_spec('bs = "64k"\nimage_size = "100k"\n'), "workload.image_size", ["bs"]),
    "flush-on-read": (_spec('flush_interval = 4\n'), "workload.flush_interval", ["write"]),
    "bool-for-count": (_spec('count = true\n'), "workload.count", ["number"]),
    "qcow2-on-bare-device": (_spec('format = "qcow2"\n', '[target]\nkind = "loop"\nsize = "64M"\n'),
                             "workload", ['format = "qcow2"', "filesystem"]),
    "in-a-guest": (_spec('format = "raw"\n', '[target]\nkind = "qemu"\n'), "workload", ["runs on the host"]),
    "unknown-target-name": (study_table("qib-bad") + '[[targets]]\nname = "a"\nkind = "loop"\n'
                            '[[targets]]\nname = "b"\nkind = "loop"\nsize = "64M"\n'
                            '[workload]\nkind = "qemu_img_bench"\ntargets = ["c"]\n',
                            "workload.targets", ["'c'", "a, b"]),
}


@needs_root
def test_wrong_and_hostile_parameters_exit_2_naming_the_key(lab: Lab) -> None:
    cases = sorted(BAD)
    specs = [lab.spec(BAD[c][0], f"{c}.toml") for c in cases]
    results = drive(lab, [["run", str(s)] for s in specs])
    for case, spec, res in zip(cases, specs, results, strict=True):
        _, key, words = BAD[case]
        msg = one_line(res["stderr"])
        assert res["exit"] == 2, (case, res)
        assert f"{spec}: {key}:" in msg, (case, msg)
        for w in words:
            assert w in msg, (case, w, msg)
        assert not res["traceback"], (case, res["traceback"])
    assert lab.loops() == [] and lab.scratch_entries() == [] and lab.run_rows() == []


def test_the_millisecond_clock_error_rides_with_every_rate() -> None:
    """qemu-img prints its time rounded to 1 ms: a rate over 20 ms is known to ±0.5/19.5 of itself,
    recorded per metric so the analysis widens the intervals by it (docs/statistics.md)."""
    m = metrics_of(parse(_res(OUTPUT.replace("0.250", "0.020")), 60), 2)
    res = resolution_of(m)
    assert res["seconds"] == 0.0005
    for k in ("iops", "bw_mib_s", "lat_mean_us"):
        assert res[k] == pytest.approx(m[k] * 0.0005 / 0.0195), k
    assert resolution_of(metrics_of(parse(_res(OUTPUT.replace("0.250", "0.001")), 60), 2))["iops"] == \
        pytest.approx(metrics_of(parse(_res(OUTPUT.replace("0.250", "0.001")), 60), 2)["iops"]), \
        "a 1 ms run: the rate is known only to within itself"
