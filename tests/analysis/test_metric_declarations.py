"""Point 1 of issue 11: every metric a workload, probe or the runner produces is declared.

Each workload runs for real on the host (fio, the C helpers, sysbench, iperf3 over the
loopback) in its cheapest configuration; fio-groups and its db_bench tenant run through
`iolab run` on a cgroups target; the probes run for real where they can on a host
(block-device counters, page cache, CPU) and on stored real captures where they need a
guest or QEMU (tests/vm/data). Any name without a declaration fails, and every workload
kind and probe of the registries must be covered here.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from iolab.analysis.trials import declarations, numeric_keys
from iolab.cgroups.executor import HostExecutor
from iolab.core import metrics, registry
from iolab.core.errors import CapabilityMissing
from iolab.core.metrics import Metric, MetricSet
from iolab.native import ycsb_build
from iolab.probes import registry as probe_registry
from iolab.probes.diskstats import parse_stat, stat_delta
from iolab.probes.guest_blocktrace import count_rwbs
from iolab.probes.qemu_syscalls import count_trace_events, parse_strace_summary, probe_counts
from iolab.probes.qmp_blockstats import COUNTERS, stats_delta
from iolab.targets.base import Placement
from tests.core.helpers import Lab, make_lab

VM_DATA = Path(__file__).resolve().parents[1] / "vm" / "data"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="cgroups and loop devices need root")

# (kind, parameters): the cheapest run that reaches each production path of the workload
WORKLOAD_RUNS: list[tuple[str, dict[str, Any]]] = [
    ("fio", {"rw": "randrw", "bs": "4k", "size": "4M", "runtime": 1, "ramp_time": 0, "direct": False, "fsync": 4}),
    ("fio", {"rw": "read", "bs": "64k", "size": "4M", "runtime": "none", "direct": False, "numjobs": 2}),
    ("fio-jobfile", {"job_file": "two.fio", "job_text": "[global]\nsize=2M\nbs=4k\nrw=randrw\nfilename=jf.dat\n"
                                                        "[a]\n[b]\nrw=write\nfdatasync=8\n"}),
    ("iozone", {"test": "write", "record": "64k", "file_size": "1M", "direct": False}),
    ("iozone", {"test": "reread", "record": "64k", "file_size": "1M", "direct": False}),
    ("writemode", {"mode": "o_sync", "bs": "4k", "size": "64k"}),
    ("sync-writes", {"pattern": "append", "bs": "4k", "count": 4}),
    ("sync-writes", {"pattern": "sequential", "bs": "4k", "count": 4}),
    ("primes", {"limits": [1000, 2500000, 1234]}),
    ("sysbench-cpu", {"threads": 1, "time": 1}),
    ("stream", {"array_mib": 4, "ntimes": 2}),
    ("iperf3", {"direction": "guest_to_host", "time": 1, "omit": 0}),
    ("varmail", {"iterations": 20, "nthreads": 2, "nfiles": 50, "iosize": "64k"}),
    # every per-operation family at once: read, update, insert, scan, read-modify-write, verify
    ("ycsb", {"recordcount": 200, "operationcount": 400, "dataintegrity": True, "readproportion": 0.2,
              "updateproportion": 0.2, "insertproportion": 0.2, "scanproportion": 0.2,
              "readmodifywriteproportion": 0.2, "maxscanlength": 10, "heap": "128M"}),
    ("qemu_img_bench", {"format": "qcow2", "rw": "read", "bs": "64k", "size": "1M", "cache": "writeback"}),
]
# run through `iolab run` below (they need a cgroups target)
GROUP_KINDS = {"fio-groups"}


@pytest.fixture(scope="module")
def placement(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Placement]:
    ex = HostExecutor()
    # on disk, not tmpfs, under the scratch area tests may use
    work = Path(os.environ.get("IOLAB_SCRATCH") or "/var/tmp") / f"iolab-decl-test-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    yield Placement(executor=ex, directory=str(work))
    ex.close()
    shutil.rmtree(work, ignore_errors=True)


def _undeclared(declared: MetricSet, names: list[str]) -> list[str]:
    return declared.undeclared(names)


@pytest.mark.parametrize("kind,params", WORKLOAD_RUNS, ids=[f"{k}-{i}" for i, (k, _) in enumerate(WORKLOAD_RUNS)])
def test_workload_metrics_are_declared(kind: str, params: dict[str, Any], placement: Placement) -> None:
    if kind in ("sysbench-cpu", "iperf3", "fio", "fio-jobfile", "iozone", "sync-writes", "qemu_img_bench"):
        exe = {"sysbench-cpu": "sysbench", "iperf3": "iperf3", "qemu_img_bench": "qemu-img"}.get(kind, "fio")
        if shutil.which(exe) is None:
            pytest.skip(f"{exe} not installed")
    if kind == "ycsb":
        try:
            ycsb_build.installed()
        except CapabilityMissing as exc:
            pytest.skip(str(exc))
    cls = registry.workload_class(kind)
    p = cls.Params(kind=kind, **params)
    result = cls(p).run(placement, 120)
    names = list(result.metrics) + (["generator_cpu_busy"] if result.cpu_busy is not None else [])
    assert names, f"{kind} produced no metrics"
    declared = cls.metric_set(p.model_dump(mode="json"))
    assert _undeclared(declared, names) == [], f"{kind} produces undeclared metrics"
    main = cls(p).main_metric
    assert main in result.metrics and main in declared, f"{kind}: main metric {main} missing or undeclared"


def test_every_workload_kind_is_covered() -> None:
    assert {k for k, _ in WORKLOAD_RUNS} | GROUP_KINDS == set(registry.WORKLOADS)


def test_fixed_work_rates_average_harmonically() -> None:
    fio = registry.workload_class("fio")
    timed = fio.metric_set({"kind": "fio", "runtime": 10.0})
    once = fio.metric_set({"kind": "fio", "runtime": None})
    assert timed.get("iops").aggregate == "mean" and once.get("iops").aggregate == "harmonic"
    assert once.get("read_bw_mib_s").aggregate == "harmonic" and once.get("read_clat_p99_us").aggregate == "mean"
    jf = registry.workload_class("fio-jobfile")
    assert jf.metric_set({"job_text": "[a]\nruntime=5\ntime_based\n"}).get("iops").aggregate == "mean"
    assert jf.metric_set({"job_text": "[a]\nsize=1M\n"}).get("iops").aggregate == "harmonic"
    assert jf.metric_set({"job_text": "[a]\ntime_based=0\n"}).get("iops").aggregate == "harmonic"
    for kind, name in (("iozone", "kbps"), ("writemode", "throughput_mib_s"), ("sync-writes", "write_iops"),
                       ("qemu_img_bench", "iops"), ("qemu_img_bench", "bw_mib_s")):
        assert registry.workload_class(kind).metric_set({"kind": kind}).get(name).aggregate == "harmonic", kind
    varmail = registry.workload_class("varmail")
    assert varmail.metric_set({"kind": "varmail", "duration": 60.0}).get("ops_per_s").aggregate == "mean"
    assert varmail.metric_set({"kind": "varmail", "iterations": 100}).get("mb_per_s").aggregate == "harmonic"


@needs_root
@pytest.mark.cgroup
def test_fio_groups_and_tenant_metrics_are_declared(tmp_path: Path) -> None:
    if shutil.which("db_bench") is None or shutil.which("fio") is None:
        pytest.skip("fio and db_bench (rocksdb-tools) are needed")
    lab: Lab = make_lab(tmp_path / "lab")
    try:
        spec = lab.spec("""
