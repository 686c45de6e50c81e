"""The heart of the study, for real: four fio processes in groups weighted 100/200/400/800
on a loop device. BFQ (low_latency=0) must split IOPS 1:2:4:8 within ±15%; scheduler
`none` must not. Kernel per-group counters must agree with fio's own totals."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from iolab.cgroups.sampler import Sampler, Series
from iolab.cgroups.session import CgroupSession
from iolab.core.resources import Ledger

pytestmark = [pytest.mark.cgroup]

WEIGHTS = [100, 200, 400, 800]
NAMES = [f"w{w}" for w in WEIGHTS]
RUNTIME_S = 8


def _run(backend: str, loopdev: str, ledger: Ledger, fio_groups: Callable[..., dict],
         tunables: dict | None = None) -> tuple[dict, Series, dict]:
    with CgroupSession(backend, loopdev, ledger, runid=f"t-{backend}", tunables=tunables) as s:
        s.setup(WEIGHTS, NAMES)
        sampler = Sampler(s.counters, interval_s=0.5)
        sampler.start()
        try:
            fio = fio_groups(loopdev, s.procs_files(), runtime_s=RUNTIME_S)
        finally:
            series = sampler.stop()
        final = s.counters()
        manifest = s.manifest()
    return fio, series, {"final": final, "manifest": manifest}


def _report(label: str, fio: dict, series: Series) -> dict[str, float]:
    base = fio["w100"]["iops"]
    ratios = {n: fio[n]["iops"] / base for n in NAMES}
    kratio = _steady_ratios(series)
    print(f"\n{label}: fio IOPS " + " ".join(f"{n}={fio[n]['iops']:.0f}" for n in NAMES))
    print(f"{label}: fio ratio " + " ".join(f"{n}={ratios[n]:.2f}" for n in NAMES)
          + f" | kernel steady ratio " + " ".join(f"{n}={kratio[n]:.2f}" for n in NAMES)
          + f" | fio cpu busy " + " ".join(f"{fio[n]['cpu']:.2f}" for n in NAMES))
    return ratios


def _steady_ratios(series: Series) -> dict[str, float]:
    """Kernel IOPS ratios from 1 s after the start to the last sample where all groups ran."""
    start = next(i for i, t in enumerate(series.t) if t >= 1.0)
    rates = series.iops()
    end = max(k for k, (_t, r) in enumerate(rates) if min(r.values()) > 0) + 1
    return series.window_ratio(start, end, "w100")


def _check_counters_agree(fio: dict, final: dict) -> None:
    for n in NAMES:
        k, f = final[n].rios, fio[n]["ios"]
        assert abs(k - f) / f < 0.03, f"{n}: kernel {k} vs fio {f} I/Os"


def test_bfq_splits_by_weight(loopdev: str, ledger: Ledger, fio_groups: Callable[..., dict],
                              no_leftovers: None) -> None:
    fio, series, extra = _run("bfq", loopdev, ledger, fio_groups)
    ratios = _report("bfq", fio, series)
    _check_counters_agree(fio, extra["final"])
    assert extra["manifest"]["device"]["scheduler"] == "bfq"
    kernel = _steady_ratios(series)
    for n, w in zip(NAMES, WEIGHTS):
        assert ratios[n] == pytest.approx(w / 100, rel=0.15), f"{n}: fio ratio {ratios[n]:.2f}"
        assert kernel[n] == pytest.approx(w / 100, rel=0.15), f"{n}: kernel ratio {kernel[n]:.2f}"


def test_none_is_not_proportional(loopdev: str, ledger: Ledger, fio_groups: Callable[..., dict],
                                  no_leftovers: None) -> None:
    fio, series, extra = _run("none", loopdev, ledger, fio_groups)
    ratios = _report("none", fio, series)
    _check_counters_agree(fio, extra["final"])
    assert extra["manifest"]["device"]["scheduler"] == "none"
    assert extra["manifest"]["cgroups"]["groups"] == dict(zip(NAMES, WEIGHTS))  # written anyway
    kernel = _steady_ratios(series)
    for r in (ratios, kernel):
        assert r["w800"] < 2.0, "weights look enforced with scheduler none"
        assert max(r.values()) / min(r.values()) < 2.0
