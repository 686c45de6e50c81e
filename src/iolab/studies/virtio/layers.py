"""virtio's layer rows (pure): what each layer of a virtual disk costs, from the device up.

Under TCG the guest's CPU is emulated, so guest numbers hide the device model (every bus
gives the same guest/host ratio): R1's question cannot be answered from guests here. The
host side of the virtual disk runs natively and can: each row below adds one layer over the
row under it, with the same sequential pattern, record size, depth and bytes:

  device          fio on the bare loop device (O_DIRECT, psync)
  qemu-raw        qemu-img bench -f raw on that same device: QEMU's block layer
  qemu-raw-file   qemu-img bench on a fresh raw image file in the host's ext4: the filesystem
  qemu-qcow2      the same with a qcow2 image file: the format
  <bus>           iozone in a guest whose raw image file sits in ext4: device model + guest

Each row's throughput is the median over its repetitions (the same number as the median
time for its fixed bytes), and its cost is its throughput over the row below: the ratio of
the two medians with the run's own `RunEstimator.ratio` (MOVER), so the ratio agrees with the
throughputs shown. Host-side rows hold under TCG;
guest rows need KVM.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass

from iolab.analysis.record import Est, Record
from iolab.analysis.sequential import RunEstimator
from iolab.analysis.stats import Estimate
from iolab.analysis.trials import Doc, Trial, relative_resolution
from iolab.studies.common import Key, estimates, nest3, ok_trials, size_label
from iolab.studies.virtio.spec import EXTRA_BUSES, LAYER_TESTS, MAIN_BUSES

KIB_PER_MIB = 1024.0


@dataclass(frozen=True)
class Row:
    """One layer: what it is, what measured it, the row it sits on, and whether TCG spoils it."""

    layer: str
    tool: str
    what: str
    below: str | None
    holds_under_tcg: bool


HOST_ROWS: dict[str, Row] = {
    "device": Row("host device", "fio", "fio on the bare scratch loop device: sequential, O_DIRECT, psync, "
                  "depth 1", None, True),
    "qemu-raw": Row("QEMU block layer, raw on the device", "qemu-img bench",
                    "qemu-img bench -f raw on that same loop device, cache=none, aio=threads", "device", True),
    "qemu-raw-file": Row("QEMU raw image file in ext4", "qemu-img bench",
                         "a fresh raw image file in ext4 on a scratch loop device (as the guests' images)",
                         "qemu-raw", True),
    "qemu-qcow2": Row("QEMU qcow2 image file in ext4", "qemu-img bench",
                      "a fresh qcow2 image file in the same ext4 (qemu-img create's defaults unless the spec "
                      "names options)",
                      "qemu-raw-file", True),
}


def guest_row(bus: str, image_format: str) -> Row:
    below = "qemu-qcow2" if image_format == "qcow2" else "qemu-raw-file"
    return Row(f"guest, {bus}", "iozone in the guest",
               f"iozone in a guest on its {bus} disk (ext4 in the guest, a {image_format} image file in the host's "
               "ext4, cache=none, aio=threads, iozone's final flush timed)", below, False)


class LayerRow(Record):
    """A layer as the findings list it: its Row, and whether its numbers answer R1 on this machine."""

    layer: str
    tool: str
    what: str
    below: str | None
    holds_under_tcg: bool
    valid_here: bool


class Layers(Record):
    """findings.layers (docs/results.md, virtio): the rows from the device up, their MiB/s per test
    and record, each over the row below it, and the flags each row's trials raised."""

    order: list[str]
    rows: dict[str, LayerRow]
    mib_s: dict[str, dict[str, dict[str, Est]]]
    vs_below: dict[str, dict[str, dict[str, Est]]]
    flags: dict[str, list[str]]


def row_of(trial: Trial) -> tuple[str, Row] | None:
    """The layer a trial measured, from its full configuration; None if it is no layer row."""
    w, t = trial["params"]["_workload"], trial["params"]["_target"]
    on_device = t.get("kind") == "device" or (t.get("kind") == "loop" and t.get("filesystem", "none") == "none")
    kind = w.get("kind")
    if kind == "fio" and on_device:
        return "device", HOST_ROWS["device"]
    if kind == "qemu_img_bench":
        name = "qemu-raw" if on_device else ("qemu-raw-file" if w.get("format") == "raw" else "qemu-qcow2")
        return name, HOST_ROWS[name]
    if kind == "iozone" and t.get("kind") == "qemu":
        bus = str(t.get("bus"))
        return bus, guest_row(bus, str(t.get("format", "raw")))
    return None


def mib_s_of(trial: Trial) -> tuple[str, str, float] | None:
    """(test, record, MiB/s) of a layer trial: fio and qemu-img report MiB/s, iozone KB/s (KiB)."""
    w, m = trial["params"]["_workload"], trial["metrics"]
    if w.get("kind") == "iozone":
        test, rec, value = w.get("test"), w.get("record"), m.get("kbps")
        value = None if value is None else value / KIB_PER_MIB
    else:
        test, rec, value = w.get("rw"), w.get("bs"), m.get("bw_mib_s")
    if test not in LAYER_TESTS or rec is None or value is None:
        return None
    return str(test), size_label(rec).lower(), float(value)


def layer_findings(doc: Doc, accel: str | None) -> Layers:
    """{order, rows, mib_s, vs_below, flags} (docs/results.md, virtio)."""
    values: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    trials_of: dict[tuple[str, str, str], list[Trial]] = defaultdict(list)
    rows: dict[str, Row] = {}
    flags: dict[str, set[str]] = defaultdict(set)
    for t in ok_trials(doc):
        found, cell = row_of(t), None
        if found:
            cell = mib_s_of(t)
        if not found or not cell:
            continue
        name, row = found
        rows[name] = row
        values[(name, cell[0], cell[1])].append(cell[2])
        trials_of[(name, cell[0], cell[1])].append(t)
        flags[name].update(f.split(":", 1)[0] for f in t.get("flags") or [])
    est = RunEstimator(doc)
    # the clock error of each cell's rate (fio: whole ms; qemu-img: ms; iozone in a guest: fio's)
    rels: dict[Key, float] = {cell: max(relative_resolution(ts, "kbps"), relative_resolution(ts, "bw_mib_s"))
                              for cell, ts in trials_of.items()}
    vs_below: dict[Key, Estimate] = {}
    for (name, test, rec), vals in values.items():
        below = rows[name].below
        under = values.get((below, test, rec)) if below else None
        if below and under:
            vs_below[name, test, rec] = est.ratio_of("harmonic", vals, under,
                                                     (rels[name, test, rec], rels[below, test, rec]))
    known = list(HOST_ROWS) + MAIN_BUSES + EXTRA_BUSES
    order = [n for n in known if n in rows] + sorted(n for n in rows if n not in known)
    return Layers(
        order=order,
        rows={n: LayerRow(**asdict(rows[n]), valid_here=rows[n].holds_under_tcg or accel == "kvm") for n in order},
        mib_s=nest3(estimates(dict(values), est.harmonic, unit="MiB/s", rels=rels)),
        vs_below=nest3(vs_below),
        flags={n: sorted(flags[n]) for n in order if flags[n]})