[study]
name = "declared-groups"
repetitions = 1
max_repetitions = 1

[target]
kind = "cgroups"
controller = "none"
size = "512M"
filesystem = "ext4"
data_size = "128M"

[[workloads]]
name = "groups"
kind = "fio-groups"
groups = 2
runtime = 3
warmup = 1

[[workloads]]
name = "alone"
kind = "fio-groups"
groups = 0
tenant = "alone"
runtime = 2
warmup = 1

[[workloads]]
name = "beside"
kind = "fio-groups"
groups = 2
tenant = "beside"
runtime = 3
warmup = 1
""")
        r = lab.iolab("run", spec, timeout=600)
        assert r.returncode == 0, r.stderr
        doc = lab.report_json()
        assert [t["status"] for t in doc["trials"]] == ["ok"] * 3, [t["error"] for t in doc["trials"]]
        decl = doc["findings"]["metric_declarations"]
        assert decl["undeclared"] == [], decl["undeclared"]
        names = set(decl["workloads"]["fio-groups"])
        assert {"ratio_200", "class_iops_100", "tenant_ops_s", "tenant_iops_kernel", "tenant_read_p99_us",
                "aggregate_iops", "read_clat_p99_us_worst_group"} <= names, sorted(names)
        assert decl["workloads"]["fio-groups"]["tenant_ops_s"]["direction"] == "higher"
        lab.assert_nothing_left()
    finally:
        lab.force_cleanup()


# -- probes -------------------------------------------------------------------------------------

def _probe_undeclared(name: str, result: dict[str, Any]) -> list[str]:
    declared, skip = probe_registry.metric_set(name), set(probe_registry.attributes(name))
    return [k for k in numeric_keys(result) if k.split(".", 1)[0] not in skip and k not in declared]


def _real_block_device() -> str:
    for dev in sorted(os.listdir("/sys/class/block")):
        if (Path("/sys/class/block") / dev / "stat").exists():
            return dev
    pytest.skip("no block device with a stat file")


def test_host_probes_run_for_real_and_are_declared(placement: Placement) -> None:
    host = Placement(executor=placement.executor, directory=placement.directory, host_device=_real_block_device())
    for name in ("host_disk", "page_cache", "machine_cpu"):
        cls = probe_registry.probe_class(name)
        assert cls is not None and cls.applies_to(host)
        probe = cls()
        probe.start(host)
        result = probe.stop()
        assert numeric_keys(result), name
        assert _probe_undeclared(name, result) == [], name


def test_guest_probes_on_real_captures_are_declared() -> None:
    stat = (Path("/sys/class/block") / _real_block_device() / "stat").read_text()
    assert _probe_undeclared("guest_disk", {**stat_delta(parse_stat(stat), parse_stat(stat)), "device": "vdb"}) == []
    qmp = stats_delta({k: 1 for k in COUNTERS}, {**{k: 3 for k in COUNTERS}, "wr_highest_offset": 4096})
    assert _probe_undeclared("qmp_blockstats", {**qmp, "device": "disk0"}) == []
    calls = parse_strace_summary((VM_DATA / "strace-c-qemu-io-native.txt").read_text())
    events = count_trace_events((VM_DATA / "trace-guest-qcow2-threads.log").read_text())
    assert calls and events
    syscalls = {**probe_counts(calls, events), "qemu_pid": 1, "notes": []}
    assert "causes.cluster_allocations" in numeric_keys(syscalls)
    assert _probe_undeclared("qemu_syscalls", syscalls) == []
    assert _probe_undeclared("qemu_syscalls", probe_counts(calls, None)) == []
    trace = count_rwbs((VM_DATA / "blocktrace-nvme-6.1.txt").read_text(), "259,0")
    assert trace["requests"] > 0 and trace["by_rwbs"]
    blocktrace = {**trace, "complete": True, "device": "nvme0n1", "dev": "259,0", "queue_fua": 1}
    assert _probe_undeclared("guest_blocktrace", blocktrace) == []


def test_every_probe_is_covered() -> None:
    covered = {"host_disk", "page_cache", "machine_cpu", "guest_disk", "qmp_blockstats", "qemu_syscalls",
               "guest_blocktrace", "fs_journal",  # fs_journal: tests/probes/test_fs_journal.py, on a real ext4
               "under_disk"}  # tests/probes/test_under_disk.py, under a real loop target
    assert covered == {p.name for p in probe_registry.probe_classes()}


# -- the declarations themselves ----------------------------------------------------------------

def _all_declarations() -> list[tuple[str, Metric]]:
    out = [(f"workload {k}", m) for k in registry.WORKLOADS for m in registry.workload_class(k).metric_set({"kind": k})]
    out += [(f"probe {p.name}", m) for p in probe_registry.probe_classes() for m in p.metrics]
    return out


def test_directions_agree_with_units() -> None:
    """A rate is never lower-is-better and a latency or duration of fixed work never higher-is-better:
    the inversion the old name rule made (`*_s` = lower) cannot come back through a typo."""
    for owner, m in _all_declarations():
        if m.unit in ("IOPS", "MiB/s", "MB/s", "KiB/s", "Mbit/s", "events/s", "ops/s", "calls/s"):
            assert m.direction in ("higher", "neither"), (owner, m)
        if m.unit in ("µs", "ns", "ms"):
            assert m.direction in ("lower", "neither"), (owner, m)
        assert m.description and m.unit, (owner, m)


def test_patterns_match_exactly_what_they_declare() -> None:
    side = Metric("{side:read|write}_iops", "IOPS", "higher", "per side")
    assert side.matches("read_iops") and side.matches("write_iops")
    assert not side.matches("trim_iops") and not side.matches("read_iops_x") and not side.matches("xread_iops")
    weight = Metric("ratio_{w:int}", "ratio", "neither", "per class")
    assert weight.matches("ratio_800") and not weight.matches("ratio_") and not weight.matches("ratio_8a")
    with pytest.raises(ValueError):
        Metric("x_{bad:(.*)}", "s", "lower", "a placeholder kind that is not allowed")
    with pytest.raises(ValueError):
        Metric("x", "s", "sideways", "not a direction")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        MetricSet([Metric("x", "s", "lower", "one"), Metric("x", "s", "lower", "twice")])
    assert metrics.for_workload({"kind": "no-such-kind"}).get("generator_cpu_busy") is not None


def test_results_document_carries_the_declarations() -> None:
    doc = {"trials": [{"params": {"_workload": {"kind": "sysbench-cpu"}}, "metrics": {"events_per_s": 1.0, "odd": 2.0},
                       "probes": {"machine_cpu": {"busy": 0.5, "iowait": 0.0, "cores": 2}}}]}
    d = declarations(doc).to_json()  # typed (analysis/trials.py MetricDeclarations); its JSON is the contract
    assert d["workloads"]["sysbench-cpu"]["events_per_s"] == {
        "unit": "events/s", "direction": "higher", "aggregate": "mean", "domain": "nonneg", "estimand": "median",
        "description": registry.workload_class("sysbench-cpu").metric_set({}).get("events_per_s").description}
    assert d["probes"]["machine_cpu"]["busy"]["unit"] == "fraction"
    assert d["probes"]["machine_cpu"]["busy"]["domain"] == "unit"  # a share of CPU time: [0, 1]
    assert d["undeclared"] == ["sysbench-cpu:odd"]
    assert json.dumps(d)  # JSON-able
