"""Where a comparison's run-to-run noise came from, said once for all its rows: how many rows read
it from the store (over which runs, how old the newest was when B ran), how many had stored runs
that were all alike, and how many compare two runs only on the default floor (compare.py)."""

from __future__ import annotations

import time
from typing import Any

AB_HINT = "to gate a change, run A and B interleaved in one study: `iolab ab` (README)"


def noise_summary(rows: list[dict[str, Any]], floor: float, b_created: float | None = None) -> dict[str, Any]:
    """Where the run-to-run noise of the comparison came from: the store (how many rows, the runs'
    dates, how old the newest is when B ran) or the floor (how many rows), with the sentence the
    reports print."""
    noises = [r["noise"] for r in rows if r.get("noise")]
    stored = [n for n in noises if n["source"] == "store"]
    on_floor = [n for n in noises if n["source"] != "store"]
    dates = [t for n in stored for t in (n.get("oldest"), n.get("newest")) if t]
    taus = sorted(n["tau"] for n in stored if n.get("tau") is not None)
    summary: dict[str, Any] = {"rows_from_store": len(stored), "rows_on_floor": len(on_floor), "floor": floor,
                               "oldest": min(dates) if dates else None, "newest": max(dates) if dates else None,
                               "runs": max((n.get("runs") or 0 for n in stored), default=0),
                               "window_runs": max((n.get("window_runs") or 1 for n in noises), default=1),
                               "median_tau": taus[len(taus) // 2] if taus else None}
    parts = []
    if stored:
        when = ""
        if summary["oldest"] and summary["newest"]:
            when = f", run {_day(summary['oldest'])} to {_day(summary['newest'])}"
            if b_created:
                when += f", the newest {_age(b_created - summary['newest'])} before B"
        parts.append(f"run-to-run noise estimated from the store for {len(stored)} row(s): up to "
                     f"{summary['runs']} earlier runs of the same configurations on this host{when}"
                     + (f" (median run-level SD {summary['median_tau']:.1%})" if summary["median_tau"] is not None
                        else "") + f"; A's level from up to {summary['window_runs']} runs like A")
    alike = [n for n in on_floor if n.get("store_identical")]
    if alike:
        parts.append(f"{len(alike)} row(s) have stored runs whose values are all identical (a deterministic or "
                     f"coarsely quantised metric): no run-to-run spread can be read from them, so the floor "
                     f"{floor:.1%} is assumed")
        on_floor = [n for n in on_floor if not n.get("store_identical")]
    if on_floor:
        parts.append(f"{len(on_floor)} row(s) compare two runs only (no repeated runs in the store): run-level SD "
                     f"assumed {floor:.1%} (the default floor, docs/statistics.md); {AB_HINT}")
    summary["message"] = "; ".join(parts)
    return summary


def _day(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


def _age(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} days"
