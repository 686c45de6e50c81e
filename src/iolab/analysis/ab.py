"""The verdict of an A/B study (`iolab ab`): A and B in randomised blocks, each block a fresh run of
each variant, judged across blocks.

The unit of evidence is the block: in block j, A and B ran one after the other in a random order,
each as a run of its own (new target set-up, new processes, new image or guest boot), so
whatever moves whole runs (page cache, thermal state, a neighbour, the image's place on disk)
moves both variants of a block alike or randomly. Per configuration and metric the block's
difference is d_j = mean(log B_j) - mean(log A_j) (the log of B/A of its geometric means); for an
event count (a metric declared in the `count` range: errors, retransmits) d_j = log((b_j + 1/2) /
(a_j + 1/2)) of the means per trial, so an error counter that goes from 0 to 383 is evidence, not
a block without a value (the half keeps zero finite; under "B is A" d_j is still symmetric).

* **Test: sign flips across blocks** (a permutation test for paired data; exact over all 2^J sign
  patterns up to EXACT_BLOCKS blocks, else MONTE_CARLO random ones). Under "B is A" the order in
  each block was a coin flip, so each d_j is as likely negative as positive.
* **A minimum effect**, as Firecracker's A/B runner (tools/ab_test.py: a permutation test and a
  relative strength): `regression` / `improvement` only when the data show a change *beyond*
  ±min_effect (the flips of d_j - log(1 + min_effect) and d_j + log(1 + min_effect)); `no
  difference` when they show it is *within* ±min_effect (both one-sided tests of the band's
  edges reject: an equivalence test); else `undecided`.
* **Family-wise control** over every configuration x metric (Holm, at ALPHA), and over the looks:
  the study looks after MIN blocks and every STEP blocks after to the budget, each look at
  ALPHA / looks (Bonferroni over the looks), and stops once every row is decided.
* The ratio's interval is the inversion of the same sign-flip test at the look's level.

Exit status for CI (the CLI): 1 when any row is a regression, 0 otherwise; undecided rows are
listed. Pure: result documents in, verdicts out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from iolab.analysis.stats import holm
from iolab.analysis.trials import by_config, label_text, workload_of
from iolab.core import metrics
from iolab.report.format import fmt_end

ALPHA = 0.05
EXACT_BLOCKS = 14
MONTE_CARLO = 20_000
MIN_BLOCKS = 8
MAX_BLOCKS = 20
STEP = 4
MIN_EFFECT = 0.05


@dataclass(frozen=True)
class Design:
    min_blocks: int = MIN_BLOCKS
    max_blocks: int = MAX_BLOCKS
    step: int = STEP
    min_effect: float = MIN_EFFECT
    alpha: float = ALPHA

    def __post_init__(self) -> None:
        if not 2 <= self.min_blocks <= self.max_blocks:
            raise ValueError(f"blocks: need 2 <= min ({self.min_blocks}) <= max ({self.max_blocks})")
        if self.step < 1:
            raise ValueError(f"step must be at least 1, got {self.step}")
        if not 0 < self.min_effect < 1:
            raise ValueError(f"min_effect must be a fraction between 0 and 1, got {self.min_effect}")

    @property
    def looks(self) -> list[int]:
        return sorted({*range(self.min_blocks, self.max_blocks + 1, self.step), self.max_blocks})

    @property
    def look_alpha(self) -> float:
        return self.alpha / len(self.looks)

    def smallest_p(self, blocks: int) -> float:
        """The smallest two-sided p the sign flips can give with `blocks` blocks."""
        return min(1.0, 2.0 / 2**blocks)


@dataclass
class Row:
    config: str
    metric: str
    unit: str
    direction: str
    d: list[float]  # per block: log(B / A)
    missing: int = 0  # blocks where A or B had no value of it
    ratio: float | None = None
    lo: float | None = None
    hi: float | None = None
    p_beyond: float | None = None
    p_within: float | None = None
    p_holm_beyond: float | None = None
    p_holm_within: float | None = None
    verdict: str = "undecided"
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@lru_cache(maxsize=64)
def _signs(j: int) -> np.ndarray:
    """(patterns, j) of +-1 / j: every pattern when j <= EXACT_BLOCKS, else MONTE_CARLO random ones
    (seeded; the observed pattern, all +1, included once)."""
    if j <= EXACT_BLOCKS:
        codes = np.arange(2**j)[:, None]
        s = 1 - 2 * ((codes >> np.arange(j)[None, :]) & 1)
    else:
        s = np.random.default_rng(j).choice(np.array([-1, 1]), size=(MONTE_CARLO, j))
        s[0] = 1
    return s.astype(float) / j


def _p_upper(d: np.ndarray, s: np.ndarray) -> float:
    """P(flipped mean >= observed mean): a one-sided sign-flip p (ties count)."""
    obs = float(d.mean())
    flipped = s @ d
    return float(np.mean(flipped >= obs - 1e-12 * (abs(obs) + 1e-300)))


def tests(d: Sequence[float], min_effect: float) -> tuple[float, float, float]:
    """(p_beyond, p_within, p_no_change) of the block differences d.
    p_beyond: two-sided p that |mu| > log(1 + min_effect) is shown (twice the smaller edge test);
    p_within: the equivalence test's p (the larger of the two edge tests toward the inside);
    p_no_change: the plain two-sided sign-flip p of mu = 0."""
    x = np.asarray(d, dtype=float)
    s = _signs(len(x))
    e = math.log1p(min_effect)
    up = _p_upper(x - e, s)  # B higher than the band
    down = _p_upper(-(x + e), s)  # B lower than the band
    beyond = min(1.0, 2 * min(up, down))
    within = max(_p_upper(-(x - e), s), _p_upper(x + e, s))
    plain = min(1.0, 2 * min(_p_upper(x, s), _p_upper(-x, s)))
    return beyond, within, plain


def interval(d: Sequence[float], level: float) -> tuple[float, float]:
    """The shifts mu (log scale) the two-sided sign-flip test at `level` does not reject."""
    x = np.asarray(d, dtype=float)
    s = _signs(len(x))

    def p(mu: float) -> float:
        y = x - mu
        return min(1.0, 2 * min(_p_upper(y, s), _p_upper(-y, s)))

    span = float(np.ptp(x)) + 1e-9 if len(x) > 1 else 1.0
    mid = float(np.median(x))

    def edge(lo_side: bool) -> float:
        inside, outside = mid, (mid - 2 * span if lo_side else mid + 2 * span)
        if p(outside) > level:
            return -math.inf if lo_side else math.inf
        for _ in range(40):
            m = (inside + outside) / 2
            if p(m) > level:
                inside = m
            else:
                outside = m
        return inside

    return edge(True), edge(False)


def rows_of(blocks: Sequence[Mapping[str, dict[str, Any]]], metric_names: Sequence[str] = ()) -> list[Row]:
    """Per configuration (matched by its labels) and metric with a declared direction, the block
    differences log(B/A) of the runs' geometric means."""
    per: dict[tuple[str, str], Row] = {}
    for blk in blocks:
        a, b = blk.get("A"), blk.get("B")
        if a is None or b is None:
            continue
        ga, gb = _by_label(a), _by_label(b)
        for label in sorted(set(ga) | set(gb)):
            ta, tb = ga.get(label, []), gb.get(label, [])
            sample = (ta or tb)[0]
            declared = metrics.for_workload(workload_of(sample))
            names = {m for t in ta + tb if t["status"] == "ok" for m in t["metrics"]}
            for m in sorted(names):
                decl = declared.get(m)
                if (metric_names and m not in metric_names) or decl is None or \
                        (decl.direction == "neither" and not metric_names):
                    continue
                row = per.setdefault((label, m), Row(label, m, decl.unit, decl.direction, []))
                level = _log_count if decl.estimand == "mean" else _log_mean
                la, lb = level(ta, m), level(tb, m)
                if la is None or lb is None:
                    row.missing += 1
                else:
                    row.d.append(lb - la)
    return [per[k] for k in sorted(per)]


