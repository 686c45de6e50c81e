"""Each published claim's rule on stored-shape documents: holds, differs and not testable here,
with reasons that carry the measured numbers. A rule that ignored its data (always 'holds', or
the wrong direction) fails these."""

from __future__ import annotations

from typing import Any

import pytest

from iolab.reproduce import claims
from iolab.reproduce.claims import DIFFERS, HOLDS, UNTESTABLE, evaluate

KiB, MiB = 1 << 10, 1 << 20


def trial(workload: dict[str, Any], metrics: dict[str, float], target: dict[str, Any] | None = None,
          labels: dict[str, Any] | None = None, probes: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"status": "ok", "params": {**(labels or {}), "_workload": workload, "_target": target or {}},
            "metrics": metrics, "probes": probes or {}, "flags": [], "manifest": {}}


def doc(trials: list[dict[str, Any]], findings: dict[str, Any] | None = None, run_id: str = "r") -> dict[str, Any]:
    return {"run_id": run_id, "status": "complete", "trials": trials, "findings": findings or {}}


def by_id(rows: list[dict[str, Any]], cid: str) -> dict[str, Any]:
    return next(r for r in rows if r["id"] == cid)


# -- R1 -------------------------------------------------------------------------------------------
def virtio_doc(ratio_virtio: float, ratio_ide_big: float, ratio_ide_4k: float, accel: str = "kvm") -> dict[str, Any]:
    ts = []
    for rec, ide in ((4 * KiB, ratio_ide_4k), (16 * MiB, ratio_ide_big)):
        for test in ("write", "read"):
            for noise in (0.99, 1.0, 1.01):
                base = 1000.0 * (20 if rec > KiB * 4 else 4)
                w = {"kind": "iozone", "test": test, "record": rec}
                ts.append(trial(w, {"kbps": base * noise}, labels={"target": "host", "test": test, "record": rec}))
                ts.append(trial(w, {"kbps": base * ratio_virtio * noise},
                                labels={"target": "virtio-blk", "test": test, "record": rec}))
                ts.append(trial(w, {"kbps": base * ide * noise}, labels={"target": "ide", "test": test, "record": rec}))
    return doc(ts, {"accel": accel})


def test_r1_under_kvm_follows_the_bands() -> None:
    rows = evaluate({"virtio": virtio_doc(0.8, 0.54, 0.2)}, quick=False)
    assert by_id(rows, "R1-virtio-80")["verdict"] == HOLDS
    assert by_id(rows, "R1-emulated-53")["verdict"] == HOLDS
    assert by_id(rows, "R1-gap-small-records")["verdict"] == HOLDS
    assert by_id(rows, "R1-host-records")["verdict"] == HOLDS
    assert "0.80" in by_id(rows, "R1-virtio-80")["value"]
    rows = evaluate({"virtio": virtio_doc(0.5, 0.9, 0.9)}, quick=False)
    assert by_id(rows, "R1-virtio-80")["verdict"] == DIFFERS
    assert by_id(rows, "R1-emulated-53")["verdict"] == DIFFERS
    assert by_id(rows, "R1-gap-small-records")["verdict"] == DIFFERS


def test_r1_guest_ratios_are_not_testable_under_tcg_but_host_rows_are() -> None:
    rows = evaluate({"virtio": virtio_doc(0.1, 0.1, 0.1, accel="tcg")}, quick=True)
    for cid in ("R1-virtio-80", "R1-emulated-53", "R1-gap-small-records"):
        r = by_id(rows, cid)
        assert r["verdict"] == UNTESTABLE and "TCG" in r["reason"] and "0.10" in r["value"], r
    assert by_id(rows, "R1-host-records")["verdict"] == HOLDS


# -- R2 -------------------------------------------------------------------------------------------
def writemodes_doc(speedup: float, knee: int, sizes: list[int],
                   noises: tuple[float, ...] = (0.98, 1.0, 1.02)) -> dict[str, Any]:
    ts = []
    for bs in (512, 4096):
        for noise in noises:
            thr = (1.0 if bs == 512 else speedup) * noise
            ts.append(trial({"kind": "writemode", "mode": "o_sync", "bs": bs},
                            {"throughput_mib_s": thr, "syscalls_per_s": 2000 * noise}))
    thr = {str(b): {"mean": float(min(b, knee)), "ci95": [None, None]} for b in sizes}
    return doc(ts, {"knee": {"o_sync": knee}, "throughput": {"o_sync": thr}})


