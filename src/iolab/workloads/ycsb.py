"""YCSB's core workloads on RocksDB: R4 ran workload A on RocksDB beside its groups, R3 used 64 KB records.

The real YCSB 0.17.0 client (`site.ycsb.Client`: CoreWorkload, its key choosers, HdrHistogram
latencies) drives iolab's own RocksDB binding (native/ycsb/IolabRocksDbClient.java, built once
at set-up by native/ycsb_build.py) in a directory on the target's filesystem. A trial is a load
phase (`-load`: recordcount inserts into an empty database) then a run phase (`-t`:
operationcount operations, or maxexecutiontime seconds), one JVM each; both are reported. Each
trial starts from an empty database (db_bench's tenant keeps one per target, workloads/db_bench.py,
and lives with its 10 % writes changing it a little): YCSB's run phase updates and inserts,
so a second trial on the same database would measure a different database.

YCSB exits 0 even when the database did not open or a client thread died, so a trial is judged
from what YCSB printed: a Java exception, a load that did not insert every record or failed one,
a run that did not do the operations asked for, or wrong data found by YCSB's own check
(`dataintegrity`) fail it. Failed operations of the run phase are counted (`run_errors`) and
flagged. On the host (`host`, or `loop`/`cgroups` with filesystem = "ext4") from the host
build, or in the built-in guest (`qemu` with guest_fs = "ext4" and guest_apps = ["ycsb"])
from its jlinked bundle (native/ycsb_guest.py); the database directory is made and removed
through the executor, so the same marker guard holds in both. docs/ycsb.md has the
parameters, metrics and the build.

Size: the parameters (over YCSB's standard workloads), the two-phase run and the judging of
YCSB's text are one contract (what was asked is what YCSB must report having done) and are
read together; the second YCSB-based workload (workloads/ycsb_tenant.py, a tenant beside
fio groups) uses this module's parser and judge, so they stay here, in one place.
"""

from __future__ import annotations

import math
import re
import shlex
import time
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from iolab.core.errors import TrialFailed
from iolab.core.exec import ExecRequest, ExecResult, Executor
from iolab.core.metrics import Metric, MetricSet
from iolab.core.units import format_size, parse_duration, parse_size
from iolab.native import ycsb_build, ycsb_guest
from iolab.targets.base import Needs, Placement
from iolab.workloads.base import Workload, WorkloadParams, WorkloadResult

PROPORTIONS = ("readproportion", "updateproportion", "insertproportion", "scanproportion",
               "readmodifywriteproportion")
# YCSB 0.17.0's workloads/workload[a-f]: every value those files set besides the counts
# (each also sets readallfields=true, which iolab always sets).
STANDARD: dict[str, dict[str, Any]] = {
    "a": {"readproportion": 0.5, "updateproportion": 0.5, "requestdistribution": "zipfian"},
    "b": {"readproportion": 0.95, "updateproportion": 0.05, "requestdistribution": "zipfian"},
    "c": {"readproportion": 1.0, "requestdistribution": "zipfian"},
    "d": {"readproportion": 0.95, "insertproportion": 0.05, "requestdistribution": "latest"},
    "e": {"scanproportion": 0.95, "insertproportion": 0.05, "requestdistribution": "zipfian",
          "maxscanlength": 100},
    "f": {"readproportion": 0.5, "readmodifywriteproportion": 0.5, "requestdistribution": "zipfian"},
}
DEFAULT_MAXSCANLENGTH = 1000  # CoreWorkload's default
INT_MAX = 2**31 - 1  # YCSB parses counts as Java ints
# YCSB's measurement names -> iolab's; a READ-MODIFY-WRITE also counts one READ and one UPDATE
OPS: dict[str, str] = {"READ": "read", "UPDATE": "update", "INSERT": "insert", "SCAN": "scan",
                       "READ-MODIFY-WRITE": "read_modify_write", "DELETE": "delete"}
PERCENTILES = (50, 95, 99)
DB_DIR = "iolab-ycsb"  # inside the target's directory
MARKER = "IOLAB-YCSB"  # written first into DB_DIR: only a directory holding it is ever removed
GC_FLAG_PERCENT = 5.0
NEEDS_FS = "ycsb needs a directory on a filesystem to keep its database in; this target offers none"
GUEST_APP = "ycsb"  # the application a guest must carry (TargetOffer.apps) for YCSB to run in it
GUEST_NEEDS = "ycsb in a guest needs YCSB in it (the guest has no Java runtime otherwise); this guest does not carry it"

