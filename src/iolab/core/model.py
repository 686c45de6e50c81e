"""The nouns of a run: trials and their results. Plain data, no behaviour."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


def config_id(target: dict[str, Any], workload: dict[str, Any]) -> str:
    """Stable id of a configuration: the same spec gives the same ids (this is what resume keys on).

    The id is the hash of `json.dumps({"t": target, "w": workload}, sort_keys=True)`. A long
    string value (an imported job file's text, up to 1 MiB) is encoded once and spliced in,
    byte for byte what json.dumps writes: a 90 000-configuration axis over one job file must
    not encode the file 90 000 times."""
    long_values: dict[str, str] = {}

    def mark(value: Any) -> Any:
        if isinstance(value, str) and len(value) > _LONG:
            token = f"\x00iolab-long-{len(long_values)}\x00"
            long_values[json.dumps(token)] = _encoded(value)
            return token
        return value

    blob = json.dumps({"t": {k: mark(v) for k, v in target.items()}, "w": {k: mark(v) for k, v in workload.items()}},
                      sort_keys=True, default=str)
    for token, encoded in long_values.items():
        blob = blob.replace(token, encoded, 1)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


_LONG = 4096


@functools.lru_cache(maxsize=16)
def _encoded(value: str) -> str:
    return json.dumps(value)


@dataclass(frozen=True)
class Config:
    """One cell of the study matrix: a target config and a workload config, fully resolved."""

    target: dict[str, Any]
    workload: dict[str, Any]
    # The axis values that vary across the study (what reports group by), e.g. {"mode": "o_sync", "bs": 512}.
    labels: dict[str, Any] = field(default_factory=dict)

    @functools.cached_property
    def id(self) -> str:
        """Computed once: target and workload are never changed after the matrix is built."""
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