def test_r2_block_size_and_knee() -> None:
    grid = [512 << i for i in range(12)]
    rows = evaluate({"write-modes": writemodes_doc(7.8, 65536, grid)}, quick=False)
    assert by_id(rows, "R2-block-size")["verdict"] == HOLDS
    assert by_id(rows, "R2-knee-64k")["verdict"] == HOLDS
    rows = evaluate({"write-modes": writemodes_doc(1.3, 1 << 20, grid)}, quick=False)
    r = by_id(rows, "R2-block-size")
    assert r["verdict"] == DIFFERS and "1.3" in r["value"], r
    r = by_id(rows, "R2-knee-64k")
    assert r["verdict"] == DIFFERS and "1 MiB" in r["reason"] and "later" in r["reason"], r
    rows = evaluate({"write-modes": writemodes_doc(8, 4096, [512, 4096, 1 << 20])}, quick=True)
    assert by_id(rows, "R2-knee-64k")["verdict"] == UNTESTABLE  # the grid does not resolve 32-128 KiB


def test_r2_block_size_too_noisy_to_decide_when_the_interval_straddles_3x() -> None:
    """A busy machine: 4 KiB is ~4x as fast on average, but 3 repetitions spread 0.5x..1.5x."""
    r = by_id(evaluate({"write-modes": writemodes_doc(4, 65536, [512, 4096], (0.5, 1.0, 1.5))}, quick=True),
              "R2-block-size")
    lo, hi = r["estimate"]["ci95"]
    assert lo < 3 <= hi, r
    assert r["verdict"] == UNTESTABLE and r["reason"].startswith("too noisy to decide"), r


# -- R3 -------------------------------------------------------------------------------------------
def syncamp_doc(plain: float, ext4: float) -> dict[str, Any]:
    from iolab.studies.sync_amplification.spec import DEFAULTS

    def row(fs: str, factor: float) -> dict[str, Any]:
        return {"format": "qcow2", "pattern": "append", "guest_fs": fs, "options": dict(DEFAULTS),
                "factor_host_syncs": factor, "guest_fdatasync": 64, "guest_flushes": 128 if fs == "ext4" else 64,
                "causes": {"qcow2_l2_update": 64}}
    return doc([trial({"kind": "sync-writes"}, {})], {"accel": "tcg", "amplification": [row("none", plain),
                                                                                         row("ext4", ext4)]})


def test_r3_counts_decide_even_under_tcg() -> None:
    rows = evaluate({"sync-amplification": syncamp_doc(3.0, 6.0)}, quick=True)
    assert by_id(rows, "R3-three-syncs")["verdict"] == HOLDS
    assert by_id(rows, "R3-journal-doubles")["verdict"] == HOLDS
    rows = evaluate({"sync-amplification": syncamp_doc(2.0, 3.01)}, quick=True)
    r = by_id(rows, "R3-three-syncs")
    assert r["verdict"] == DIFFERS and "2.00 host syncs" in r["reason"] and "qcow2_l2_update 1.00" in r["reason"], r
    r = by_id(rows, "R3-journal-doubles")
    assert r["verdict"] == DIFFERS and "1.50" in r["value"] and "2.00 flushes per fdatasync" in r["reason"], r


def _cost_doc(values: dict[tuple[str, str], list[float]], tcg: bool) -> dict[str, Any]:
    from iolab.studies.sync_amplification.cost import analyze_cost
    from tests.studies.test_sync_cost import _doc

    d = _doc(values)
    d.update(run_id="r3", status="complete", findings={"accel": "tcg" if tcg else "kvm",
                                                       "cost": analyze_cost(d, tcg)})
    return d