_LINE = re.compile(r"^\[([^\]]+)\], ([^,]+), (\S+)\s*$", re.M)
_EXCEPTION = re.compile(r"^(?:Exception in thread \"[^\"]*\" )?((?:[A-Za-z_$][\w$]*\.)+[\w$]*(?:Exception|Error)\b.*)$",
                        re.M)

_PHASE = "{phase:load|run}"
_OP = "{op:" + "|".join(OPS.values()) + "}"
METRICS: tuple[Metric, ...] = (
    Metric("load_ops_s", "ops/s", "higher", "load phase: records inserted per second (YCSB's [OVERALL] Throughput)",
           "harmonic"),
    Metric("run_ops_s", "ops/s", "higher", "run phase: operations per second (YCSB's [OVERALL] Throughput)"),
    Metric(f"{_PHASE}_runtime_s", "s", "neither", "the phase's duration as YCSB timed it (JVM start not included)"),
    Metric(f"{_PHASE}_operations", "operations", "neither",
           "operations the phase did, failed ones included (a read-modify-write counts once)"),
    Metric(f"{_PHASE}_errors", "operations", "lower", "operations of the phase whose status was not OK"),
    Metric(f"{_PHASE}_gc_percent", "%", "lower", "share of the phase the JVM spent in garbage collection"),
    Metric(f"{_PHASE}_verify_errors", "operations", "lower",
           "reads whose data YCSB's dataintegrity check found wrong or missing"),
    Metric(f"{_PHASE}_{_OP}_ops", "operations", "neither", "operations of one type, failed ones included"),
    Metric(f"{_PHASE}_{_OP}_errors", "operations", "lower", "operations of one type whose status was not OK"),
    Metric(f"{_PHASE}_{_OP}_mean_us", "µs", "lower", "mean latency of the successful operations of one type"),
    Metric(f"{_PHASE}_{_OP}_p50_us", "µs", "lower", "median latency of one operation type (HdrHistogram)"),
    Metric(f"{_PHASE}_{_OP}_p95_us", "µs", "lower", "95th-percentile latency of one operation type (HdrHistogram)"),
    Metric(f"{_PHASE}_{_OP}_p99_us", "µs", "lower", "99th-percentile latency of one operation type (HdrHistogram)"),
    Metric(f"{_PHASE}_{_OP}_max_us", "µs", "lower", "slowest successful operation of one type"),
)


