"""R5's CPU test: single-threaded time to find all primes below 10^6, 10^7 and 10^8.

The native helper iolab_primes runs one odd-only bit sieve of Eratosthenes per limit, in one
process, and times each with CLOCK_MONOTONIC. Every count is checked against the known
prime-counting values (pi(10^6) = 78498, ...): a wrong count is a broken build or a broken
machine, never a result, so the trial fails.
"""

from __future__ import annotations

import json
import shlex
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from iolab.core.errors import TrialFailed
from iolab.core.exec import ExecRequest, ExecResult
from iolab.core.metrics import Metric
from iolab.native import helper_for, helper_stdout
from iolab.targets.base import Needs, Placement
from iolab.workloads.base import Workload, WorkloadParams, WorkloadResult
from iolab.workloads.sysbench_cpu import contention_flags

HELPER = "iolab_primes"
MAX_LIMIT = 10**10  # the helper's bound too: 625 MB of bits
# pi(10^k): the number of primes below 10^k (10^k itself is never prime).
KNOWN_PI: dict[int, int] = {
    10: 4, 10**2: 25, 10**3: 168, 10**4: 1229, 10**5: 9592, 10**6: 78498, 10**7: 664579,
    10**8: 5761455, 10**9: 50847534,
}


def limit_label(limit: int) -> str:
    """10^k -> '1e{k}'; other limits: mantissa 'e' exponent with trailing zeros taken out
    (2500000 -> '25e5'), or the plain number when it has none (1234 -> '1234')."""
    m, k = limit, 0
    while m % 10 == 0:
        m //= 10
        k += 1
    return f"{m}e{k}" if k else str(m)


def metric_name(limit: int) -> str:
    return f"primes_{limit_label(limit)}_s"


class PrimesParams(WorkloadParams):
    """limits: count the primes below each (one process, one sieve per limit, in order)."""

    kind: Literal["primes"] = "primes"
    limits: list[int] = Field(default_factory=lambda: [10**6, 10**7, 10**8],
                              description="count the primes below each; 2..10^10")

    @field_validator("limits", mode="before")
    @classmethod
    def _limits(cls, v: Any) -> Any:
        if not isinstance(v, list) or not v:
            raise ValueError(f"limits must be a non-empty list of integers, got {v!r}")
        if len(v) > 64:
            raise ValueError(f"at most 64 limits, got {len(v)}")
        for x in v:
            if isinstance(x, bool) or not isinstance(x, int) or not 2 <= x <= MAX_LIMIT:
                raise ValueError(f"every limit must be an integer from 2 to 10^10, got {x!r}")
        if len(set(v)) != len(v):
            raise ValueError(f"limits must not repeat, got {v!r}")
        return v


class PrimesWorkload(Workload):
    """Runs iolab_primes once per trial with all limits; one metric per limit in seconds."""

    kind: ClassVar[str] = "primes"
    Params: ClassVar[type[WorkloadParams]] = PrimesParams
    main_metric = "primes_1e8_s"
    # One metric per limit (metric_name): 'primes_1e8_s', 'primes_25e5_s', 'primes_1234_s'.
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("primes_{limit:label}_s", "s", "lower", "seconds to count the primes below one limit (sieve)"),
    )
    params: PrimesParams

    def __init__(self, params: WorkloadParams):
        super().__init__(params)
        limits = self.params.limits
        # adaptive stopping watches 10^8 (R5's largest) if asked for, else the largest limit
        self.main_metric = metric_name(10**8 if 10**8 in limits else max(limits))

    @classmethod
    def needs(cls, workload: dict[str, Any]) -> Needs:
        """CPU only: its C helper counts primes."""
        return Needs(apps=frozenset({HELPER}))

    def estimate_seconds(self) -> float:
        # ~1 ns per number while the bit array fits the cache, ~3 ns beyond (10^9: 62 MB)
        return 0.5 + sum(x * (1e-9 if x <= 10**8 else 3e-9) for x in self.params.limits)

    def command(self, helper: str) -> list[str]:
        return [helper, *(str(x) for x in self.params.limits)]

    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        argv = self.command(helper_for(HELPER, placement))
        res = placement.executor.run(ExecRequest(argv=argv, timeout_s=timeout_s))
        raw = parse(res, timeout_s, self.params.limits)
        return WorkloadResult(metrics=metrics_of(raw), raw=raw, job_text=shlex.join(argv),
                              flags=contention_flags(res, 1), cpu_busy=res.cpu_busy)

    def describe(self) -> list[str]:
        return ["workload primes: count the primes below " + ", ".join(
            limit_label(x) for x in self.params.limits) + " (iolab_primes: odd-only bit sieve, "
                "single-threaded, each limit timed, counts checked)"]


def parse(res: ExecResult, timeout_s: float, limits: list[int]) -> dict[str, Any]:
    """The helper's JSON with every count checked; TrialFailed with the reason otherwise."""
    text = helper_stdout(res, HELPER, timeout_s)
    try:
        raw = json.loads(text)
        results = raw["results"]
        got = [int(r["limit"]) for r in results]
        for r in results:
            float(r["seconds"]), int(r["count"])
    except (ValueError, KeyError, TypeError) as e:
        raise TrialFailed(f"{HELPER} printed no valid JSON ({e}): {res.stdout[-400:]!r}") from e
    if got != list(limits):
        raise TrialFailed(f"{HELPER} reported limits {got}, asked for {list(limits)}")
    wrong = [f"below {r['limit']}: {r['count']} (expected {KNOWN_PI[r['limit']]})"
             for r in results if r["limit"] in KNOWN_PI and r["count"] != KNOWN_PI[r["limit"]]]
    if wrong:
        raise TrialFailed(f"{HELPER} counted wrong: " + "; ".join(wrong))
    for r in results:  # a limit with no known count is only reported
        r["verified"] = r["limit"] in KNOWN_PI
    return raw


def metrics_of(raw: dict[str, Any]) -> dict[str, float]:
    return {metric_name(int(r["limit"])): float(r["seconds"]) for r in raw["results"]}
