"""Typed records of the results document: what an analysis finds, as values with a shape.

Findings used to be dictionaries built key by key, and the presentation read them back by
string (`r["factor_host_syncs"]`): a renamed key was a KeyError when a report was rendered.
Like pyperf's `Run`/`Benchmark` and hyperfine's export types, every part of a study's findings
is now a model: the analysis builds it, the presentation reads its attributes (a renamed field
is a mypy error), and it serialises to exactly the JSON docs/results.md documents.

Why pydantic models and not dataclasses: findings cross a JSON boundary in both directions.
`iolab report --format json` writes them, and they are read back from JSON (a reproduction's
children, the presentation handed a stored document's findings, the round-trip test); pydantic
parses and validates that JSON into the same types with no loader written by hand (pyperf
writes `_json_load` per class), and the project already uses pydantic v2 for every input.

* `Record`: the base of every model. `to_json()` is the contract's JSON (dict keys as strings,
  tuples as lists, NaN kept; as the dictionaries did, a field with a default only when it was
  given, and the fields named in `OMIT_NONE` only when not None); `from_json()` parses it back
  (`extra="forbid"`: a key the model does not know is an error, so the round trip cannot drop one
  silently); `coerce()` takes either.
* `Est`: an `analysis.stats.Estimate` inside a model, serialised as the estimate object of
  docs/results.md (`{mean, ci95, n, method, estimand, domain, ...}`, non-finite numbers as
  null). `Quantity` is an Estimate that also says its unit (and, for a metric, its direction),
  as the estimate objects that carry `unit` do.
* `Decided`: an `analysis.verdicts.Decision` inside a model (`{more_repetitions, configurations, config_ids}`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    PlainSerializer,
    PlainValidator,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from iolab.analysis.stats import Estimate
from iolab.analysis.verdicts import Decision

# A value read from a manifest or a sysfs file as it was stored: kept with its JSON type.
Scalar = str | int | float | bool | None
# A JSON object as parsed or about to be written (the results document, a findings' JSON view).
JSONObject = dict[str, Any]
# A number from stored data: an int stays an int (JSON 4, not 4.0), a float a float.
Number = int | float


@dataclass(frozen=True)
class Quantity(Estimate):
    """An Estimate of a quantity in a unit: the estimate objects of docs/results.md that carry
    `unit` (and, per metric in the generic findings, `direction`)."""

    unit: str | None = None
    direction: str | None = None

    @classmethod
    def of(cls, e: Estimate, unit: str | None, direction: str | None = None) -> Quantity:
        return cls(e.mean, e.lo, e.hi, e.n, e.sd, e.method, e.zeros, e.dropped, e.domain, e.estimand, e.checks,
                   unit, direction)


def estimate_json(e: Estimate) -> dict[str, object]:
    """The estimate object of docs/results.md (what Estimate.as_dict gives, with a Quantity's unit
    and direction)."""
    if not isinstance(e, Quantity):
        return e.as_dict()
    d: dict[str, object] = e.as_dict(e.unit)
    if e.direction is not None:
        d["direction"] = e.direction
    return d


_ESTIMATE_KEYS = frozenset({"mean", "ci95", "n", "method", "estimand", "domain", "unit", "direction", "checks",
                            "zeros", "dropped"})


def _float(x: object, missing: float) -> float:
    if x is None:
        return missing
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"an estimate's numbers are numbers or null, got {x!r}")
    return float(x)


def parse_estimate(v: object) -> Estimate:
    """An Estimate from its JSON object (or itself). null bounds of a finite estimate are open
    ends (-∞, ∞), as the reports show them; the spread (`sd`) is not in the JSON: NaN."""
    if isinstance(v, Estimate):
        return v
    if not isinstance(v, Mapping) or "mean" not in v:
        raise ValueError(f"an estimate is an object with mean and ci95, got {v!r}")
    extra = set(v) - _ESTIMATE_KEYS
    if extra:
        raise ValueError(f"an estimate has no key(s) {sorted(extra)}")
    mean = _float(v["mean"], math.nan)
    ci = v.get("ci95") or (None, None)
    if not isinstance(ci, (list, tuple)) or len(ci) != 2:
        raise ValueError(f"an estimate's ci95 is [lo, hi], got {ci!r}")
    lo, hi = (_float(ci[0], -math.inf), _float(ci[1], math.inf)) if math.isfinite(mean) else (math.nan, math.nan)
    n = v.get("n", 0)
    if not isinstance(n, int) or isinstance(n, bool):
        raise ValueError(f"an estimate's n is an integer, got {n!r}")
    base = Estimate(mean, lo, hi, n, math.nan, str(v.get("method", "t")), int(v.get("zeros", 0) or 0),
                    int(v.get("dropped", 0) or 0), str(v.get("domain", "real")), str(v.get("estimand", "mean")),
                    tuple(str(c) for c in v.get("checks") or ()))
    if "unit" in v or "direction" in v:
        unit, direction = v.get("unit"), v.get("direction")
        return Quantity.of(base, None if unit is None else str(unit), None if direction is None else str(direction))
    return base


Est = Annotated[Estimate, PlainValidator(parse_estimate), PlainSerializer(estimate_json)]


def _decision_json(d: Decision) -> dict[str, object]:
    return d.as_dict()


def _parse_decision(v: object) -> Decision:
    if isinstance(v, Decision):
        return v
    if not isinstance(v, Mapping) or not {"more_repetitions", "configurations"} <= set(v) \
            or not set(v) <= {"more_repetitions", "configurations", "config_ids"}:
        raise ValueError(f"a decision is {{more_repetitions, configurations[, config_ids]}}, got {v!r}")
    more = v["more_repetitions"]
    if more is not None and (not isinstance(more, int) or isinstance(more, bool)):
        raise ValueError(f"more_repetitions is an integer or null, got {more!r}")
    return Decision(more, tuple(str(c) for c in v["configurations"]),
                    tuple(str(c) for c in v.get("config_ids") or ()))


Decided = Annotated[Decision, PlainValidator(_parse_decision), PlainSerializer(_decision_json)]


class Record(BaseModel):
    """A typed part of the results document (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Fields the JSON leaves out while they are None (keys the dictionaries only set sometimes).
    OMIT_NONE: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _leave_out(self, handler: SerializerFunctionWrapHandler) -> Any:
        """As a dictionary would: a field with a default is in the JSON only when it was given (a
        null given stays null), and a field of OMIT_NONE only when it is not None."""
        d = handler(self)
        if not isinstance(d, dict):
            return d
        for k in set(self.model_fields) - self.__pydantic_fields_set__:
            d.pop(k, None)
        for k in self.OMIT_NONE:
            if k in d and d[k] is None:
                del d[k]
        return d

    def to_json(self) -> JSONObject:
        """The JSON object of docs/results.md (plain dicts, lists, numbers, strings)."""
        out: JSONObject = self.model_dump(mode="json")
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Self:
        """Parse the JSON object back; a key the model does not know, or a value of the wrong
        type, is a pydantic ValidationError (a ValueError)."""
        return cls.model_validate(data)

    @classmethod
    def coerce(cls, value: Self | Mapping[str, object]) -> Self:
        """`value` itself, or parsed from its JSON object (a stored document's findings)."""
        return value if isinstance(value, cls) else cls.from_json(value)  # type: ignore[arg-type]  # mypy cannot narrow Self | Mapping by isinstance(cls)

    # The contract view: record["key"] is what the JSON document holds under that key, for code
    # written against docs/results.md (its tests, a reader of JSON). Typed code reads attributes:
    # these answer `object`, so a use beyond comparing is a type error.
    def __getitem__(self, key: str) -> object:
        return self.to_json()[key]

    def __contains__(self, key: object) -> bool:
        return key in self.to_json()

    def get(self, key: str, default: object = None) -> object:
        return self.to_json().get(key, default)


class Stored(Record):
    """A record another part of iolab stored and the findings carry on (a study hook's gate, a
    workload's facts): the fields the analysis reads are declared and typed; its JSON is exactly
    what was stored, unknown keys included, a null kept and an absent key left absent."""

    model_config = ConfigDict(extra="allow", frozen=True)


def finite_or_none(x: float | None) -> float | None:
    """A number as the JSON has it: None when missing or not finite."""
    return None if x is None or not math.isfinite(x) else float(x)


def plotted(e: Estimate | None) -> tuple[float | None, float | None, float | None]:
    """(mean, lo, hi) of an estimate as a chart plots it (None: no point, or an open end)."""
    if e is None:
        return None, None, None
    return finite_or_none(e.mean), finite_or_none(e.lo), finite_or_none(e.hi)
