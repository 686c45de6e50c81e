"""virtio's layer rows, on a fabricated results document built from the study's own --quick spec
(no machine): each layer over the one below, with its CI, and which rows hold under TCG.

Wrong programs these catch: a layer compared with the wrong row below (qcow2 over the device), a
ratio of arithmetic means while the table shows harmonic ones (the noise here is skewed so the
two differ by a fifth; also for guest over host), iozone's KB/s taken for MiB/s, a guest row called valid under TCG, a
host-side row called invalid, layer trials leaking into iozone's KB/s table, a spec that runs a
layer on the wrong target (the rows come from the spec's real configurations)."""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from iolab.report.model import Table, Tag
from iolab.spec.study import from_dict
from iolab.studies import virtio
from iolab.studies.common import size_label

MiB = 1 << 20
BUSES = virtio.spec.MAIN_BUSES + virtio.spec.EXTRA_BUSES
# what each layer keeps of the throughput of the layer below it
KEEPS = {"device": 1.0, "qemu-raw": 0.9, "qemu-raw-file": 0.8, "qemu-qcow2": 0.5, "virtio-blk": 0.5, "ide": 0.1,
         "nvme": 0.4, "virtio-scsi": 0.45, "ahci": 0.2}
BELOW = {"qemu-raw": "device", "qemu-raw-file": "qemu-raw", "qemu-qcow2": "qemu-raw-file",
         **{b: "qemu-raw-file" for b in BUSES}}
# skewed per-row noise: the harmonic and the arithmetic mean of these differ
NOISE = {"device": (1.0, 1.0, 1.0), "qemu-raw": (0.5, 1.0, 1.5), "qemu-raw-file": (1.0, 1.0, 1.0),
         "qemu-qcow2": (0.4, 1.0, 1.6), "host": (0.5, 1.0, 1.5)}


def _row(c: Any) -> str:
    """Which layer a configuration of the study is, from its target's name and its tool."""
    target, w = c.labels["target"], c.workload
    if target == "host-dev":
        return {"fio": "device", "qemu_img_bench": "qemu-raw"}[w["kind"]]
    if target == "host":
        return "host" if w["kind"] == "iozone" else {"raw": "qemu-raw-file", "qcow2": "qemu-qcow2"}[w["format"]]
    assert w["kind"] == "iozone" and target in BUSES, (target, w)
    return target


def _mib_s(row: str, rec: str) -> float:
    base = 400.0 if rec == "4m" else 20.0
    while row in BELOW:
        base *= KEEPS[row]
        row = BELOW[row]
    return base


def _doc(accel: str) -> dict[str, Any]:
    """The --quick spec with every bus (--quick itself runs R1's two; the full study all five),
    so the extra buses' rows are ordered and compared too."""
    spec = virtio.build(True)
    guest = next(t for t in spec["targets"] if t.get("bus") == virtio.spec.MAIN_BUSES[0])
    spec["targets"] += [dict(guest, name=b, bus=b) for b in BUSES if b not in virtio.spec.buses_of(True)]
    for w in spec["workloads"]:
        if w["kind"] == "iozone":
            w["targets"] = ["host", *BUSES]
    trials = []
    for c in from_dict(spec, "builtin:virtio").configs:
        row, w = _row(c), c.workload
        rec = size_label(w.get("record") or w["bs"]).lower()
        for k in range(3):
            v = _mib_s(row, rec) * NOISE.get(row, (0.95, 1.0, 1.05))[k]
            metrics = {"kbps": v * 1024} if w["kind"] == "iozone" else {"bw_mib_s": v, "iops": v * MiB / w["bs"]}
            guest = c.target["kind"] == "qemu"
            trials.append({"id": f"{c.id}-r{k}", "status": "ok", "repetition": k, "error": None,
                           "params": {**c.labels, "_target": c.target, "_workload": w}, "metrics": metrics,
                           "probes": {}, "flags": [f"{accel}: guest under {accel}"] if guest else [],
                           "manifest": {"target": {"accel": accel}} if guest else {}})
    return {"run_id": "r", "study": "virtio", "status": "complete", "spec": spec, "trials": trials}


def _median(vals: list[float]) -> float:
    """What every estimate is (docs/statistics.md): the median of the repetitions."""
    return float(statistics.median(vals))


