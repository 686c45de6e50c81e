"""Ordering trials: group by shared target, interleave configurations within a group.

Interleaving (A B B A ...) keeps slow drift of the machine from looking like a difference
between configurations. Groups share one target setup (one loop device, one guest boot),
because setting a target up per trial would cost more than the trial.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from iolab.core.model import Config
from iolab.studies.spec import StudySpec


@dataclass
class TargetGroup:
    target: dict
    configs: list[Config]


def target_groups(spec: StudySpec) -> list[TargetGroup]:
    groups: dict[str, TargetGroup] = {}
    for c in spec.configs:
        key = repr(sorted(c.target.items()))
        groups.setdefault(key, TargetGroup(c.target, [])).configs.append(c)
    return list(groups.values())


def round_order(configs: list[Config], round_no: int, interleaved: bool) -> list[Config]:
    """Forward on even rounds, backward on odd ones (A B | B A); sequential keeps spec order."""
    if not interleaved:
        return list(configs)
    return list(configs) if round_no % 2 == 0 else list(reversed(configs))


def needs_more(values: list[float], min_reps: int, max_reps: int, attempts: int, ci_target: float) -> bool:
    """Adaptive stopping on the 95% CI half-width of the main metric, relative to its mean."""
    from iolab.analysis.stats import mean_ci

    if attempts >= max_reps:
        return False
    if len(values) < min_reps:
        return True
    est = mean_ci(values)
    return not (math.isfinite(est.rel_half_width) and est.rel_half_width <= ci_target)