class YcsbParams(WorkloadParams):
    """One of YCSB's core workloads (a-f), whose values any key below may override; the five
    proportions of the result must sum to 1 (YCSB would silently rescale them)."""

    kind: Literal["ycsb"] = "ycsb"
    # not `workload`: a spec's named [[workloads]] already label their configurations so
    core_workload: Literal["a", "b", "c", "d", "e", "f"] = Field("a", description="YCSB's workloads/workload<x>")
    readproportion: float | None = Field(None, ge=0, le=1)
    updateproportion: float | None = Field(None, ge=0, le=1)
    insertproportion: float | None = Field(None, ge=0, le=1)
    scanproportion: float | None = Field(None, ge=0, le=1)
    readmodifywriteproportion: float | None = Field(None, ge=0, le=1)
    requestdistribution: Literal["uniform", "zipfian", "latest", "hotspot", "sequential", "exponential"] | None = None
    maxscanlength: int | None = Field(None, ge=1, le=100_000)
    recordcount: int = Field(1000, ge=1, le=INT_MAX, description="records the load phase inserts")
    operationcount: int | None = Field(None, ge=1, le=INT_MAX, description="run phase operations (default 1000)")
    maxexecutiontime: int | None = Field(None, ge=1, le=7 * 86400, description="run phase seconds instead")
    fieldcount: int = Field(10, ge=1, le=1000)
    fieldlength: int = Field(100, description="bytes per field, or '64k' (R3: 64 KB records)")
    threads: int = Field(1, ge=1, le=256)
    dataintegrity: bool = Field(False, description="YCSB checks every value it reads (costs CPU)")
    use_direct_reads: bool = False
    block_cache: int = Field(8 << 20, description="RocksDB's LRU block cache, bytes or '8M'")
    sync_writes: bool = Field(False, description="every write waits for the WAL's fsync")
    compression: Literal["none", "snappy", "lz4", "zstd"] = "none"
    heap: int = Field(1 << 30, description="the JVM's fixed heap (-Xms = -Xmx), bytes or '1G'")

    @field_validator("core_workload", mode="before")
    @classmethod
    def _letter(cls, v: Any) -> Any:
        return v.lower() if isinstance(v, str) and len(v) == 1 else v

    @field_validator("fieldlength", "block_cache", "heap", mode="before")
    @classmethod
    def _size(cls, v: Any, info: Any) -> int:
        return parse_size(v, allow_zero=info.field_name == "block_cache")

    @field_validator("maxexecutiontime", mode="before")
    @classmethod
    def _seconds(cls, v: Any) -> Any:
        if v is None or isinstance(v, int) and not isinstance(v, bool):
            return v
        secs = parse_duration(v)
        if secs != int(secs):
            raise ValueError(f"must be whole seconds, got {v!r}")
        return int(secs)

    @model_validator(mode="after")
    def _consistent(self) -> YcsbParams:
        if self.operationcount is not None and self.maxexecutiontime is not None:
            raise ValueError("give operationcount or maxexecutiontime, not both (YCSB stops at whichever comes "
                             "first, so neither would be what ran)")
        mix = self.mix()
        total = sum(mix.values())
        if not math.isclose(total, 1.0, abs_tol=1e-9):
            std = f" (core workload {self.core_workload})"
            shown = ", ".join(f"{k} {v:g}" + ("" if getattr(self, k) is not None else std) for k, v in mix.items() if v)
            raise ValueError(f"the operation proportions must sum to 1, these sum to {total:g}: {shown or 'all 0'}")
        if self.fieldlength > (16 << 20):
            raise ValueError(f"fieldlength must be at most 16M, got {format_size(self.fieldlength)}")
        if self.heap < (64 << 20) or self.heap > (64 << 30):
            raise ValueError(f"heap must be between 64M and 64G, got {format_size(self.heap)}")
        if self.block_cache > (64 << 30):
            raise ValueError(f"block_cache must be at most 64G, got {format_size(self.block_cache)}")
        scan = self.scan_length() if mix["scanproportion"] else 1
        need = 8 * self.threads * self.record_bytes() * scan
        if need > self.heap:
            raise ValueError(f"heap {format_size(self.heap)} is too small for {self.threads} thread(s) of "
                             f"{format_size(self.record_bytes())} records" + (f" in scans of up to {scan}" if scan > 1
                                                                                else "")
                             + f": give heap = \"{math.ceil(need / (1 << 20))}M\" or more")
        return self

    def mix(self) -> dict[str, float]:
        """The five proportions as they will run: the standard workload's, overridden by the keys given."""
        std = STANDARD[self.core_workload]
        return {k: float(getattr(self, k) if getattr(self, k) is not None else std.get(k, 0.0)) for k in PROPORTIONS}

    def distribution(self) -> str:
        return self.requestdistribution or str(STANDARD[self.core_workload]["requestdistribution"])

    def scan_length(self) -> int:
        return self.maxscanlength or int(STANDARD[self.core_workload].get("maxscanlength", DEFAULT_MAXSCANLENGTH))

    def record_bytes(self) -> int:
        return self.fieldcount * self.fieldlength


