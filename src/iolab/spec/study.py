"""Study specs: TOML in, a validated matrix of configurations out.

A spec has a [study] table, one or more targets and one or more workloads. Any list value
in a target or workload table is an axis: the matrix is the product of all of them, except
that a workload table may name the targets it runs on (`targets = ["dev", "host"]`), for a
study whose rows need different tools on different targets (virtio: fio and qemu-img on
host devices, iozone on the host and in guests).
Everything is validated before anything runs; errors name the file, the key and what
was expected, and nothing is created.

Hostile input is an input error like any other: the file is read with a size cap and only
if it is a regular file (core.inputs); nesting, strings (NUL, control characters, length),
non-finite numbers and booleans given for numbers are refused by key before any model
sees them; the number of configurations is computed from the axis lengths and refused
above MAX_CONFIGS before the matrix is expanded. The probes a spec names (study.probes, or
a workload's own `probes`, which replaces the study's for that workload's trials) must exist.

Size: one contract, read as one: every way a document can be wrong, each reported by its key
path, before the matrix exists. Split by table, the checks that cross tables (a workload's
targets, the metric every workload must declare, the matrix size) would have no home.
"""

from __future__ import annotations

import itertools
import math
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from iolab.core import metrics, registry
from iolab.core.errors import SpecError
from iolab.core.inputs import parse_user_toml, read_user_text
from iolab.core.model import Config
from iolab.core.units import positive_duration
from iolab.probes.registry import probe_classes
from iolab.spec import fio_import
from iolab.targets.offer import Needs, TargetOffer, refusal