def test_r3_cost_claims_read_the_cost_sections_family_verdicts() -> None:
    fast = {("dd-append", "qcow2"): [100, 102, 98], ("dd-append", "raw"): [190, 200, 195],
            ("dd-overwrite", "qcow2"): [100, 102, 98], ("dd-overwrite", "raw"): [104, 101, 103],
            ("varmail", "qcow2"): [500, 505, 495], ("varmail", "raw"): [530, 520, 525]}
    rows = evaluate({"sync-amplification": _cost_doc(fast, tcg=False)}, quick=True)
    big, small = by_id(rows, "R3-cost-dd-append"), by_id(rows, "R3-cost-small")
    assert big["verdict"] == HOLDS and big["value"].startswith("dd append +9"), big
    assert small["verdict"] == HOLDS and "dd overwrite" in small["value"] and "varmail" in small["value"], small
    same = {**fast, ("dd-append", "raw"): [101.0, 99.0, 100.0]}  # no gain where R3 saw +81 %
    big = by_id(evaluate({"sync-amplification": _cost_doc(same, tcg=False)}, quick=True), "R3-cost-dd-append")
    assert big["verdict"] == DIFFERS and "below a 20% gain" in big["reason"], big
    tcg = by_id(evaluate({"sync-amplification": _cost_doc(fast, tcg=True)}, quick=True), "R3-cost-dd-append")
    assert tcg["verdict"] == UNTESTABLE and "TCG" in tcg["reason"], tcg
    old = by_id(evaluate({"sync-amplification": syncamp_doc(3.0, 6.0)}, quick=True), "R3-cost-small")
    assert old["verdict"] == UNTESTABLE and "no cost section" in old["reason"], old


# -- R4 -------------------------------------------------------------------------------------------
def est(m: float, h: float = 0.1) -> dict[str, Any]:
    return {"mean": m, "ci95": [m - h, m + h], "n": 3}