class YcsbWorkload(Workload):
    kind: ClassVar[str] = "ycsb"
    Params: ClassVar[type[WorkloadParams]] = YcsbParams
    main_metric = "run_ops_s"
    metrics: ClassVar[tuple[Metric, ...]] = METRICS
    params: YcsbParams

    def __init__(self, params: WorkloadParams):
        super().__init__(params)
        # the runner builds every workload before it creates anything: a machine without java
        # or without the built jars is told so then (also by --dry-run), not once per trial
        ycsb_build.installed()

    @classmethod
    def metric_set(cls, workload: dict[str, Any]) -> MetricSet:
        """A run phase of operationcount operations is fixed work: its rate averages harmonically."""
        base = super().metric_set(workload)
        return base if workload.get("maxexecutiontime") else base.with_aggregate(["run_ops_s"], "harmonic")

    @classmethod
    def needs(cls, workload: dict[str, Any]) -> Needs:
        """A directory for RocksDB with room for the records, YCSB where it runs, and memory for
        the JVM's heap beside the rest where the target decides the memory (a guest)."""
        p = YcsbParams(**workload)
        data = p.recordcount * p.record_bytes()
        return Needs(storage=frozenset({"directory"}), capacity=data, memory=p.heap + ycsb_guest.GUEST_OVERHEAD,
                     apps=frozenset({GUEST_APP}),
                     why={"storage": "RocksDB keeps its database in a directory",
                          "capacity": f"recordcount x fieldcount x fieldlength = {format_size(data)} of records, and "
                                      "RocksDB needs about twice the data; load fewer records",
                          "memory": f"a {format_size(p.heap)} JVM heap beside "
                                    f"{format_size(ycsb_guest.GUEST_OVERHEAD)} for the initramfs with Java in it, "
                                    "RocksDB's memtables and cache; or give the workload a smaller heap",
                          f"app:{GUEST_APP}": "YCSB's Java client and RocksDB; a guest has no Java runtime otherwise"})

    def estimate_seconds(self) -> float:
        p = self.params
        per_byte = 1 / 50e6  # a pessimistic 50 MB/s through the JVM, RocksDB and a busy disk
        load = p.recordcount * (1 / 5000 + p.record_bytes() * per_byte)
        run = p.maxexecutiontime or (p.operationcount or 1000) * (1 / 2000 + p.record_bytes() * per_byte) / \
            min(p.threads, 2)
        return 6 + load + run  # + two JVM starts

    def properties(self, db: str) -> str:
        """The one properties file both phases read (the manifest keeps it: rerunnable by hand)."""
        p = self.params
        props: dict[str, Any] = {
            "workload": "site.ycsb.workloads.CoreWorkload", "table": "usertable",
            "recordcount": p.recordcount, "operationcount": p.operationcount or 1000,
            "fieldcount": p.fieldcount, "fieldlength": p.fieldlength, "fieldlengthdistribution": "constant",
            "readallfields": "true", **p.mix(), "requestdistribution": p.distribution(),
            "maxscanlength": p.scan_length(), "scanlengthdistribution": "uniform",
            "threadcount": p.threads, "dataintegrity": str(p.dataintegrity).lower(),
            "measurementtype": "hdrhistogram", "hdrhistogram.percentiles": ",".join(map(str, PERCENTILES)),
            "iolab.rocksdb.dir": db, "iolab.rocksdb.use_direct_reads": str(p.use_direct_reads).lower(),
            "iolab.rocksdb.block_cache_bytes": p.block_cache, "iolab.rocksdb.sync_writes": str(p.sync_writes).lower(),
            "iolab.rocksdb.compression": p.compression,
        }
        if p.maxexecutiontime:  # operationcount 0 would make YCSB start no thread at all: a cap it never reaches
            props.update(operationcount=INT_MAX, maxexecutiontime=p.maxexecutiontime)
        return "".join(f"{k}={v:g}\n" if isinstance(v, float) else f"{k}={v}\n" for k, v in props.items())

    def argv(self, cmd: ycsb_build.JavaCommand, phase: str) -> list[str]:
        heap = f"{self.params.heap >> 20}m"
        # maxexecutiontime bounds the run phase; YCSB's client applies it to whichever phase reads it,
        # so the load (every record, checked by judge) lifts it on its command line (-p wins over -P):
        # a load slower than the run's seconds on a busy machine was cut short (80 019 of 100 000)
        unbounded = ["-p", "maxexecutiontime=0"] if phase == "load" and self.params.maxexecutiontime else []
        # no perf-data file in /tmp; RocksDB's native library unpacks into the work dir, removed with it
        return [cmd.java, "-XX:-UsePerfData", f"-Xms{heap}", f"-Xmx{heap}", "-Djava.io.tmpdir=.", *cmd.flags,
                "-cp", cmd.classpath, ycsb_build.CLIENT_CLASS, "-load" if phase == "load" else "-t",
                "-db", ycsb_build.DB_CLASS, "-P", "workload.properties", *unbounded]

    def command(self, placement: Placement) -> ycsb_build.JavaCommand:
        """YCSB where the trial runs: the host build, or the guest's bundle (guest_apps = ["ycsb"])."""
        if placement.executor.name == "host":
            return ycsb_build.installed().command()  # CapabilityMissing without java or the built jars
        if GUEST_APP not in placement.extras.get("guest_apps", {}):
            raise TrialFailed(GUEST_NEEDS)
        return ycsb_guest.installed().command()

    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        if not placement.directory:
            raise TrialFailed(NEEDS_FS)
        cmd = self.command(placement)
        deadline = time.monotonic() + timeout_s
        home = fresh_dir(placement.executor, placement.directory, timeout_s)
        text = self.properties(f"{home}/db")
        phases: dict[str, tuple[ExecResult, dict[str, Any]]] = {}
        try:
            for phase in ("load", "run"):
                argv = self.argv(cmd, phase)
                res = placement.executor.run(ExecRequest(argv=argv, timeout_s=max(deadline - time.monotonic(), 1),
                                                         files={"workload.properties": text}))
                phases[phase] = (res, judge(phase, res, self.expected(phase)))
        except BaseException:
            remove_own(placement.executor, home, strict=False)  # ours; the trial's own error is the news
            raise
        remove_own(placement.executor, home)
        metrics: dict[str, float] = {}
        flags: list[str] = []
        for phase, (res, parsed) in phases.items():
            metrics.update(phase_metrics(phase, parsed))
            flags += phase_flags(phase, parsed, res)
        job = text + "".join(f"# {ph}: {shlex.join(self.argv(cmd, ph))}\n" for ph in phases)
        facts = {**cmd.facts, "where": placement.executor.name, "db_dir": f"{home}/db",
                 "record_bytes": self.params.record_bytes(),
                 "phases": {ph: {"wall_s": round(r.wall_s, 3), "cpu_busy": round(r.cpu_busy, 3)}
                            for ph, (r, _) in phases.items()}}
        raw = {ph: {"stdout": r.stdout[-20000:], "stderr": r.stderr[-4000:]} for ph, (r, _) in phases.items()}
        return WorkloadResult(metrics=metrics, raw=raw, job_text=job, flags=flags,
                              cpu_busy=phases["run"][0].cpu_busy, manifest=facts, resolution=resolution(metrics))

    def expected(self, phase: str) -> int | None:
        """Operations the phase must report: every record loaded; operationcount unless time-bound."""
        if phase == "load":
            return self.params.recordcount
        return None if self.params.maxexecutiontime else (self.params.operationcount or 1000)

    def describe(self) -> list[str]:
        p = self.params
        mix = ", ".join(f"{k.removesuffix('proportion')} {v:g}" for k, v in p.mix().items() if v)
        run = f"{p.maxexecutiontime} s" if p.maxexecutiontime else f"{p.operationcount or 1000} operations"
        return [f"workload ycsb: YCSB 0.17.0 core workload {p.core_workload} ({mix}; {p.distribution()}) on RocksDB, "
                f"{p.recordcount} records of {p.fieldcount} x {format_size(p.fieldlength)}, run {run}, "
                f"{p.threads} thread(s); a fresh database every trial"]


