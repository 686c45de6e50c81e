"""The ycsb workload: YCSB 0.17.0's own client on iolab's RocksDB binding, for real.

* `iolab run` of workload A on a scratch loop device with ext4 (real java, real RocksDB through
  JNI): YCSB's own counts equal what was asked (load INSERT = recordcount, READ + UPDATE =
  operationcount), nothing failed, YCSB's data check found every value it read right, the
  percentiles are ordered, the metrics are the numbers YCSB printed (read back from the
  stored raw output with a pattern of the test's own), both threads ran, and the database
  was on the loop device (its write counters saw at least the records).
* The parser and the judge on captured real output (tests/workloads/data/ycsb): every value as
  printed and nothing more, and each failure YCSB exits 0 for is a failed trial.
* Hostile parameters and targets: exit 2 naming the key. No java, or no built jars: a clear
  capability message before anything runs.

Without java these tests skip and say why (setup.sh installs it, so CI runs them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.core.helpers import Lab, drive, needs_root, one_line, study_table

from iolab.core.errors import CapabilityMissing, TrialFailed
from iolab.core.exec import ExecResult
from iolab.core.paths import cache_dir
from iolab.native import ycsb_build, ycsb_guest
from iolab.workloads.ycsb import YcsbParams, YcsbWorkload, judge, phase_flags, phase_metrics, resolution

DATA = Path(__file__).resolve().parent / "data" / "ycsb"
needs_java = pytest.mark.skipif(shutil.which("java") is None,
                                reason="java not installed (apt-get install default-jdk-headless; ./setup.sh install "
                                       "installs it and builds the ycsb jars)")
LOOP_EXT4 = '[target]\nkind = "loop"\nsize = "128M"\nfilesystem = "ext4"\n'
GUEST_YCSB = '[target]\nkind = "qemu"\nguest_fs = "ext4"\nguest_apps = ["ycsb"]\nmemory = "1G"\n'


@pytest.fixture(scope="module")
def ycsb_ready() -> Iterator[ycsb_build.YcsbBuild]:
    """The built jars (./setup.sh install made them; built here if not, which needs mvn)."""
    if shutil.which("java") is None:
        pytest.skip(needs_java.kwargs["reason"])
    try:
        yield ycsb_build.installed()
        return
    except CapabilityMissing:
        pass
    if shutil.which("mvn") is None:
        pytest.skip("the ycsb jars are not built and mvn is missing (apt-get install maven, or ./setup.sh install)")
    yield ycsb_build.build()


def _workload(**keys: object) -> str:
    return "[workload]\nkind = \"ycsb\"\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())


def _named(name: str, **keys: object) -> str:
    return _workload(**keys).replace("[workload]\n", f"[[workloads]]\nname = \"{name}\"\n")


def _res(stdout: str, returncode: int = 0, stderr: str = "", timed_out: bool = False) -> ExecResult:
    return ExecResult(argv=["java"], returncode=returncode, stdout=stdout, stderr=stderr, wall_s=1.0,
                      cpu_user_s=0.5, cpu_sys_s=0.1, timed_out=timed_out)


def _printed(stdout: str) -> dict[tuple[str, str], float]:
    """The test's own reading of YCSB's export lines: (section, key) -> value."""
    return {(s, k): float(v) for s, k, v in re.findall(r"^\[([A-Z_-]+)\], (\S+), (\S+)$", stdout, re.M)}


# --- the real thing -----------------------------------------------------------------------

@needs_root
@needs_java
def test_workload_a_on_an_ext4_loop_device(lab: Lab, ycsb_ready: ycsb_build.YcsbBuild) -> None:
    """Two configurations on one loop device: RocksDB's defaults, and direct reads + sync writes."""
    lab.env["IOLAB_CACHE"] = str(cache_dir())  # where the jars are (the lab's own cache is empty)
    quick = {"core_workload": "a", "recordcount": 1000, "operationcount": 2000}
    spec = lab.spec(study_table("ycsb-a", repetitions=1, max_repetitions=1) + LOOP_EXT4 +
                    _named("plain", threads=2, dataintegrity=True, **quick) +
                    _named("device", use_direct_reads=True, sync_writes=True, block_cache="64k", **quick))
    r = lab.iolab("run", spec, timeout=600)
    assert r.returncode == 0, r.stderr
    trials = {t["params"]["workload"]: t for t in lab.report_json()["trials"]}  # the label of a named workload
    assert sorted(trials) == ["device", "plain"]
    raws = dict(lab.query("SELECT trial_id, raw_json FROM trials"))
    for name, t in trials.items():
        assert t["status"] == "ok", (name, t["error"])
        m = t["metrics"]
        assert m["load_insert_ops"] == m["load_operations"] == 1000, name
        assert m["run_read_ops"] + m["run_update_ops"] == m["run_operations"] == 2000, name
        assert min(m["run_read_ops"], m["run_update_ops"]) > 800, name  # a 50/50 mix: 9 standard deviations
        assert {k for k in m if re.fullmatch(r"run_\w+_ops", k)} == {"run_read_ops", "run_update_ops"}, name
        assert m["load_errors"] == m["run_errors"] == m["run_read_errors"] == m["run_update_errors"] == 0, name
        for op in ("load_insert", "run_read", "run_update"):
            assert 0 <= m[f"{op}_p50_us"] <= m[f"{op}_p95_us"] <= m[f"{op}_p99_us"] <= m[f"{op}_max_us"], (name, op)
            assert m[f"{op}_p95_us"] > 0 and m[f"{op}_mean_us"] > 0, (name, op)
        assert m["load_ops_s"] > 0 and m["run_ops_s"] > 0, name

        # the metrics are what YCSB printed (the stored raw output, read with the test's own pattern)
        raw = json.loads(raws[t["id"]])
        run, load = _printed(raw["run"]["stdout"]), _printed(raw["load"]["stdout"])
        assert run[("READ", "Return=OK")] + run[("UPDATE", "Return=OK")] == 2000, name
        assert load[("INSERT", "Return=OK")] == 1000, name
        assert m["run_read_p99_us"] == run[("READ", "99thPercentileLatency(us)")], name
        assert m["run_update_p95_us"] == run[("UPDATE", "95thPercentileLatency(us)")], name
        assert m["load_insert_mean_us"] == load[("INSERT", "AverageLatency(us)")], name
        assert m["run_ops_s"] == run[("OVERALL", "Throughput(ops/sec)")], name

        # the database lived on the scratch loop device's ext4, not anywhere else
        facts = t["manifest"]["workload_facts"]
        assert facts["db_dir"].startswith(f"{lab.scratch}/") and facts["db_dir"].endswith("/iolab-ycsb/db"), name
        assert t["probes"]["host_disk"]["write_bytes"] >= 1000 * 10 * 100, name
        assert "operationcount=2000\n" in t["manifest"]["job"] and "readproportion=0.5\n" in t["manifest"]["job"]
        assert {"core-0.17.0.jar", "rocksdbjni-6.29.5.jar"} <= set(facts["ycsb_build"]["jars"]), name

    plain, device = trials["plain"], trials["device"]
    raw = json.loads(raws[plain["id"]])
    run = _printed(raw["run"]["stdout"])
    assert plain["metrics"]["run_verify_errors"] == 0  # YCSB's dataintegrity check read every value back right
    assert run[("VERIFY", "Return=OK")] == run[("READ", "Return=OK")]
    assert run[("CLEANUP", "Operations")] == 2  # one DB object per client thread: both threads ran
    assert "use_direct_reads=false" in raw["run"]["stderr"] and "sync_writes=false" in raw["run"]["stderr"]
    # the options reach the device: each synced write is a flush of the loop device, and direct
    # reads miss the page cache (with a 64 KiB block cache, most reads are device reads)
    p, d = plain["probes"]["host_disk"], device["probes"]["host_disk"]
    synced = 1000 + device["metrics"]["run_update_ops"]
    assert d["flushes"] >= synced > 4 * p["flushes"], (p, d)
    assert d["reads"] >= 200 and d["reads"] > 4 * p["reads"], (p, d)
    lab.assert_nothing_left()


