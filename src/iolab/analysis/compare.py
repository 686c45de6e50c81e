"""Comparing two runs of the same study, configuration by configuration."""

from __future__ import annotations

from typing import Any

from iolab.analysis.generic import by_config, labels_of
from iolab.analysis.stats import mean_ci, ratio_ci, verdict


HEADLINE = ("iops", "bw_mib_s", "throughput_mib_s", "kbps", "read_clat_p99_us", "write_clat_p99_us",
            "read_lat_mean_us", "write_lat_mean_us")


def lower_is_better(metric: str) -> bool:
    return "lat" in metric or metric.endswith(("_us", "_s")) and not metric.endswith("_mib_s")


def compare_runs(a: dict[str, Any], b: dict[str, Any], metrics: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Rows of B/A with CI and a verdict for every metric both runs measured on a shared configuration."""
    ga, gb = by_config(a), by_config(b)
    rows = []
    for cid in [c for c in ga if c in gb]:
        oa = [t for t in ga[cid] if t["status"] == "ok"]
        ob = [t for t in gb[cid] if t["status"] == "ok"]
        names = sorted(set.intersection(*[set(t["metrics"]) for t in oa + ob])) if oa and ob else []
        for m in metrics or [n for n in names if n in HEADLINE] or names:
            va = [t["metrics"][m] for t in oa if m in t["metrics"]]
            vb = [t["metrics"][m] for t in ob if m in t["metrics"]]
            if not va or not vb:
                continue
            r = ratio_ci(vb, va)
            rows.append({"config": ", ".join(f"{k}={v}" for k, v in labels_of(ga[cid][0]).items()) or cid,
                         "metric": m, "a": mean_ci(va).mean, "b": mean_ci(vb).mean,
                         "ratio": r.mean, "lo": r.lo, "hi": r.hi, "verdict": verdict(vb, va) if lower_is_better(m) else verdict(va, vb)})
    return rows
