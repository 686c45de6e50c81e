"""Analysing a stored run, with the memoised intervals and projections (analysis/sequential.py:
`_sequential_ci`, `_projection_basis`, `_quantile_at`) against the same code with the memos
bypassed, side by side in one run. The work is what `iolab report` and `iolab reproduce` do with
a stored document: the study's own analysis and the reproduce page's claims, on the committed
vm-profile --quick run (tests/analysis/data), whose undecided verdicts each project their
intervals up to 30 repetitions ahead ("how many more would decide it"). The memos are emptied
before every document, so only the reuse within one analysis counts. Rounds alternate the order
of the two sides; a round's ratio is memoised / bypassed.

Last lines:
    analysis memoised seconds=<mean> [lo, hi] s n=<rounds>
    analysis bypassed seconds=...
    analysis ratio memoised/bypassed=<geometric mean> [lo, hi] n=<rounds>

    bench/run analysis [--docs N] [--max-rounds N] [--target 0.05] [--budget S]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from figures import Busy, add_round_arguments, print_side_by_side, ratio_figure, stop_on_signals, stopping, until_narrow

from iolab.analysis import sequential
from iolab.reproduce.claims import evaluate
from iolab.studies import builtin

STORED = Path(__file__).resolve().parent.parent / "tests" / "analysis" / "data" / "vm-profile-quick.json.gz"
MEMOS = ("_sequential_ci", "_projection_basis", "_quantile_at")
SIDES = ("memoised", "bypassed")


@contextlib.contextmanager
def memos(on: bool) -> Iterator[None]:
    """The memos as shipped (emptied), or the functions they wrap in their place."""
    kept = {name: getattr(sequential, name) for name in MEMOS}
    try:
        for name, memo in kept.items():
            memo.cache_clear()
            if not on:
                setattr(sequential, name, memo.__wrapped__)
        yield
    finally:
        for name, memo in kept.items():
            setattr(sequential, name, memo)


def analyse(doc: dict[str, Any], on: bool) -> tuple[float, Any]:
    """Seconds for the study's analysis and the reproduce claims of `doc`, and what they found."""
    with memos(on):
        t0 = time.perf_counter()
        findings = builtin.analysis_module("vm-profile").analyze(doc)
        claims = evaluate({"vm-profile": doc}, quick=True)
        return time.perf_counter() - t0, (findings, claims)


def main() -> None:
    stop_on_signals()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=20, help="analyses per side and round (default 20)")
    add_round_arguments(ap, max_rounds=20, target=0.05, budget=300)
    args = ap.parse_args()
    if args.max_rounds < 5 or not 1 <= args.docs <= 1000:
        ap.error("--max-rounds at least 5, --docs 1..1000")
    with gzip.open(STORED, "rt") as f:
        doc = json.load(f)
    same = [json.dumps(analyse(doc, on)[1], sort_keys=True, default=str) for on in (True, False)]
    if same[0] != same[1]:
        raise SystemExit("the memoised analysis found something else than the bypassed one")
    print(f"{STORED.name}: {len(doc['trials'])} trials; both sides find the same (findings and claims)", flush=True)
    times: dict[str, list[float]] = {s: [] for s in SIDES}
    ratios: list[float] = []
    busy = Busy()

    def round_(i: int) -> None:
        for side in (SIDES if i % 2 == 0 else SIDES[::-1]):
            busy.start()
            times[side].append(sum(analyse(doc, side == "memoised")[0] for _ in range(args.docs)))
            busy.stop()
        ratios.append(times["memoised"][-1] / times["bypassed"][-1])
        print(f"round {i + 1}: memoised {times['memoised'][-1]:.3f}s | bypassed {times['bypassed'][-1]:.3f}s "
              f"({args.docs} analyses each) | ratio {ratios[-1]:.3f} (machine busy {busy.shares[-1]:.0%})",
              flush=True)

    looks = stopping(args.max_rounds)
    fig = until_narrow(round_, lambda: ratio_figure("analysis ratio memoised/bypassed", ratios, args.target, looks),
                       max_n=args.max_rounds, budget_s=args.budget)
    print_side_by_side("analysis", [(s, s, times[s]) for s in SIDES], fig, busy, looks)


if __name__ == "__main__":
    main()
