"""The nouns of a run: trials and their results. Plain data, no behaviour."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


def config_id(target: dict[str, Any], workload: dict[str, Any]) -> str:
    """Stable id of a configuration: the same spec gives the same ids (this is what resume keys on)."""
    blob = json.dumps({"t": target, "w": workload}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Config:
    """One cell of the study matrix: a target config and a workload config, fully resolved."""

    target: dict[str, Any]
    workload: dict[str, Any]
    # The axis values that vary across the study (what reports group by), e.g. {"mode": "o_sync", "bs": 512}.
    labels: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return config_id(self.target, self.workload)


@dataclass(frozen=True)
class Trial:
    config: Config
    repetition: int

    @property
    def id(self) -> str:
        return f"{self.config.id}-r{self.repetition}"


def config_id_of_trial(trial_id: str) -> str:
    """The configuration id inside a trial id (`Trial.id`: '<config id>-r<repetition>')."""
    return str(trial_id).rsplit("-r", 1)[0]


@dataclass
class TrialResult:
    trial_id: str
    config_id: str
    repetition: int
    params: dict[str, Any]
    status: str  # "ok" | "failed"
    error: str | None
    metrics: dict[str, float]
    probes: dict[str, Any]
    manifest: dict[str, Any]
    flags: list[str] = field(default_factory=list)
    started: float = 0.0
    ended: float = 0.0
    traceback: str | None = None  # where an unexpected exception failed the trial
