"""Holm over the questions a comparison asks, not over its rows.

Rows of one configuration whose values are the same numbers in another unit (fio's IOPS and
MiB/s at one block size, the total and the read-side rates of a read-only job, a latency that is
exactly 1/IOPS: log values proportional trial by trial) carry one piece of evidence. Counting
them as several hypotheses would only make Holm stricter for nothing; they are one question,
and every row of it gets the question's adjusted p. Pure.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from iolab.analysis.stats import holm


def holm_over_questions(rows: list[dict[str, Any]], ga: dict[str, list[dict[str, Any]]],
                         gb: dict[str, list[dict[str, Any]]]) -> list[float]:
    """Holm over the distinct questions the rows ask. Rows of one configuration whose values are the
    same numbers in another unit (fio's IOPS and MiB/s at one block size, a latency that is 1/IOPS:
    log values exactly proportional trial by trial) are one hypothesis, not several: the family
    is their group (its largest p), and every row of a group gets the group's adjusted p."""
    keys: list[Any] = []
    for i, r in enumerate(rows):
        keys.append(signature(r, ga, gb) or ("row", i))
    groups: dict[Any, list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    order = list(groups.values())
    ps = [max((rows[i]["p_beyond_threshold"] for i in g if rows[i]["p_beyond_threshold"] is not None),
              default=math.nan) for g in order]
    adjusted = holm(ps)
    out = [math.nan] * len(rows)
    for g, p in zip(order, adjusted, strict=True):
        for i in g:
            out[i] = p if rows[i]["p_beyond_threshold"] is not None else math.nan
    return out


def signature(row: dict[str, Any], ga: dict[str, list[dict[str, Any]]],
               gb: dict[str, list[dict[str, Any]]]) -> tuple[Any, ...] | None:
    """The row's log values, trial by trial (A's, then B's), centred, scaled and signed to one
    shape: equal for rows that carry the same information. None when values are missing."""
    if row.get("counts") is not None or row["verdict"] == "invalid":
        return None
    cid, m = row["config_id"], row["metric"]
    vals = [(t.get("metrics") or {}).get(m) for t in (*ga[cid], *gb[cid]) if t["status"] == "ok"]
    if not vals or any(not isinstance(v, (int, float)) or not v > 0 or not math.isfinite(v) for v in vals):
        return None
    x = np.log(np.asarray(vals, dtype=float))
    x = x - x.mean()
    norm = float(np.sqrt((x * x).sum()))
    if norm == 0:
        return None
    x = x / norm
    lead = x[np.argmax(np.abs(x) > 1e-6)]
    x = x if lead > 0 else -x
    return (cid, tuple(np.round(x, 7)))