# fresh_dir and remove_own run through the executor, so the same guard holds on the host and in a guest
_FRESH = f"""set -e
d="$1"
if [ -e "$d" ] || [ -L "$d" ]; then
  if [ -L "$d" ] || [ ! -f "$d/{MARKER}" ]; then
    echo "refusing to remove $d: it was not made by iolab's ycsb workload (no {MARKER} in it)" >&2; exit 3
  fi
  rm -rf -- "$d"
fi
mkdir -- "$d"
echo "made by iolab's ycsb workload; removed after each trial" > "$d/{MARKER}"
"""
_REMOVE = f"""d="$1"
[ -e "$d" ] || [ -L "$d" ] || exit 0
if [ -L "$d" ] || [ ! -f "$d/{MARKER}" ]; then
  echo "refusing to remove $d: it was not made by iolab's ycsb workload (no {MARKER} in it)" >&2; exit 3
fi
rm -rf -- "$d"
"""


def fresh_dir(executor: Executor, parent: str, timeout_s: float = 600) -> str:
    """iolab's own database directory in `parent`, empty: a previous trial's is removed first
    (only if it holds MARKER: a directory iolab did not make is refused, never removed)."""
    home = f"{parent.rstrip('/')}/{DB_DIR}"
    res = executor.run(ExecRequest(argv=["sh", "-c", _FRESH, "sh", home], timeout_s=max(timeout_s, 60)))
    if res.returncode != 0:
        raise TrialFailed(f"cannot make the database directory {home}: {res.tail()}")
    return home


