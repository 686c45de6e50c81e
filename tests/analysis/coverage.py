"""Simulated studies run through iolab's real stopping rule and real interval.

Each simulated study is one configuration: the runner's StopRule.wants_more (what
Runner._wants_more calls after every trial) decides after every repetition whether another
is needed, exactly as for a real run, and the study's interval is interval_batch at the
stopping point (what sequential_ci, i.e. every report, prints). Vectorised: one batch of
STUDIES studies per cell, one call per look.

Noise models (value = true level × (1 + drift) + CV × standardised noise):

* normal;
* lognormal σ = 0.5 (skewness 1.75: a few slow runs), right- and left-skewed;
* Student t with 3 d.o.f. (heavy tails: rare outliers);
* drift: normal noise on a level that rises linearly by DRIFT over max_repetitions trials.
  The true mean under drift is the mean of the expected values of the trials that ran: the
  quantity a run can estimate (this configuration on this machine during those trials).
  The level at the first trial is not knowable from the run, and interleaving gives every
  configuration the same drift in each round, so comparisons are not biased by it;
* harmonic: rates over a fixed amount of work (rate = 1 / time, time normal): the metric
  aggregates harmonically and the true value is 1 / E[time].

`python -m tests.analysis.coverage` prints the Markdown table kept in docs/statistics.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from iolab.analysis.calibration import draw_noise
from iolab.analysis.sequential import interval_batch
from iolab.runner.plan import StopRule

STUDIES = 20_000  # >= 10 000 per cell; 20 000 puts 94.5 % at 3 standard errors below 95 %
CI_TARGET = 0.05
DRIFT = 0.05
MODELS = ("normal", "lognormal", "lognormal-left", "t3", "drift", "harmonic")
# CV of the noise in units of ci_target; sqrt(3) is the hard case CV ≈ ci_target·√n at n = 3
CV_RATIOS = (0.1, 0.25, 0.5, 1.0, 3**0.5, 3.0)
DESIGNS = ((3, 10), (3, 5), (3, 3))


@dataclass(frozen=True)
class Cell:
    model: str
    design: tuple[int, int]
    cv_ratio: float
    coverage: float
    mean_reps: float
    stopped_early: float  # share of studies that stopped before max_repetitions

    def row(self) -> str:
        lo, hi = self.design
        return (f"| {self.model} | {lo}..{hi} | {self.cv_ratio:.2f} | {self.cv_ratio * CI_TARGET:.1%} | "
                f"{self.coverage:.2%} | {self.mean_reps:.2f} | {self.stopped_early:.0%} |")


def simulate(model: str, design: tuple[int, int], cv_ratio: float, seed: int = 1,
             studies: int = STUDIES) -> Cell:
    first, last = design
    rule = StopRule(first, last, CI_TARGET, "harmonic" if model == "harmonic" else "mean")
    rng = np.random.default_rng([seed, MODELS.index(model), first, last, int(cv_ratio * 1000)])
    cv = cv_ratio * CI_TARGET
    shape = {"lognormal-left": "lognormal", "drift": "normal", "harmonic": "normal"}.get(model, model)
    noise = draw_noise(shape, rng, (studies, last))
    if model == "lognormal-left":
        noise = -noise
    level = 1.0 + (DRIFT * np.arange(last) / max(last - 1, 1) if model == "drift" else np.zeros(last))
    if model == "harmonic":
        times = level + cv * noise
        values = 1.0 / np.maximum(times, 1e-9)
        truth = 1.0 / (np.cumsum(level) / np.arange(1, last + 1))  # 1 / E[time] of the trials run
    else:
        values = level + cv * noise
        truth = np.cumsum(level) / np.arange(1, last + 1)
    covered = np.zeros(studies, dtype=bool)
    reps = np.zeros(studies, dtype=int)
    running = np.arange(studies)
    for n in range(1, last + 1):
        more = np.asarray(rule.wants_more(values[running, :n]), dtype=bool)
        done = running[~more]
        if len(done):
            mean, lo, hi = interval_batch(values[done, :n], rule.design, rule.aggregate)
            covered[done] = (lo <= truth[n - 1]) & (truth[n - 1] <= hi)
            reps[done] = n
        running = running[more]
        if not len(running):
            break
    assert not len(running), "the stopping rule must stop every study by max_repetitions"
    return Cell(model, design, cv_ratio, float(covered.mean()), float(reps.mean()), float((reps < last).mean()))


def table(cells: list[Cell]) -> str:
    head = ("| noise | looks | CV / ci_target | CV | coverage of the 95 % interval | mean repetitions "
            "| stopped before the cap |\n|---|---|---|---|---|---|---|")
    return "\n".join([head] + [c.row() for c in cells])


def all_cells() -> list[Cell]:
    return [simulate(m, d, r) for d in DESIGNS for m in MODELS for r in CV_RATIOS]


if __name__ == "__main__":
    print(f"{STUDIES} simulated studies per row, ci_target = {CI_TARGET:.0%}\n")
    print(table(all_cells()))