def _by_label(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Trials by their configuration's axis labels ('' for a study of one configuration): the
    variants' configuration ids differ whenever B changes a key, their labels do not."""
    return {label_text(ts[0]): ts for ts in by_config(doc).values()}


def _log_mean(trials: list[dict[str, Any]], m: str) -> float | None:
    vals = [t["metrics"].get(m) for t in trials if t["status"] == "ok"]
    xs = [math.log(v) for v in vals if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    return float(np.mean(xs)) if xs else None


def _log_count(trials: list[dict[str, Any]], m: str) -> float | None:
    """An event count's level in one run: log(mean per trial + 1/2). Zeros are evidence (0 -> 383
    errors is a block where B is worse, never a missing one); the half keeps a run without events
    finite and makes two such runs a tie (d = 0)."""
    vals = [float(v) for t in trials if t["status"] == "ok"
            if isinstance(v := t["metrics"].get(m), (int, float)) and math.isfinite(v) and v >= 0]
    return math.log(float(np.mean(vals)) + 0.5) if vals else None


def judge(rows: list[Row], design: Design, final: bool, intervals: bool = True) -> list[Row]:
    """Verdicts at one look: Holm over the rows for 'beyond' and for 'within', each at the look's
    level. `final`: the budget is spent, so rows still open are 'undecided' with what would decide.
    `intervals`: also invert the test for each ratio's interval (the costly part; a look that only
    decides whether to go on can skip it)."""
    level = design.look_alpha
    e = math.log1p(design.min_effect)
    usable = [r for r in rows if len(r.d) >= 2]
    for r in usable:
        r.p_beyond, r.p_within, plain = tests(r.d, design.min_effect)
        mean = float(np.mean(r.d))
        lo, hi = interval(r.d, level) if intervals else (math.nan, math.nan)
        r.ratio, r.lo, r.hi = math.exp(mean), math.exp(lo), math.exp(hi)
        r.extra = {"p_no_change": plain, "blocks": len(r.d), "sd": float(np.std(r.d, ddof=1)) if len(r.d) > 1 else 0}
    hb = _holm_by_question(usable, [r.p_beyond for r in usable])
    hw = _holm_by_question(usable, [r.p_within for r in usable])
    for r, pb, pw in zip(usable, hb, hw, strict=True):
        r.p_holm_beyond, r.p_holm_within = pb, pw
        higher = (r.ratio or 1.0) > 1
        if pb <= level:
            better = higher == (r.direction == "higher")
            r.verdict = "improvement" if better else "regression"
            if r.direction == "neither":
                r.verdict = "change"
            r.reason = (f"B {'higher' if higher else 'lower'} by {abs((r.ratio or 1) - 1):.1%} over {len(r.d)} blocks, "
                        f"beyond ±{design.min_effect:.0%} (p = {pb:.2g} after Holm, level {level:.2g})")
        elif pw <= level:
            r.verdict = "no difference"
            r.reason = f"within ±{design.min_effect:.0%} over {len(r.d)} blocks (equivalence p = {pw:.2g} after Holm)"
        else:
            r.verdict = "undecided"
            sd = r.extra["sd"]
            gap = abs(abs(math.log(r.ratio or 1.0)) - e)
            need = _blocks_needed(sd, gap, level / max(len(usable), 1))
            hint = ""
            if final and need and need <= 10 * design.max_blocks:
                hint = f"; about {need} blocks would decide at this spread (--max-blocks)"
            elif final:
                hint = f"; B/A is too close to ±{design.min_effect:.0%} for any practical number of blocks"
            ends = ", ".join("?" if x is None else fmt_end(x, 3) for x in (r.lo, r.hi))
            r.reason = (f"B/A {r.ratio:.3f} [{ends}] over {len(r.d)} blocks: neither beyond nor "
                        f"within ±{design.min_effect:.0%} yet{hint}")
    for r in rows:
        if len(r.d) < 2:
            r.verdict, r.reason = "invalid", f"{len(r.d)} block(s) with values on both sides ({r.missing} without)"
    return rows


def _holm_by_question(rows: list[Row], ps: list[float | None]) -> list[float]:
    """Holm over the distinct questions: rows of one configuration whose block differences are the
    same numbers (IOPS and MiB/s at one block size: identical log ratios; a latency that is
    1/IOPS: the same with the sign turned) are one hypothesis (analysis/questions.py)."""
    keys: dict[tuple[Any, ...], list[int]] = {}
    for i, r in enumerate(rows):
        d = np.round(np.asarray(r.d, dtype=float), 9)
        lead = next((v for v in d if v != 0), 0.0)
        keys.setdefault((r.config, tuple(d if lead >= 0 else -d)), []).append(i)
    groups = list(keys.values())
    adjusted = holm([max((p for i in g if (p := ps[i]) is not None), default=math.nan) for g in groups])
    out = [math.nan] * len(rows)
    for g, p in zip(groups, adjusted, strict=True):
        for i in g:
            out[i] = p
    return out


def _blocks_needed(sd: float, gap: float, level: float) -> int | None:
    """Blocks at which a mean this far from the band's edge would be about 2.5 standard errors off
    it, and the sign flips could reach `level` (a guide for the user, not a promise)."""
    if gap <= 0:
        return None
    by_spread = math.ceil((2.5 * sd / gap) ** 2) if sd > 0 else 2
    by_flips = math.ceil(math.log2(2 / level))
    return max(by_spread, by_flips)


def decided(rows: Sequence[Row]) -> bool:
    return all(r.verdict not in ("undecided",) for r in rows)


def exit_status(rows: Sequence[Row]) -> int:
    """0: no regression; 1: a regression in some row."""
    return 1 if any(r.verdict == "regression" for r in rows) else 0