class StudySettings(BaseModel):
    """The [study] table."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    description: str = ""
    repetitions: int = Field(3, ge=1, le=1000, description="repetitions per configuration, at least")
    max_repetitions: int = Field(10, ge=1, le=1000, description="cap for adaptive stopping")
    ci_target: float = Field(0.05, gt=0, lt=1,
                             description="stop when the 95% interval half-width / estimate is below this")
    metric: str | None = Field(None, description="the metric adaptive stopping watches")
    trial_timeout: float | None = Field(None, description="seconds; default 3x the estimate + 60 s")
    budget: float | None = Field(None, description="seconds of wall time for the whole run: the minimum first (always "
                                                   "whole), then repetitions where a verdict is still open "
                                                   "(docs/statistics.md)")
    budget_on: Literal["verdicts", "verdicts+intervals"] = Field(
        "verdicts+intervals", description="what a budget spends on after the minimum: open verdicts only, or then "
                                          "also intervals wider than ci_target")
    analysis: str = "generic"
    order: Literal["interleaved", "sequential"] = "interleaved"
    probes: list[str] = Field(default_factory=list, description="extra, costly probes to run (e.g. qemu_syscalls)")
    workload_session: Literal["own", "shared"] = Field(
        "own", description="own: each host workload in a session (autogroup) of its own; shared: in iolab's")

    @field_validator("trial_timeout", "budget", mode="before")
    @classmethod
    def _duration(cls, v: Any, info: ValidationInfo) -> Any:
        return positive_duration(v, str(info.field_name))


@dataclass
class StudySpec:
    """A validated study: everything the planner and runner need, nothing else."""

    settings: StudySettings
    configs: list[Config]
    source: str
    raw: dict[str, Any]  # the document as given, kept in the store so a run can be resumed
    options: dict[str, Any] = field(default_factory=dict)  # built-in study options (quick, ...)

    @property
    def name(self) -> str:
        return self.settings.name


TOP_KEYS = {"study", "target", "targets", "workload", "workloads"}
MAX_CONFIGS = 100_000   # configurations in one study; more is refused before the matrix is built
MAX_DEPTH = 8           # nesting of tables and arrays (a real spec needs 4)
MAX_STRING = 4096       # characters in a string value or key (PATH_MAX)
TEXT_KEYS = {"description", "job_text"}  # the only strings that may hold newlines and tabs


def load_spec_file(path: Path) -> StudySpec:
    """A spec from a TOML file, or an fio job file imported as a study."""
    source = str(path)
    text = read_user_text(path)
    if path.suffix in (".fio", ".job"):
        return from_dict(fio_import.spec_from_jobfile(path, text), source)
    doc = parse_user_toml(text, source)
    return from_dict(doc, source)


def from_dict(doc: dict[str, Any], source: str, options: dict[str, Any] | None = None) -> StudySpec:
    problems: list[tuple[str, str]] = []
    if not isinstance(doc, dict):
        raise SpecError(source, [("(document)", "expected a table of [study], [target] and [workload]")])
    _check_values(doc, "", 0, problems)
    if problems:
        raise SpecError(source, _dedupe(problems))
    for key in doc:
        if key not in TOP_KEYS:
            problems.append((key, f"unknown key; expected one of {', '.join(sorted(TOP_KEYS))}"))
    settings = _settings(doc, problems)
    targets = _tables(doc, "target", "targets", problems)
    workloads = _tables(doc, "workload", "workloads", problems)
    configs: list[Config] = []
    if not problems:
        configs = _matrix(targets, workloads, problems)
    if settings and settings.max_repetitions < settings.repetitions:
        problems.append(("study.max_repetitions", f"must be >= study.repetitions ({settings.repetitions})"))
    if settings and settings.metric and configs and not problems:
        _check_metric(settings.metric, configs, problems)
    if settings and not problems:
        _check_probes(settings, workloads, problems)
    if problems:
        raise SpecError(source, _dedupe(problems))
    assert settings is not None
    return StudySpec(settings=settings, configs=configs, source=source, raw=doc, options=options or {})


def _check_values(value: Any, path: str, depth: int, problems: list[tuple[str, str]]) -> None:
    """Refuse, by key, what no model should see: deep nesting, NUL and control characters,
    over-long strings, infinite or NaN numbers."""
    where = path or "(document)"
    if depth > MAX_DEPTH:
        problems.append((where, f"nested more than {MAX_DEPTH} levels deep"))
        return
    if isinstance(value, dict):
        for k, v in value.items():
            sub = f"{path}.{k}" if path else str(k)
            if not isinstance(k, str) or len(k) > 128 or _control(k, multiline=False):
                problems.append((sub[:200], "a key must be a short string without control characters"))
                continue
            _check_values(v, sub, depth + 1, problems)
    elif isinstance(value, list):
        if len(value) > MAX_CONFIGS:
            problems.append((where, f"a list of {len(value)} values; at most {MAX_CONFIGS}"))
            return
        for i, v in enumerate(value):
            _check_values(v, f"{where}[{i}]", depth + 1, problems)
    elif isinstance(value, str):
        key = path.rsplit(".", 1)[-1].split("[", 1)[0]
        limit = (1 << 20) if key == "job_text" else MAX_STRING
        if len(value) > limit:
            problems.append((where, f"a string of {len(value)} characters; at most {limit}"))
        elif key == "job_text":
            pass  # the job-file sandbox checks every byte and names the line
        elif "\0" in value:
            problems.append((where, "contains a NUL character"))
        elif _control(value, multiline=key in TEXT_KEYS):
            problems.append((where, "contains control characters (newlines only in description and job_text)"))
    elif isinstance(value, float) and not math.isfinite(value):
        problems.append((where, f"expected a finite number, got {value}"))


def _control(text: str, multiline: bool) -> bool:
    allowed = "\n\t\r" if multiline else ""
    return any((ord(c) < 0x20 and c not in allowed) or ord(c) == 0x7F for c in text)


def _bool_problems(model: type[BaseModel], table: dict[str, Any], prefix: str) -> list[tuple[str, str]]:
    """true/false given for a number: pydantic would read it as 1/0."""
    out = []
    for key, value in table.items():
        f = model.model_fields.get(key)
        if isinstance(value, bool) and f is not None and not _accepts_bool(f.annotation):
            out.append((f"{prefix}.{key}", f"expected {_type_name(f.annotation)}, got {str(value).lower()}"))
    return out


def _accepts_bool(annotation: Any) -> bool:
    if annotation is bool or annotation is Any:
        return True
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Literal:
        return any(isinstance(a, bool) for a in args)
    return any(_accepts_bool(a) for a in args) if args else False


def _type_name(annotation: Any) -> str:
    if annotation in (int, float) or int in typing.get_args(annotation) or float in typing.get_args(annotation):
        return "a number"
    return "a value of another type"


def _settings(doc: dict[str, Any], problems: list[tuple[str, str]]) -> StudySettings | None:
    table = doc.get("study")
    if not isinstance(table, dict):
        problems.append(("study", "missing [study] table (with at least name = \"...\")"))
        return None
    bools = _bool_problems(StudySettings, table, "study")
    if bools:
        problems.extend(bools)
        return None
    try:
        return StudySettings(**table)
    except ValidationError as exc:
        problems.extend(_pydantic_problems("study", exc))
        return None


def _tables(doc: dict[str, Any], one: str, many: str, problems: list[tuple[str, str]]) -> list[tuple[str, dict]]:
    """[target] or [[targets]] -> [(key path, table)]."""
    if one in doc and many in doc:
        problems.append((many, f"give either [{one}] or [[{many}]], not both"))
        return []
    if one in doc:
        if not isinstance(doc[one], dict):
            problems.append((one, "expected a table"))
            return []
        return [(one, doc[one])]
    if many in doc:
        items = doc[many]
        if not isinstance(items, list) or not items or not all(isinstance(t, dict) for t in items):
            problems.append((many, "expected a non-empty array of tables ([[" + many + "]])"))
            return []
        return [(f"{many}[{i}]", t) for i, t in enumerate(items)]
    problems.append((one, f"missing [{one}] table"))
    return []


def _matrix(targets: list[tuple[str, dict]], workloads: list[tuple[str, dict]],
            problems: list[tuple[str, str]]) -> list[Config]:
    t_plans = [_plan(path, t, registry.TARGETS, registry.target_class, problems) for path, t in targets]
    w_plans = [_plan(path, w, registry.WORKLOADS, registry.workload_class, problems) for path, w in workloads]
    # a table that failed to plan counts as one cell: the other side is still checked, not expanded blindly
    count = max(sum(_cells(p) for p in t_plans), 1) * max(sum(_cells(p) for p in w_plans), 1)
    if count > MAX_CONFIGS:
        problems.append(("(matrix)", f"{count} configurations (the product of the axis lengths); iolab runs at most "
                                     f"{MAX_CONFIGS} in one study: remove axis values"))
        return []
    t_cells = [c for p in t_plans for c in _expand(p, problems)]
    w_cells = [c for p in w_plans for c in _expand(p, problems)]
    _check_target_names(w_plans, {p.name for p in t_plans if p}, problems)
    if problems:
        return []
    on = {p.path: p.on_targets for p in w_plans if p}
    offers = [_offer(t_path, t_params, problems) for _, t_params, _, t_path in t_cells]
    classes = {p.cls.Params.model_fields["kind"].default: p.cls for p in w_plans if p}
    needs = [classes[w_params["kind"]].needs(w_params) for _, w_params, _, _ in w_cells]
    decided: dict[tuple[int, tuple[Any, ...]], str | None] = {}  # cells with equal needs are decided once
    configs = []
    for (ti, ((t_name, t_params, t_axes, _), offer)), ((w_name, w_params, w_axes, w_path), need) in itertools.product(
            enumerate(zip(t_cells, offers, strict=True)), zip(w_cells, needs, strict=True)):
        only = on[w_path]
        if only is not None and t_name not in only:
            continue
        if offer is not None:
            key = (ti, _signature(need))
            why = decided[key] if key in decided else refusal(need, offer)
            if need.check is None:
                decided[key] = why
            if why:
                _refuse(w_path, w_name, w_params["kind"], t_name, offer, why, problems)
        labels: dict[str, Any] = {}
        if len(targets) > 1:
            labels["target"] = t_name
        if len(workloads) > 1:
            labels["workload"] = w_name
        labels.update({k: t_params[k] for k in t_axes})
        labels.update({k: w_params[k] for k in w_axes})
        configs.append(Config(target=t_params, workload=w_params, labels=labels))
    if len({c.id for c in configs}) != len(configs):
        problems.append(("(matrix)", "two configurations are identical; remove the duplicate axis value"))
    return configs


@dataclass
class _Plan:
    """One target or workload table, split into fixed keys and axes (not yet expanded).
    on_targets: the target names a workload table runs on (its `targets` key), None for all."""

    path: str
    name: str
    cls: Any
    fixed: dict[str, Any]
    axes: dict[str, list[Any]]
    on_targets: list[str] | None = None


def _plan(path: str, table: dict, kinds: dict[str, str], load: Any, problems: list[tuple[str, str]]) -> _Plan | None:
    table = dict(table)
    name = table.pop("name", "")
    if not isinstance(name, str):
        problems.append((f"{path}.name", f"expected a string, got {name!r:.80}"))
        return None
    on_targets = None
    if kinds is registry.WORKLOADS and "targets" in table:
        on_targets = table.pop("targets")
        if not isinstance(on_targets, list) or not on_targets or not all(isinstance(n, str) for n in on_targets):
            problems.append((f"{path}.targets", f"expected a non-empty list of target names, got {on_targets!r:.80}"))
            return None
    kind = table.get("kind")
    if not isinstance(kind, str) or kind not in kinds:
        problems.append((f"{path}.kind", f"expected one of {', '.join(sorted(kinds))}, got {kind!r:.80}"))
        return None
    cls = load(kind)
    unknown = [k for k in table if k not in cls.Params.model_fields]
    if unknown:  # refused once, not once per combination of the axes
        problems.extend((f"{path}.{k}", "unknown key") for k in unknown)
        return None
    axes = {k: v for k, v in table.items() if isinstance(v, list) and not _is_list_field(cls.Params, k)}
    for k, v in axes.items():
        if not v:
            problems.append((f"{path}.{k}", "an axis needs at least one value"))
            return None
    fixed = {k: v for k, v in table.items() if k not in axes}
    return _Plan(path, name or kind, cls, fixed, axes, on_targets)


def _check_target_names(w_plans: list[_Plan | None], names: set[str], problems: list[tuple[str, str]]) -> None:
    """Every name in a workload's `targets` must be a target of the spec (its `name`, or its kind)."""
    for p in w_plans:
        if p is None:
            continue
        for n in p.on_targets or []:
            if n not in names:
                problems.append((f"{p.path}.targets", f"no target named {n!r:.80}; the targets are "
                                                      f"{', '.join(sorted(names)) or '(none valid)'}"))