@pytest.mark.parametrize("accel", ["tcg", "kvm"])
def test_each_layer_over_the_one_below(accel: str) -> None:
    doc = _doc(accel)
    f = virtio.analyze(doc)
    lay = f["layers"]
    assert set(lay) == {"order", "rows", "mib_s", "vs_below", "flags"}, "the keys docs/results.md documents"
    assert lay["order"] == ["device", "qemu-raw", "qemu-raw-file", "qemu-qcow2", *BUSES]
    assert set(f["kbps"]) == {"host", *BUSES}, "layer trials stay out of iozone's KB/s table"
    for row in lay["order"]:
        meta = lay["rows"][row]
        assert meta["below"] == BELOW.get(row), row
        host_side = row in ("device", "qemu-raw", "qemu-raw-file", "qemu-qcow2")
        assert meta["holds_under_tcg"] is host_side, row
        assert meta["valid_here"] is (host_side or accel == "kvm"), row
        assert set(lay["mib_s"][row]) == set(virtio.spec.LAYER_TESTS), "sequential tests only (randread is not one)"
        for test in virtio.spec.LAYER_TESTS:
            for rec in virtio.spec.QUICK_RECORDS:
                noise = NOISE.get(row, (0.95, 1.0, 1.05))
                mib = lay["mib_s"][row][test][rec]
                assert mib["unit"] == "MiB/s" and mib["n"] == 3
                assert mib["mean"] == pytest.approx(_mib_s(row, rec) * _median(list(noise)), rel=1e-9), (row, rec)
                if row == "device":
                    assert row not in lay["vs_below"]
                    continue
                r = lay["vs_below"][row][test][rec]
                under = NOISE.get(BELOW[row], (0.95, 1.0, 1.05))
                want = KEEPS[row] * _median(list(noise)) / _median(list(under))
                assert r["mean"] == pytest.approx(want, rel=1e-9), (row, test, rec, r)
                lo, hi = r["ci95"]
                assert lo is not None and hi is not None and 0 < lo < r["mean"] < hi, (row, r)
                assert r["method"].startswith("mover-ratio of median")
    assert lay["flags"] == ({b: [accel] for b in BUSES})
    # guest over host: the ratio of the medians the KB/s table shows
    for bus in BUSES:
        for rec in virtio.spec.QUICK_RECORDS:
            r = f["ratio_vs_host"][bus]["write"][rec]
            shown = f["kbps"][bus]["write"][rec]["mean"] / f["kbps"]["host"]["write"][rec]["mean"]
            want = _mib_s(bus, rec) * _median([0.95, 1.0, 1.05]) / (_mib_s("host", rec) * _median([0.5, 1.0, 1.5]))
            assert r["mean"] == pytest.approx(shown, rel=1e-9) and r["mean"] == pytest.approx(want, rel=1e-9), r


def test_the_report_says_which_rows_hold_under_tcg() -> None:
    doc = _doc("tcg")
    f = virtio.analyze(doc)
    summary, sections = virtio.present(doc, f)
    layers = next(s for s in sections if s.title == "Layers of the virtual disk")
    tables = [b for b in layers.blocks if isinstance(b, Table)]
    cost = next(t for t in tables if t.title.startswith("What each layer costs"))
    status = {(row[0], row[1]): row[-1] for row in cost.rows}
    for rec in virtio.spec.QUICK_RECORDS:
        assert status[rec, "QEMU qcow2 image file in ext4"] == Tag("holds under TCG (host side, native)", "good")
        assert status[rec, "guest, ide"] == Tag("needs KVM (guest ran under TCG)", "warn")
    assert any(n.level == "warn" and "NOT the device model" in n.text for n in cost.notes)
    assert any("QEMU qcow2 image file in ext4 / QEMU raw image file in ext4: write at 4k" in line for line in summary)
    # the ratios in the table are the findings' (a cell is the estimate itself)
    qcow2 = next(row for row in cost.rows if row[:2] == ["4k", "QEMU qcow2 image file in ext4"])
    assert qcow2[2] == "QEMU raw image file in ext4"
    assert qcow2[3] == f["layers"]["vs_below"]["qemu-qcow2"]["write"]["4k"]
