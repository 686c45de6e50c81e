"""Study specs: TOML in, a validated matrix of configurations out.

A spec has a [study] table, one or more targets and one or more workloads. Any list value
in a target or workload table is an axis: the matrix is the product of all of them.
Everything is validated before anything runs; errors name the file, the key and what
was expected, and nothing is created.
"""

from __future__ import annotations

import itertools
import re
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from iolab.core import registry
from iolab.core.errors import SpecError
from iolab.core.model import Config
from iolab.core.units import parse_duration


class StudySettings(BaseModel):
    """The [study] table."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    description: str = ""
    repetitions: int = Field(3, ge=1, le=1000, description="repetitions per configuration, at least")
    max_repetitions: int = Field(10, ge=1, le=1000, description="cap for adaptive stopping")
    ci_target: float = Field(0.05, gt=0, lt=1, description="stop when the 95% CI half-width / mean is below this")
    metric: str | None = Field(None, description="the metric adaptive stopping watches")
    trial_timeout: float | None = Field(None, description="seconds; default 3x the estimate + 60 s")
    analysis: str = "generic"
    order: Literal["interleaved", "sequential"] = "interleaved"
    probes: list[str] = Field(default_factory=list, description="extra, costly probes to run (e.g. qemu_syscalls)")

    @field_validator("trial_timeout", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        return None if v is None else parse_duration(v)


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


def load_spec_file(path: Path) -> StudySpec:
    """A spec from a TOML file, or an fio job file imported as a study."""
    source = str(path)
    if not path.exists():
        raise SpecError(source, [("(file)", "no such file")])
    if path.suffix == ".fio" or path.suffix == ".job":
        from iolab.studies import fio_import

        return from_dict(fio_import.spec_from_jobfile(path), source)
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(source, [("(syntax)", str(exc))]) from None
    except UnicodeDecodeError:
        raise SpecError(source, [("(file)", "not a UTF-8 text file")]) from None
    return from_dict(doc, source)


def from_dict(doc: dict[str, Any], source: str, options: dict[str, Any] | None = None) -> StudySpec:
    problems: list[tuple[str, str]] = []
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
    if problems:
        raise SpecError(source, _dedupe(problems))
    assert settings is not None
    return StudySpec(settings=settings, configs=configs, source=source, raw=doc, options=options or {})


def _settings(doc: dict[str, Any], problems: list[tuple[str, str]]) -> StudySettings | None:
    table = doc.get("study")
    if not isinstance(table, dict):
        problems.append(("study", "missing [study] table (with at least name = \"...\")"))
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
    t_cells = [c for path, t in targets for c in _expand(path, t, registry.TARGETS, registry.target_class, problems)]
    w_cells = [c for path, w in workloads for c in _expand(path, w, registry.WORKLOADS, registry.workload_class, problems)]
    if problems:
        return []
    configs = []
    for (t_name, t_params, t_axes), (w_name, w_params, w_axes) in itertools.product(t_cells, w_cells):
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


def _expand(path: str, table: dict, kinds: dict[str, str], load: Any,
            problems: list[tuple[str, str]]) -> list[tuple[str, dict, list[str]]]:
    """One table with list-valued keys -> (name, validated params, axis keys), one per combination."""
    table = dict(table)
    name = str(table.pop("name", "")) or str(table.get("kind", "?"))
    kind = table.get("kind")
    if not isinstance(kind, str) or kind not in kinds:
        problems.append((f"{path}.kind", f"expected one of {', '.join(sorted(kinds))}, got {kind!r}"))
        return []
    cls = load(kind)
    axes = {k: v for k, v in table.items() if isinstance(v, list) and not _is_list_field(cls.Params, k)}
    for k, v in axes.items():
        if not v:
            problems.append((f"{path}.{k}", "an axis needs at least one value"))
            return []
    fixed = {k: v for k, v in table.items() if k not in axes}
    out = []
    for combo in itertools.product(*axes.values()) if axes else [()]:
        params = dict(fixed, **dict(zip(axes, combo)))
        try:
            out.append((name, cls.Params(**params).model_dump(mode="json"), list(axes)))
        except ValidationError as exc:
            problems.extend(_pydantic_problems(path, exc))
        except ValueError as exc:
            problems.append((path, str(exc)))
    return out


def _is_list_field(model: type[BaseModel], key: str) -> bool:
    f = model.model_fields.get(key)
    if f is None:
        return False
    sequence = (list, tuple)
    origin = typing.get_origin(f.annotation)
    return origin in sequence or (origin in (typing.Union, getattr(__import__("types"), "UnionType", None))
                                  and any(typing.get_origin(a) in sequence for a in typing.get_args(f.annotation)))


def _check_metric(metric: str, configs: list[Config], problems: list[tuple[str, str]]) -> None:
    known: set[str] = set()
    for c in configs:
        known |= set(getattr(registry.workload_class(c.workload["kind"]), "metrics", ()))
    if known and metric not in known:
        problems.append(("study.metric", f"unknown metric {metric!r}; this study's workloads give {', '.join(sorted(known))}"))


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
            msg = f"{msg} (got {err['input']!r})"
        out.append((f"{prefix}.{loc}" if loc else prefix, re.sub(r"^Value error, ", "", msg)))
    return out


def _dedupe(problems: list[tuple[str, str]]) -> list[tuple[str, str]]:
    seen: dict[tuple[str, str], None] = {}
    for p in problems:
        seen.setdefault(p, None)
    return list(seen)