def remove_own(executor: Executor, home: str, strict: bool = True) -> None:
    """Remove a database directory iolab made (it holds MARKER); anything else is refused.
    strict=False: on the way out of a failed trial, whose own error is the news."""
    try:
        res = executor.run(ExecRequest(argv=["sh", "-c", _REMOVE, "sh", home], timeout_s=600))
    except Exception:
        if strict:
            raise
        return  # e.g. the guest died with the trial: the trial's own error is the one to keep
    if res.returncode != 0 and strict:
        raise TrialFailed(f"cannot remove the database directory {home}: {res.tail()}")


def parse(stdout: str) -> dict[str, dict[str, str]]:
    """YCSB's text export: `[SECTION], key, value` lines -> {section: {key: value}}."""
    out: dict[str, dict[str, str]] = {}
    for section, key, value in _LINE.findall(stdout):
        out.setdefault(section, {})[key] = value
    return out


def _num(v: str | None) -> float | None:
    try:
        x = float(v) if v is not None else None
    except ValueError:
        return None
    return x if x is not None and math.isfinite(x) else None


def op_counts(parsed: dict[str, dict[str, str]]) -> dict[str, tuple[int, dict[str, int]]]:
    """Per YCSB operation: (operations tried, {status: count} of the failed ones)."""
    out: dict[str, tuple[int, dict[str, int]]] = {}
    for op in OPS:
        returns = {k.removeprefix("Return="): int(float(v)) for k, v in parsed.get(op, {}).items()
                   if k.startswith("Return=")}
        if returns:  # every DB call reports its status
            tried = sum(returns.values())
        else:  # READ-MODIFY-WRITE is timed by the workload, without a status
            tried = sum(int(_num(parsed.get(name, {}).get("Operations")) or 0) for name in (op, f"{op}-FAILED"))
        if tried:
            out[op] = (tried, {k: n for k, n in returns.items() if k != "OK" and n})
    return out


def judge(phase: str, res: ExecResult, expected: int | None) -> dict[str, dict[str, str]]:
    """The phase's parsed output, or TrialFailed saying why its numbers cannot be used."""
    what = f"YCSB's {phase} phase"
    if res.timed_out:
        raise TrialFailed(f"{what} timed out after {res.wall_s:.0f} s")
    exc = _EXCEPTION.search(res.stdout) or _EXCEPTION.search(res.stderr)
    if exc:
        raise TrialFailed(f"{what}: {exc.group(1)[:600]}")
    if res.returncode != 0:
        raise TrialFailed(f"{what} exited {res.returncode}: {res.tail()}")
    parsed = parse(res.stdout)
    overall = parsed.get("OVERALL", {})
    if "Throughput(ops/sec)" not in overall or "RunTime(ms)" not in overall:
        raise TrialFailed(f"{what} printed no [OVERALL] result: {(res.stdout or res.stderr)[-600:]!r}")
    counts = op_counts(parsed)
    done = sum(n for n, _ in counts.values()) - 2 * counts.get("READ-MODIFY-WRITE", (0, {}))[0]
    runtime_ms, ops_s = _num(overall["RunTime(ms)"]), _num(overall["Throughput(ops/sec)"])
    if runtime_ms and ops_s is not None and round(ops_s * runtime_ms / 1000) != done:
        raise TrialFailed(f"{what}: its throughput says {round(ops_s * runtime_ms / 1000)} operations, its "
                          f"per-operation counts {done}")
    if expected is not None and done != expected:
        raise TrialFailed(f"{what} did {done} operations, {expected} were asked for (a client thread that "
                          f"died?): {res.tail(400)}")
    if expected is None and done == 0:
        raise TrialFailed(f"{what} did no operation: {res.tail(400)}")
    if phase == "load" and counts.get("INSERT", (0, {}))[1]:
        raise TrialFailed(f"{what}: inserts failed ({_statuses(counts['INSERT'][1])}): the database is not the one "
                          "asked for")
    wrong = {k: int(float(v)) for k, v in parsed.get("VERIFY", {}).items() if k.startswith("Return=") and
             k != "Return=OK" and float(v) > 0}
    if wrong:
        raise TrialFailed(f"{what}: YCSB's data integrity check found wrong data ({_statuses(wrong)})")
    return parsed


