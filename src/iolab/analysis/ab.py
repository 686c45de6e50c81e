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

* **Stalls are evidence.** A trial whose value is 0 (a stalled rate) is a value: in a block where
  either side has one, both sides' levels are the log of their arithmetic means, zeros included,
  each floored at STALL_FLOOR (1/1000) of the larger of the two, so B stalling in one of three
  trials is B/A 2/3 in that block, and a side whose every trial stalled is 1000 times worse there
  (d_j = -log 1000: as far as the floor lets a block go). The rule is chosen by the block's pooled
  values, the same for both sides, so under "B is A" d_j stays symmetric. Stalled trials are
  counted per side (`Row.stalled`).
* **Failures are evidence.** A side of a block with no successful trial of a configuration failed
  there (`Row.failed`, per side). Per configuration that failed anywhere, a row "failed blocks"
  tests which side failed over the blocks where exactly one did: under "B is A" that side is a coin
  flip, so B failing in k of n such blocks has the exact two-sided binomial p; that row is in the
  same Holm family, and is a regression (B fails more) or an improvement. A side whose load
  command ended before its run did is not a failure of the variant: it is set aside (`Row.invalid`).

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

Exit status for CI (`exit_status`): 1 when any row is a regression; else 4 when the study is
incomplete because of B (B failed or stalled where A did not and that row is undecided or invalid,
or a side was set aside because its load ended early); else 3 when nothing was measured on both
sides; else 0 (undecided rows are listed). Pure: result documents in, verdicts out.

Size: one Holm family is judged here, the metrics' rows and the failure rows together, with the
exit status that reads them; split, the family and its rules would live in two places.
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
STALL_FLOOR = 1e-3  # a block's level with stalls is floored at this share of the larger side's
FAILURES = "failed blocks"  # the metric name of a configuration's failure row


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
    kind: str = "level"  # "level": B/A of a metric; "failures": which side failed (metric FAILURES)
    failed: dict[str, int] = field(default_factory=lambda: {"A": 0, "B": 0})  # blocks without a successful trial
    stalled: dict[str, int] = field(default_factory=lambda: {"A": 0, "B": 0})  # trials with a value of 0
    invalid: dict[str, int] = field(default_factory=lambda: {"A": 0, "B": 0})  # blocks set aside (load ended early)


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
    differences log(B/A) (stalls included: `_levels`); per configuration that failed in some
    block, its row FAILURES. A side's document with "invalid" (its load ended early) is set aside."""
    per: dict[tuple[str, str], Row] = {}
    fails: dict[str, Row] = {}
    for blk in blocks:
        a, b = blk.get("A"), blk.get("B")
        if a is None or b is None:
            continue
        sides = {"A": a, "B": b}
        gs = {k: _by_label(doc) for k, doc in sides.items()}
        for label in sorted(set(gs["A"]) | set(gs["B"])):
            ts = {k: gs[k].get(label, []) for k in sides}
            sample = (ts["A"] or ts["B"])[0]
            declared = metrics.for_workload(workload_of(sample))
            set_aside = {k for k, doc in sides.items() if doc.get("invalid")}
            failed = {k for k in sides if k not in set_aside and not any(t["status"] == "ok" for t in ts[k])}
            _tally(fails, label, ts, failed, set_aside)
            names = {m for k in sides for t in ts[k] if t["status"] == "ok" for m in t["metrics"]}
            for m in sorted(names):
                decl = declared.get(m)
                if (metric_names and m not in metric_names) or decl is None or \
                        (decl.direction == "neither" and not metric_names):
                    continue
                row = per.setdefault((label, m), Row(label, m, decl.unit, decl.direction, []))
                for k in set_aside:
                    row.invalid[k] += 1
                for k in failed:
                    row.failed[k] += 1
                if set_aside or failed:
                    row.missing += 1
                    continue
                if decl.estimand == "mean":
                    la, lb = _log_count(ts["A"], m), _log_count(ts["B"], m)
                    d = None if la is None or lb is None else lb - la
                else:
                    d = _levels(ts["A"], ts["B"], m, row)
                if d is None:
                    row.missing += 1
                else:
                    row.d.append(d)
    return [per[k] for k in sorted(per)] + [fails[k] for k in sorted(fails) if sum(fails[k].failed.values())]