@needs_root
@needs_java
@pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="QEMU not installed")
def test_insert_only_64k_records_in_the_built_in_guest(lab: Lab, ycsb_ready: ycsb_build.YcsbBuild) -> None:
    """sync-amplification's YCSB configuration (R3: insert-only, 64 KB records), small, in the
    built-in guest (guest_apps = ["ycsb"]: the jlinked runtime, the jars, RocksDB's library):
    YCSB's counts are what was asked, it ran in the guest from the bundle, and its synced
    writes reached the guest disk (each WAL sync a flush of the image's host device)."""
    lab.env["IOLAB_CACHE"] = str(cache_dir())  # the jars and the guest bundle (set-up built them)
    try:
        ycsb_guest.installed()
    except CapabilityMissing:
        ycsb_guest.build()
    n = 40
    spec = lab.spec(study_table("ycsb-guest", repetitions=1, max_repetitions=1) + GUEST_YCSB + _workload(
        readproportion=0, updateproportion=0, insertproportion=1, fieldcount=1, fieldlength="64k", recordcount=n,
        operationcount=n, heap="256M", sync_writes=True))
    r = lab.iolab("run", spec, timeout=900)
    assert r.returncode == 0, r.stderr
    (t,) = lab.report_json()["trials"]
    assert t["status"] == "ok", t["error"]
    m = t["metrics"]
    assert m["load_insert_ops"] == m["load_operations"] == n and m["run_insert_ops"] == m["run_operations"] == n
    assert {k for k in m if re.fullmatch(r"run_\w+_ops", k)} == {"run_insert_ops"}  # insert-only, as asked
    assert m["load_errors"] == m["run_errors"] == 0 and m["run_ops_s"] > 0
    facts = t["manifest"]["workload_facts"]
    assert facts["where"] == "guest" and facts["db_dir"] == "/mnt/iolab/iolab-ycsb/db"
    assert "jlink" in facts["java"] and facts["guest_bundle"]["rocksdb_library"].startswith("librocksdbjni-")
    assert "/opt/iolab/ycsb/jre/bin/java" in t["manifest"]["job"] and "fieldlength=65536\n" in t["manifest"]["job"]
    # 2n synced 64 KiB records: each WAL fsync in the guest is a flush of the image's host device
    disk = t["probes"]["host_disk"]
    assert disk["write_bytes"] >= 2 * n * 65536 and disk["flushes"] >= 2 * n, disk
    if t["manifest"]["target"]["accel"] == "tcg":
        assert any(f.startswith("tcg_emulation") for f in t["flags"])
    lab.assert_nothing_left()


