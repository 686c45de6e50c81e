"""A stored run read back is input like any file: check its shape before analysis reads it.

The results store is iolab's own, but a database is also a file someone can open: a colleague
with write access, a hand edit to fix a typo, a tool that wrote a row in another version's
format. Analysis (compare, report, history) assumes numbers where numbers were stored; fed a
string it would fail deep inside numpy with a traceback naming nothing the user can act on. So
`results_document` checks every run it builds here, and a run that is not what iolab writes
ends the command with exit status 2, naming the store, the run, the trial and the key, and
nothing is created. Values that are numbers but not finite (NaN, infinity) are not a shape
error: analysis counts them as trials without a value and says so.
Pure: a document in, an error or nothing out.
"""

from __future__ import annotations

import math
from typing import Any

from iolab.core.errors import InputError
from iolab.core.model import TrialResult
from iolab.store.base import RunRecord


class StoredRunInvalid(InputError):
    """A stored run whose fields are not what iolab writes (exit status 2)."""


def check_document(doc: dict[str, Any], where: str) -> None:
    """Raise StoredRunInvalid naming `where` (the store), the run, the trial and the key of every
    field of the first bad trial (and the run's own fields) that analysis could not read."""
    run = str(doc.get("run_id"))
    problems = [(key, msg) for key, msg in _run_fields(doc)]
    for t in doc.get("trials") or []:
        bad = list(_trial_fields(t))
        if bad:
            tid = t.get("id") if isinstance(t, dict) else None
            problems += [(f"trial {tid!r}: {key}", msg) for key, msg in bad]
            break
    if problems:
        lines = [f"{where}: run {run}: {key}: {msg}" for key, msg in problems]
        raise StoredRunInvalid("a stored run is not in the form iolab writes (edited by hand, or written by "
                               "another tool?); nothing was read from it\n" + "\n".join(lines))


def run_problem(where: str, run: RunRecord) -> str | None:
    """The first of a stored run's own fields analysis could not read, as one line (None: it reads)."""
    bad = _run_fields({"created": run.created, "environment": run.environment, "spec": run.spec,
                       "options": run.options, "extra": run.extra, "trials": []})
    return f"{where}: run {run.id}: {bad[0][0]}: {bad[0][1]}" if bad else None


def trial_problem(where: str, run_id: str, t: TrialResult) -> str | None:
    """The first field of a stored trial analysis could not read, as one line naming the store, the
    run, the trial and the key (None: it reads). For the commands that read many runs at once
    (`history`), which set such a run aside and go on."""
    bad = _trial_fields({"id": t.trial_id, "status": t.status, "params": t.params, "metrics": t.metrics,
                         "flags": t.flags, "manifest": t.manifest, "probes": t.probes})
    return f"{where}: run {run_id}: trial {t.trial_id!r}: {bad[0][0]}: {bad[0][1]}" if bad else None


def _run_fields(doc: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    created = doc.get("created")
    if created is not None and not (_number(created) and math.isfinite(created)):
        out.append(("created", f"a time in seconds, got {_shown(created)}"))
    for key in ("environment", "spec", "options", "extra"):
        if doc.get(key) is not None and not isinstance(doc[key], dict):
            out.append((key, f"a table, got {_shown(doc[key])}"))
    spec = doc.get("spec")
    if isinstance(spec, dict):
        out += [(f"spec.{key}", f"a table, got {_shown(spec[key])}") for key in ("study", "target", "workload")
                if spec.get(key) is not None and not isinstance(spec[key], dict)]
    if not isinstance(doc.get("trials"), list):
        out.append(("trials", f"a list, got {_shown(doc.get('trials'))}"))
    return out


def _trial_fields(t: Any) -> list[tuple[str, str]]:
    if not isinstance(t, dict):
        return [("", f"a table, got {_shown(t)}")]
    out = []
    if not isinstance(t.get("id"), str):
        out.append(("id", f"a name, got {_shown(t.get('id'))}"))
    if not isinstance(t.get("status"), str):
        out.append(("status", f"a word (ok, failed...), got {_shown(t.get('status'))}"))
    if not isinstance(t.get("params"), dict):
        out.append(("params", f"a table, got {_shown(t.get('params'))}"))
    metrics = t.get("metrics")
    if metrics is None and t.get("status") != "ok":
        metrics = {}
    if not isinstance(metrics, dict):
        out.append(("metrics", f"a table, got {_shown(metrics)}"))
    else:
        out += [(f"metrics.{name}", f"a number or null, got {_shown(v)}")
                for name, v in metrics.items() if v is not None and not _number(v)]
    for key, kind in (("flags", list), ("manifest", dict), ("probes", dict)):
        if t.get(key) is not None and not isinstance(t[key], kind):
            out.append((key, f"a {'list' if kind is list else 'table'}, got {_shown(t[key])}"))
    manifest: dict[str, Any] = t["manifest"] if isinstance(t.get("manifest"), dict) else {}
    resolution = manifest.get("resolution")
    if resolution is not None:
        if not isinstance(resolution, dict):
            out.append(("manifest.resolution", f"a table, got {_shown(resolution)}"))
        else:
            out += [(f"manifest.resolution.{name}", f"a step >= 0 in the metric's unit, got {_shown(v)}")
                    for name, v in resolution.items() if not (_number(v) and 0 <= v)]
    declarations = manifest.get("declarations")
    if declarations is not None and not isinstance(declarations, dict):
        out.append(("manifest.declarations", f"a table, got {_shown(declarations)}"))
    return out


def _number(v: Any) -> bool:
    """An int or float; a bool is not a measurement (JSON true would read as 1)."""
    return isinstance(v, int | float) and not isinstance(v, bool)


def _shown(v: Any) -> str:
    text = repr(v)
    return f"{type(v).__name__} {text[:60] + '...' if len(text) > 60 else text}"