def _cells(plan: _Plan | None) -> int:
    return math.prod(len(v) for v in plan.axes.values()) if plan else 0


def _offer(path: str, target: dict[str, Any], problems: list[tuple[str, str]]) -> TargetOffer | None:
    """What one target cell offers (targets/offer.py), computed before anything exists."""
    cls = registry.target_class(target["kind"])
    try:
        offer: TargetOffer = cls.offer(cls.Params(**target))
        return offer
    except (ValueError, OSError) as exc:
        problems.append((path, f"cannot tell what this target offers: {exc}"))
        return None


def _signature(needs: Needs) -> tuple[Any, ...]:
    return (needs.where, needs.storage, needs.capacity, needs.inodes, needs.memory, needs.apps, needs.capabilities,
            tuple(sorted(needs.why.items())), id(needs.check) if needs.check else None)


def _refuse(path: str, w_name: str, kind: str, t_name: str, offer: TargetOffer, why: str,
            problems: list[tuple[str, str]]) -> None:
    """A pair the workload's needs and the target's offer rule out (targets/offer.py), naming both and why."""
    who = kind if w_name == kind else f"{w_name!r} ({kind})"
    where = (f"{offer.kind} ({offer.settings})" if t_name == offer.kind
             else f"{t_name!r} ({offer.kind}: {offer.settings})")
    problems.append((path, f"workload {who} cannot run on target {where}: {why}"))