@needs_java
def test_binding_semantics_through_ycsbs_command_line(ycsb_ready: ycsb_build.YcsbBuild, tmp_path: Path) -> None:
    """YCSB's own shell (site.ycsb.CommandLine) on the binding: what each call returns, that an
    update merges fields, that the data outlives the JVM, and the record bytes on disk."""
    db = tmp_path / "db"

    def session(commands: str) -> str:
        argv = [ycsb_build.java(), "-XX:-UsePerfData", f"-Djava.io.tmpdir={tmp_path}", "-cp",
                ycsb_ready.classpath_arg, "site.ycsb.CommandLine", "-db", ycsb_build.DB_CLASS,
                "-p", f"iolab.rocksdb.dir={db}"]
        out = subprocess.run(argv, input=commands + "quit\n", capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and "Connected." in out.stdout, out.stdout + out.stderr
        return out.stdout.split("Connected.", 1)[1]

    first = session("insert k1 b=2 a=1\ninsert k2 a=3\nread k1\nread k1 b\nupdate k1 b=20 c=30\nread k1\n"
                    "update nokey a=1\nread nokey\nscan k1 2\nscan k0 1 a\ndelete k3\n")
    replies = [re.sub(r"\n\d+ ms$", "", r.strip()) for r in first.split("> ") if r.strip()]
    assert replies == [
        "Result: OK", "Result: OK",
        "Return code: OK\na=1\nb=2", "Return code: OK\nb=2",
        "Result: OK", "Return code: OK\na=1\nb=20\nc=30",  # an update keeps the fields it does not name
        "Result: NOT_FOUND", "Return code: NOT_FOUND",
        "Result: OK\n" + "-" * 32 + "\nRecord 0\na=1\nb=20\nc=30\n" + "-" * 32 + "\nRecord 1\na=3\n" + "-" * 32,
        "Result: OK\n" + "-" * 32 + "\nRecord 0\na=1\n" + "-" * 32,  # a scan starts at the first key >= k0
        "Return result: OK",  # deleting an absent key is not an error in RocksDB
    ], first
    second = session("read k2\ndelete k2\nread k2\n")  # a new JVM: the data was persisted
    assert "Return code: OK\na=3" in second and second.count("Return code: NOT_FOUND") == 1, second
    if shutil.which("ldb") is None:
        pytest.skip("ldb (Debian's rocksdb-tools) not installed: the on-disk bytes were not checked")
    dump = subprocess.run(["ldb", f"--db={db}", "scan", "--hex"], capture_output=True, text=True, timeout=60)
    def field(name: str, value: str) -> str:
        return f"{len(name):08X}{name.encode().hex().upper()}{len(value):08X}{value.encode().hex().upper()}"
    assert dump.stdout.split() == ["0x6B31", ":", "0x" + field("a", "1") + field("b", "20") + field("c", "30")], \
        dump.stdout + dump.stderr  # k1 alone; its fields sorted by name, each length-prefixed, big-endian


@needs_java
def test_a_load_longer_than_the_runs_seconds_loads_every_record(ycsb_ready: ycsb_build.YcsbBuild,
                                                                 tmp_path: Path) -> None:
    """maxexecutiontime bounds the run phase, never the load: YCSB's client applies it to any phase
    that reads it, and the tenant's 100 000-record load was cut at 80 019 on a busy machine when
    it outlasted the trial's 6 s. Here a 1 s run over the tenant's 100 000 records (the load
    alone takes ~2 s quiet, the JVM's start outside YCSB's clock) must load them all."""
    n = 100_000
    wl = YcsbWorkload(YcsbParams(core_workload="a", recordcount=n, maxexecutiontime="1s"))
    (tmp_path / "workload.properties").write_text(wl.properties(str(tmp_path / "db")))
    argv = wl.argv(ycsb_ready.command(), "load")
    out = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    loaded = _printed(out.stdout)
    assert loaded[("INSERT", "Return=OK")] == n, (loaded, out.stderr[-2000:])
    assert loaded[("OVERALL", "RunTime(ms)")] > 1000, "the load must outlast the run's 1 s to show anything"
    judge("load", _res(out.stdout), n)  # what the trial applies to it
    assert "maxexecutiontime=1\n" in wl.properties("db")  # the run phase keeps its bound
    assert "maxexecutiontime=0" not in wl.argv(ycsb_ready.command(), "run")


@needs_java
def test_binding_compiles_warning_free(ycsb_ready: ycsb_build.YcsbBuild, tmp_path: Path) -> None:
    source = Path(ycsb_build.__file__).parent / "ycsb" / "IolabRocksDbClient.java"  # the package's own copy
    jars = [p for p in ycsb_ready.classpath if "/lib/" in p]
    ycsb_build.compile_binding(source, jars, tmp_path / "classes", ycsb_build.STRICT_JAVAC_FLAGS)
    assert (tmp_path / "classes" / "iolab" / "ycsb" / "IolabRocksDbClient.class").is_file()


@needs_java
def test_a_finished_build_is_reused_and_an_incomplete_one_named(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOLAB_CACHE", str(tmp_path))
    d = ycsb_build.build_dir()
    assert d.parent == tmp_path / "ycsb" and d.name == f"build-{ycsb_build.digest()}"
    (d / "lib").mkdir(parents=True)
    jars = [d / "iolab-ycsb.jar", d / "lib" / "core-0.17.0.jar"]
    for j in jars:
        j.write_bytes(b"")
    (d / "classpath").write_text("\n".join(map(str, jars)))
    (d / "build.json").write_text('{"digest": "x"}')

    def no_build(tmp: Path) -> None:
        raise AssertionError("a finished build must not be built again")

    monkeypatch.setattr(ycsb_build, "_build_into", no_build)
    assert ycsb_build.build().classpath == tuple(map(str, jars))
    jars[1].unlink()
    with pytest.raises(CapabilityMissing, match="incomplete.*core-0.17.0.jar missing"):
        ycsb_build.installed()
    monkeypatch.setattr(ycsb_build, "_source", lambda name: b"changed " + name.encode())
    assert ycsb_build.build_dir() != d  # another source, another build


# --- parser and judge on captured output ---------------------------------------------------

def test_parser_gives_exactly_what_ycsb_printed() -> None:
    run = judge("run", _res((DATA / "workloada-run.txt").read_text()), 2000)
    assert phase_metrics("run", run) == {
        "run_ops_s": 2538.0710659898477, "run_runtime_s": 0.788, "run_operations": 2000.0, "run_errors": 0.0,
        "run_gc_percent": 0.0, "run_verify_errors": 0.0,
        "run_read_ops": 987.0, "run_read_errors": 0.0, "run_read_mean_us": 61.4113475177305,
        "run_read_max_us": 26079.0, "run_read_p50_us": 7.0, "run_read_p95_us": 64.0, "run_read_p99_us": 732.0,
        "run_update_ops": 1013.0, "run_update_errors": 0.0, "run_update_mean_us": 146.27640671273446,
        "run_update_max_us": 11959.0, "run_update_p50_us": 28.0, "run_update_p95_us": 326.0,
        "run_update_p99_us": 2231.0,
    }
    # YCSB's RunTime is whole ms: the 788 ms run's rate is known to 1/788 of itself
    assert resolution(phase_metrics("run", run)) == {"run_runtime_s": 0.001,
                                                     "run_ops_s": pytest.approx(2538.0710659898477 / 788)}
    load_text = (DATA / "workloada-load.txt").read_text()
    load = phase_metrics("load", judge("load", _res(load_text), 1000))
    printed = _printed(load_text)
    assert load["load_operations"] == load["load_insert_ops"] == 1000 and load["load_errors"] == 0
    assert load["load_insert_p99_us"] == printed[("INSERT", "99thPercentileLatency(us)")]
    assert load["load_ops_s"] == printed[("OVERALL", "Throughput(ops/sec)")]
    assert not [k for k in load if "cleanup" in k or "verify" in k]  # CLEANUP is not an operation
    assert phase_flags("run", run, _res("")) == []


def test_failed_operations_are_counted_and_flagged_without_latencies() -> None:
    text = (DATA / "empty-db-run.txt").read_text()
    parsed = judge("run", _res(text), 50)  # every operation ran (and failed): the run counts
    m = phase_metrics("run", parsed)
    assert (m["run_operations"], m["run_errors"]) == (50, 50)
    assert (m["run_read_ops"], m["run_read_errors"], m["run_update_ops"], m["run_update_errors"]) == (22, 22, 28, 28)
    assert not [k for k in m if k.endswith("_us")]  # YCSB printed NaN and a max-long minimum for them
    [flag] = phase_flags("run", parsed, _res(text))
    assert flag.startswith("ycsb_failed_operations: 50 of 50 run-phase operations failed")
    assert "READ NOT_FOUND 22" in flag and "UPDATE NOT_FOUND 28" in flag


def test_what_ycsb_exits_0_for_fails_the_trial() -> None:
    run = (DATA / "workloada-run.txt").read_text()
    load = (DATA / "workloada-load.txt").read_text()
    cases = [
        ("run", _res((DATA / "db-did-not-open.txt").read_text()), 50,
         "DBException: cannot open RocksDB at /proc/nonexistent/x"),
        ("run", _res(run), 2001, "did 2000 operations, 2001 were asked for"),
        ("run", _res(re.sub(r"^\[UPDATE\].*\n", "", run, flags=re.M)), 2000,
         "throughput says 2000 operations, its per-operation counts 987"),
        ("run", _res(run.replace("[VERIFY], Return=OK, 987", "[VERIFY], Return=OK, 980\n"
                                 "[VERIFY], Return=UNEXPECTED_STATE, 7")), 2000,
         r"data integrity check found wrong data \(UNEXPECTED_STATE 7\)"),
        ("load", _res(load.replace("[INSERT], Return=OK, 1000", "[INSERT], Return=OK, 990\n"
                                   "[INSERT], Return=ERROR, 10")), 1000, r"inserts failed \(ERROR 10\)"),
        ("run", _res(run.split("[OVERALL]")[0]), 2000, r"printed no \[OVERALL\] result"),
        ("run", _res(run, stderr='Exception in thread "Thread-3" java.lang.OutOfMemoryError: Java heap space'),
         2000, "java.lang.OutOfMemoryError: Java heap space"),
        ("run", _res(run, returncode=1), 2000, "exited 1"),
        ("run", _res("", timed_out=True), 2000, "timed out"),
    ]
    for phase, res, expected, message in cases:
        with pytest.raises(TrialFailed, match=message):
            judge(phase, res, expected)
    judge("run", _res(run), None)  # time-bound: any positive count is right


def test_standard_workloads_and_overrides_render_ycsbs_properties() -> None:
    def props(**keys: object) -> dict[str, str]:
        text = _bare(YcsbParams(**keys)).properties("/db")
        return dict(line.split("=", 1) for line in text.splitlines())

    e = props(core_workload="E")
    assert (e["scanproportion"], e["insertproportion"], e["readproportion"], e["maxscanlength"]) == \
        ("0.95", "0.05", "0", "100")
    assert props(core_workload="d")["requestdistribution"] == "latest"
    write = props(core_workload="a", readproportion=0, updateproportion=1, recordcount=5000)  # R4's write variant
    assert (write["readproportion"], write["updateproportion"], write["recordcount"]) == ("0", "1", "5000")
    r3 = props(fieldcount=1, fieldlength="64k")
    assert (r3["fieldcount"], r3["fieldlength"]) == ("1", "65536")
    bounded = props(maxexecutiontime="30s")
    assert (bounded["maxexecutiontime"], bounded["operationcount"]) == ("30", str(2**31 - 1))
    assert props()["operationcount"] == "1000" and props()["measurementtype"] == "hdrhistogram"
    fixed = YcsbWorkload.metric_set({"kind": "ycsb", "operationcount": 10}).get("run_ops_s")
    timed = YcsbWorkload.metric_set({"kind": "ycsb", "maxexecutiontime": 10}).get("run_ops_s")
    assert fixed is not None and timed is not None
    assert (fixed.aggregate, timed.aggregate) == ("harmonic", "mean")  # fixed work vs fixed time


def _bare(params: YcsbParams) -> YcsbWorkload:
    """A workload object without the capability check of __init__ (rendering needs no java)."""
    w = object.__new__(YcsbWorkload)
    w.params = params
    return w


# --- hostile input and missing capabilities --------------------------------------------------

HOSTILE: list[tuple[str, str, list[str]]] = [
    (LOOP_EXT4, _workload(recordcount=-1), ["workload.recordcount", "greater than or equal to 1"]),
    (LOOP_EXT4, _workload(core_workload="g"), ["workload.core_workload", "'a'"]),
    (LOOP_EXT4, _workload(fieldlength="64q"), ["workload.fieldlength", "64q"]),
    (LOOP_EXT4, _workload(readproportion=1.5), ["workload.readproportion"]),
    (LOOP_EXT4, _workload(updateproportion=1), ["sum to 1.5", "readproportion 0.5 (core workload a)",
                                                "updateproportion 1"]),
    (LOOP_EXT4, _workload(operationcount=10, maxexecutiontime="5s"), ["operationcount", "maxexecutiontime",
                                                                      "not both"]),
    (LOOP_EXT4, _workload(operationcnt=5), ["workload.operationcnt", "unknown key"]),
    (LOOP_EXT4, _workload(threads=0), ["workload.threads"]),
    (LOOP_EXT4, _workload(compression="gzip"), ["workload.compression", "gzip"]),
    (LOOP_EXT4, _workload(maxexecutiontime="1.5s"), ["workload.maxexecutiontime", "whole seconds"]),
    (LOOP_EXT4, _workload(heap="64M", fieldcount=1, fieldlength="16M", threads=8), ["heap", "too small"]),
    ('[target]\nkind = "loop"\nsize = "128M"\n', _workload(), ["workload", "filesystem = \"ext4\"",
                                                              "filesystem = 'none'"]),
    ('[target]\nkind = "qemu"\n', _workload(), ["workload", "guest_apps = [\"ycsb\"]", "guest_fs = 'none'"]),
    (GUEST_YCSB.replace('memory = "1G"\n', ""), _workload(),  # the default 1G heap in the default 512M guest
     ["workload", "1792 MiB of memory (a 1g JVM heap", "gives it 512 MiB", "memory = \"1792M\""]),
    (GUEST_YCSB.replace('"ycsb"]', '"jvm"]'), _workload(heap="256M"), ["target.guest_apps", "jvm"]),
    (GUEST_YCSB + 'kernel = "/boot/k"\ninitramfs = "/boot/i"\n', _workload(heap="256M"),
     ["target", "a guest of your own (initramfs) must bring them itself"]),
    (LOOP_EXT4, _workload(recordcount=200_000, fieldlength="1k"), ["workload", "of space (recordcount x fieldcount",
                                                                   "size = 128m", "load fewer records"]),
]


def test_hostile_parameters_exit_2_naming_the_key(lab: Lab) -> None:
    specs = [lab.spec(study_table("hostile") + target + workload, f"h{i}.toml")
             for i, (target, workload, _) in enumerate(HOSTILE)]
    results = drive(lab, [["run", str(s)] for s in specs])
    for spec, (_, workload, words), res in zip(specs, HOSTILE, results, strict=True):
        text = one_line(res["stderr"] + res["stdout"])
        assert res["exit"] == 2 and not res["traceback"] and not res["hang"], (workload, text)
        for w in [spec.name, *words]:
            assert w in text, (w, workload, text)
    assert lab.scratch_entries() == [] and not lab.db.exists()


def test_without_java_or_jars_the_run_says_what_to_install(lab: Lab, tmp_path: Path) -> None:
    spec = lab.spec(study_table("no-java") + '[target]\nkind = "host"\n' + _workload())
    lab.env["PATH"] = str(tmp_path)  # no java on it (nor anything else: the check comes first)
    r = lab.iolab("run", spec, "--dry-run")
    assert r.returncode == 1, r.stderr
    assert "java not found" in one_line(r.stderr) and "default-jdk-headless" in one_line(r.stderr)

    if shutil.which("java") is None:
        pytest.skip("java not installed: the missing-jars message comes only once java is there")
    lab.env["PATH"] = os.environ["PATH"]  # java again, but the lab's own cache holds no build
    r = lab.iolab("run", spec)
    text = one_line(r.stderr)
    assert r.returncode == 1 and "jars are not built" in text and "./setup.sh install" in text, text
    assert lab.scratch_entries() == []