def weights_doc(ratios: tuple[float, float, float], by_n: dict[str, bool] | None = None,
                breakdown: int | None = None, tenant: bool | None = None) -> dict[str, Any]:
    def group(rs: tuple[float, float, float], broken: bool) -> dict[str, Any]:
        return {"class_ratio": {"100": est(1.0), "200": est(rs[0]), "400": est(rs[1]), "800": est(rs[2])},
                "max_abs_log2_error": est(0.8 if broken else 0.1), "broken": broken, "holds": not broken,
                "flag_details": []}
    by = {"4": group(ratios, False)}
    for n, broken in (by_n or {}).items():
        by[n] = group(ratios, broken)
    f: dict[str, Any] = {"controller": "bfq", "by_groups": by, "ratio_tolerance": 0.15, "breakdown_n": breakdown,
                         "breakdown_bracket": [breakdown // 2 if breakdown else None, breakdown],
                         "breakdown_signals": {"tag_pressure": True, "iodepth_total": 256, "nr_requests": 256,
                                               "bfq_tag_limit_min": 4.0} if breakdown else None}
    if tenant is not None:
        f["tenant"] = {"bfq": {"groups_beside": {"class_ratio": by["4"]["class_ratio"], "ratios_hold": tenant}}}
    return doc([trial({"kind": "fio-groups"}, {})], f)


def test_r4_ratios_break_point_and_tenant() -> None:
    rows = evaluate({"cgroup-weights": weights_doc((2.0, 4.0, 7.9), {"8": False, "16": False, "32": True}, 32,
                                                   tenant=True)}, quick=False)
    for cid in ("R4-four-groups", "R4-beside-app", "R4-holds-16", "R4-breaks-32"):
        assert by_id(rows, cid)["verdict"] == HOLDS, by_id(rows, cid)
    assert "db_bench" in by_id(rows, "R4-beside-app")["reason"]  # a run before the choice: db_bench
    ycsb = weights_doc((2.0, 4.0, 7.9), tenant=False)
    ycsb["findings"]["tenant"]["bfq"].update(app="ycsb", beside={"tenant_ops_s": est(1234.0),
                                                                 "tenant_read_p99_us": est(5678.0)})
    r = by_id(evaluate({"cgroup-weights": ycsb}, quick=False), "R4-beside-app")
    assert r["verdict"] == DIFFERS and "YCSB workload A on RocksDB, as R4" in r["reason"], r
    assert "db_bench" not in r["reason"] and "1,234 ops/s, read p99 5,678 µs here" in r["reason"], r
    rows = evaluate({"cgroup-weights": weights_doc((1.6, 4.0, 7.9), {"8": True, "16": True, "32": True}, 8,
                                                   tenant=False)}, quick=False)
    assert by_id(rows, "R4-four-groups")["verdict"] == DIFFERS and "200" in by_id(rows, "R4-four-groups")["reason"]
    r = by_id(rows, "R4-breaks-32")
    assert r["verdict"] == DIFFERS and "N = 8" in r["reason"] and "nr_requests = 256" in r["reason"], r
    assert by_id(rows, "R4-holds-16")["verdict"] == DIFFERS
    assert by_id(rows, "R4-beside-app")["verdict"] == DIFFERS
    quick = evaluate({"cgroup-weights": weights_doc((2.0, 4.0, 8.0))}, quick=True)
    for cid in ("R4-beside-app", "R4-holds-16", "R4-breaks-32"):
        r = by_id(quick, cid)
        assert r["verdict"] == UNTESTABLE and "--quick" in r["reason"], r


# -- R5 -------------------------------------------------------------------------------------------
def profile_doc(cpu: float, disk: float, accel: str = "kvm") -> dict[str, Any]:
    ts = []
    for system, f_cpu, f_disk in (("performance", 1.0, 1.0), ("encrypted", cpu, disk)):
        for noise in (0.99, 1.0, 1.01):
            tgt = {"kind": "qemu", "name": system}
            lab = {"target": system}
            ts.append(trial({"kind": "sysbench-cpu", "threads": 1}, {"events_per_s": 1000 * f_cpu * noise}, tgt, lab))
            ts.append(trial({"kind": "stream"}, {"triad_mb_s": 5000 * noise, "copy_mb_s": 6000 * noise}, tgt, lab))
            for rw in ("randread", "read"):
                ts.append(trial({"kind": "fio", "rw": rw}, {"read_iops": 900 * f_disk * noise}, tgt, lab))
    return doc(ts, {"accel": accel})


def test_r5_cpu_memory_disk() -> None:
    rows = evaluate({"vm-profile": profile_doc(1.0, 0.7)}, quick=True)
    assert by_id(rows, "R5-cpu-equal")["verdict"] == HOLDS
    assert by_id(rows, "R5-disk-better")["verdict"] == HOLDS
    mem = by_id(rows, "R5-memory-better")
    assert mem["verdict"] == UNTESTABLE and "signed memory" in mem["reason"]
    rows = evaluate({"vm-profile": profile_doc(0.7, 1.0)}, quick=True)
    assert by_id(rows, "R5-cpu-equal")["verdict"] == DIFFERS
    assert by_id(rows, "R5-disk-better")["verdict"] == DIFFERS
    rows = evaluate({"vm-profile": profile_doc(1.0, 1.0, accel="tcg")}, quick=True)
    assert by_id(rows, "R5-disk-better")["verdict"] == UNTESTABLE and "TCG" in by_id(rows, "R5-disk-better")["reason"]


# -- every claim ---------------------------------------------------------------------------------
def test_every_claim_has_a_row_and_a_missing_study_is_not_testable() -> None:
    rows = evaluate({}, quick=True)
    assert [r["id"] for r in rows] == [c.id for c in claims.CLAIMS]
    assert {r["reference"] for r in rows} == {"R1", "R2", "R3", "R4", "R5"}
    assert all(r["verdict"] == UNTESTABLE and "has not run" in r["reason"] for r in rows)


@pytest.mark.parametrize("claim", claims.CLAIMS, ids=lambda c: c.id)
def test_a_malformed_document_is_reported_not_raised(claim: claims.Claim) -> None:
    bad = doc([trial({"kind": "x"}, {})], {"amplification": [{"format": "qcow2"}], "by_groups": {"4": {}},
                                           "knee": {"o_sync": 4096}, "throughput": {"o_sync": {"4096": None}}})
    row = by_id(evaluate({claim.study: bad}, quick=True), claim.id)
    assert row["verdict"] in (UNTESTABLE, DIFFERS, HOLDS) and row["reason"]


def test_the_docs_list_every_claim_with_its_rule() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "reproduce.md").read_text()
    for c in claims.CLAIMS:
        assert f"`{c.id}`" in text and c.rule in text, c.id