def _expand(plan: _Plan | None, problems: list[tuple[str, str]]) -> list[tuple[str, dict, list[str], str]]:
    """One planned table -> (name, validated params, axis keys, key path), one per combination."""
    if plan is None:
        return []
    out = []
    for combo in itertools.product(*plan.axes.values()) if plan.axes else [()]:
        params = dict(plan.fixed, **dict(zip(plan.axes, combo, strict=True)))
        bools = _bool_problems(plan.cls.Params, params, plan.path)
        if bools:
            problems.extend(bools)
            continue
        try:
            dumped = plan.cls.Params(**params).model_dump(mode="json")
            if dumped.get("probes") is None:
                dumped.pop("probes", None)  # unset: the study's probes; not part of the configuration's id
            out.append((plan.name, dumped, list(plan.axes), plan.path))
        except ValidationError as exc:
            problems.extend(_pydantic_problems(plan.path, exc))
        except (ValueError, TypeError, ArithmeticError, OSError) as exc:
            problems.append((plan.path, f"{exc}"))
    return out


def _is_list_field(model: type[BaseModel], key: str) -> bool:
    f = model.model_fields.get(key)
    if f is None:
        return False
    sequence = (list, tuple)
    origin = typing.get_origin(f.annotation)
    return origin in sequence or (origin in (typing.Union, getattr(__import__("types"), "UnionType", None))
                                  and any(typing.get_origin(a) in sequence for a in typing.get_args(f.annotation)))