def _statuses(returns: dict[str, int]) -> str:
    return ", ".join(f"{k.removeprefix('Return=')} {n}" for k, n in sorted(returns.items()))


def resolution(metrics: dict[str, float]) -> dict[str, float]:
    """YCSB times a phase in whole milliseconds (RunTime(ms)) and divides by it: its throughput
    over t ms is known to about 1/t of itself (docs/statistics.md, "Resolution")."""
    out: dict[str, float] = {}
    for phase in ("load", "run"):
        ms = metrics.get(f"{phase}_runtime_s", 0.0) * 1000
        if ms >= 1:
            out[f"{phase}_runtime_s"] = 0.001
            if f"{phase}_ops_s" in metrics:
                out[f"{phase}_ops_s"] = metrics[f"{phase}_ops_s"] / ms
    return out


def phase_metrics(phase: str, parsed: dict[str, dict[str, str]]) -> dict[str, float]:
    """Flat metrics of one phase (names in METRICS); latencies only where an operation succeeded."""
    overall = parsed["OVERALL"]
    counts = op_counts(parsed)
    out: dict[str, float] = {f"{phase}_ops_s": float(_num(overall["Throughput(ops/sec)"]) or 0.0),
                             f"{phase}_runtime_s": float(_num(overall["RunTime(ms)"]) or 0.0) / 1000}
    out[f"{phase}_operations"] = float(sum(n for n, _ in counts.values()) - 2 * counts.get("READ-MODIFY-WRITE",
                                                                                           (0, {}))[0])
    out[f"{phase}_errors"] = float(sum(sum(bad.values()) for _, bad in counts.values()))
    gc = _num(parsed.get("TOTAL_GC_TIME_%", {}).get("Time(%)"))
    if gc is not None:
        out[f"{phase}_gc_percent"] = gc
    verify = parsed.get("VERIFY", {})
    if verify:
        out[f"{phase}_verify_errors"] = float(sum(int(float(v)) for k, v in verify.items()
                                                  if k.startswith("Return=") and k != "Return=OK"))
    for op, (tried, bad) in counts.items():
        name = f"{phase}_{OPS[op]}"
        out[f"{name}_ops"] = float(tried)
        out[f"{name}_errors"] = float(sum(bad.values()))
        stats = parsed.get(op, {})
        if not _num(stats.get("Operations")):
            continue  # no successful one: YCSB prints NaN and a max-long minimum
        for key, suffix in [("AverageLatency(us)", "mean"), ("MaxLatency(us)", "max"),
                            *((f"{pc}thPercentileLatency(us)", f"p{pc}") for pc in PERCENTILES)]:
            value = _num(stats.get(key))
            if value is not None:
                out[f"{name}_{suffix}_us"] = value
    return out


def phase_flags(phase: str, parsed: dict[str, dict[str, str]], res: ExecResult) -> list[str]:
    flags = []
    counts = op_counts(parsed)
    bad = {f"{op} {status}": n for op, (_, b) in counts.items() for status, n in b.items()}
    if bad:
        total = sum(n for n, _ in counts.values())
        flags.append(f"ycsb_failed_operations: {sum(bad.values())} of {total} {phase}-phase operations failed "
                     f"({', '.join(f'{k} {n}' for k, n in sorted(bad.items()))}); their latencies are not in the "
                     "percentiles")
    gc = _num(parsed.get("TOTAL_GC_TIME_%", {}).get("Time(%)"))
    if gc is not None and gc > GC_FLAG_PERCENT:
        flags.append(f"jvm_gc: the JVM spent {gc:.1f} % of the {phase} phase in garbage collection; latencies "
                     "include its pauses (a larger heap may help)")
    if "threadcount is bigger than" in res.stdout:
        flags.append(f"ycsb_threads_reduced: YCSB ran fewer threads than asked in the {phase} phase (more threads "
                     "than operations)")
    return flags