def _tally(fails: dict[str, Row], label: str, ts: dict[str, list[dict[str, Any]]], failed: set[str],
           set_aside: set[str]) -> None:
    """Count one block into its configuration's FAILURES row: blocks where each side failed, where
    only one did (`extra.only`), failed trials per side and each side's first error."""
    row = fails.setdefault(label, Row(label, FAILURES, "blocks", "lower", [], kind="failures", extra={
        "only": {"A": 0, "B": 0}, "failed_trials": {"A": 0, "B": 0}, "errors": {}, "blocks": 0}))
    if set_aside:
        for k in set_aside:
            row.invalid[k] += 1
        return
    row.extra["blocks"] += 1
    for k, trials in ts.items():
        bad = [t for t in trials if t["status"] != "ok"]
        row.extra["failed_trials"][k] += len(bad)
        if bad and k not in row.extra["errors"]:
            err = str(bad[0].get("error") or "").strip()
            row.extra["errors"][k] = err.splitlines()[0][:120] if err else str(bad[0]["status"])
    for k in failed:
        row.failed[k] += 1
    if len(failed) == 1:
        row.extra["only"][next(iter(failed))] += 1


def _by_label(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Trials by their configuration's axis labels ('' for a study of one configuration): the
    variants' configuration ids differ whenever B changes a key, their labels do not."""
    return {label_text(ts[0]): ts for ts in by_config(doc).values()}


def _values(trials: list[dict[str, Any]], m: str) -> list[float]:
    return [float(v) for t in trials if t["status"] == "ok"
            if isinstance(v := t["metrics"].get(m), (int, float)) and math.isfinite(v) and v >= 0]


def _levels(ta: list[dict[str, Any]], tb: list[dict[str, Any]], m: str, row: Row) -> float | None:
    """d_j of a rate or time: log(B/A) of the geometric means; in a block where a side has a value
    of 0 (a stall), of the arithmetic means, zeros included, each floored at STALL_FLOOR of the
    larger (both sides all 0: a tie). Counts the stalled trials into `row.stalled`."""
    va, vb = _values(ta, m), _values(tb, m)
    if not va or not vb:
        return None
    row.stalled["A"] += va.count(0.0)
    row.stalled["B"] += vb.count(0.0)
    if 0.0 not in va and 0.0 not in vb:
        return float(np.mean(np.log(vb)) - np.mean(np.log(va)))
    ma, mb = float(np.mean(va)), float(np.mean(vb))
    if ma == mb == 0:
        return 0.0
    floor = STALL_FLOOR * max(ma, mb)
    return math.log(max(mb, floor)) - math.log(max(ma, floor))


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
    usable = [r for r in rows if r.kind == "level" and len(r.d) >= 2]
    failing = [r for r in rows if r.kind == "failures" and sum(r.extra["only"].values())]
    for r in usable:
        r.p_beyond, r.p_within, plain = tests(r.d, design.min_effect)
        mean = float(np.mean(r.d))
        lo, hi = interval(r.d, level) if intervals else (math.nan, math.nan)
        r.ratio, r.lo, r.hi = math.exp(mean), math.exp(lo), math.exp(hi)
        r.extra = {"p_no_change": plain, "blocks": len(r.d), "sd": float(np.std(r.d, ddof=1)) if len(r.d) > 1 else 0}
    for r in failing:
        r.p_beyond = sign_test(r.extra["only"]["B"], r.extra["only"]["A"])
    hb = _holm_by_question(usable + failing, [r.p_beyond for r in usable + failing])
    hw = _holm_by_question(usable, [r.p_within for r in usable])
    for r, pb in zip(failing, hb[len(usable):], strict=True):
        _judge_failures(r, pb, level)
    for r, pb, pw in zip(usable, hb[:len(usable)], hw, strict=True):
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
        if r.kind == "level" and len(r.d) < 2:
            r.verdict, r.reason = "invalid", f"{len(r.d)} block(s) with values on both sides ({r.missing} without)"
        elif r.kind == "failures" and all(r is not f for f in failing):
            r.verdict = "no difference"
            r.reason = (f"A and B failed in the same {r.failed['A']} block(s) of {r.extra['blocks']}: no block where "
                        f"only one side failed ({_failed_trials(r)})")
        if r.kind == "level":
            r.reason += side_notes(r)
    return rows


def sign_test(b_only: int, a_only: int) -> float:
    """The exact two-sided binomial p of B failing in b_only of the b_only + a_only blocks where one
    side failed, under "B is A" (each such block's failing side a fair coin)."""
    n = b_only + a_only
    tail = sum(math.comb(n, i) for i in range(max(b_only, a_only), n + 1)) / 2**n
    return min(1.0, 2 * tail)


def _judge_failures(r: Row, p: float, level: float) -> None:
    only = r.extra["only"]
    r.p_holm_beyond = p
    worse = "B" if only["B"] > only["A"] else "A"
    if p <= level:
        r.verdict = "regression" if worse == "B" else "improvement"
    else:
        r.verdict = "undecided"
    r.reason = (f"B failed in {r.failed['B']} of {r.extra['blocks']} block(s), A in {r.failed['A']}; only B in "
                f"{only['B']}, only A in {only['A']} (exact sign test p = {r.p_beyond:.2g}, {p:.2g} after Holm, "
                f"level {level:.2g}; {_failed_trials(r)})")


def _failed_trials(r: Row) -> str:
    ft, errors = r.extra["failed_trials"], r.extra["errors"]
    return "; ".join(f"{k}: {ft[k]} failed trial(s)" + (f", first: {errors[k]}" if k in errors else "") for k in "AB")


def side_notes(r: Row) -> str:
    """What a level row's blocks lost or carried: stalled trials, failed and set-aside blocks, per side."""
    parts = [f"{what} {k} {n[k]}" for what, n in (("stalled trials:", r.stalled), ("blocks failed:", r.failed),
                                                  ("blocks set aside (load ended early):", r.invalid))
             for k in "AB" if n[k]]
    return f" [{', '.join(parts)}]" if parts else ""


def _holm_by_question(rows: list[Row], ps: list[float | None]) -> list[float]:
    """Holm over the distinct questions: rows of one configuration whose block differences are the
    same numbers (IOPS and MiB/s at one block size: identical log ratios; a latency that is
    1/IOPS: the same with the sign turned) are one hypothesis (analysis/questions.py)."""
    keys: dict[tuple[Any, ...], list[int]] = {}
    for i, r in enumerate(rows):
        if r.kind == "failures":
            keys[(r.config, FAILURES)] = [i]
            continue
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
    """1: a regression in some row; 4: none, but `incomplete`; 3: nothing measured on both sides;
    0: no regression."""
    if any(r.verdict == "regression" for r in rows):
        return 1
    if incomplete(rows):
        return 4
    if not any(r.kind == "level" and r.verdict != "invalid" for r in rows):
        return 3
    return 0


def incomplete(rows: Sequence[Row]) -> list[str]:
    """Why no regression is not a pass: B failed in blocks where A did not and its row is undecided;
    a row undecided or invalid whose B side stalled; sides set aside because their load ended early."""
    out = [f"{r.config or '(single)'}: B failed in {r.extra['only']['B']} block(s) where A did not, too few to "
           "call it a regression" for r in rows
           if r.kind == "failures" and r.verdict == "undecided" and r.extra["only"]["B"]]
    out += [f"{r.config or '(single)'} {r.metric}: {r.verdict} with {r.stalled['B']} stalled trial(s) of B"
            for r in rows if r.kind == "level" and r.verdict in ("undecided", "invalid") and r.stalled["B"]]
    aside = {k: max((r.invalid[k] for r in rows), default=0) for k in "AB"}
    out += [f"{k}'s load command ended before its run in {n} block(s): those runs were set aside"
            for k, n in aside.items() if n]
    return out