def _check_probes(settings: StudySettings, workloads: list[tuple[str, dict]],
                  problems: list[tuple[str, str]]) -> None:
    """study.probes and a workload's `probes` name probes this build has; a misspelt one would
    otherwise measure nothing and say nothing."""
    known = {p.name for p in probe_classes()}
    named = [("study.probes", settings.probes)] + [(f"{path}.probes", t["probes"]) for path, t in workloads
                                                    if isinstance(t.get("probes"), list)]
    for where, names in named:
        bad = [n for n in names if n not in known]
        if bad:
            problems.append((where, f"no probe named {', '.join(map(repr, bad))}; the probes are "
                                    f"{', '.join(sorted(known))}"))


def _check_metric(metric: str, configs: list[Config], problems: list[tuple[str, str]]) -> None:
    """study.metric must be a metric every configuration's workload declares (core/metrics.py)."""
    for c in configs:
        declared = metrics.for_workload(c.workload)
        if metric not in declared:
            names = ", ".join(sorted(m.name for m in declared))
            problems.append(("study.metric", f"unknown metric {metric!r} for workload {c.workload.get('kind')!r}; "
                                             f"it declares {names}"))
            return


def _pydantic_problems(prefix: str, exc: ValidationError) -> list[tuple[str, str]]:
    out = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if p != "__root__")
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif err["type"] == "missing":
            msg = "required key is missing"
        elif "input" in err and loc and not isinstance(err["input"], (dict, list)) and "got " not in msg:
            shown = repr(err["input"])
            msg = f"{msg} (got {shown if len(shown) <= 80 else shown[:77] + '...'})"
        out.append((f"{prefix}.{loc}" if loc else prefix, re.sub(r"^Value error, ", "", msg)))
    return out


def _dedupe(problems: list[tuple[str, str]]) -> list[tuple[str, str]]:
    seen: dict[tuple[str, str], None] = {}
    for p in problems:
        seen.setdefault(p, None)
    return list(seen)
