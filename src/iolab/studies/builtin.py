"""The built-in studies, and the shape every one of them has.

Like every PerfKitBenchmarker benchmark, every built-in study reads the same way: one
package `studies/<name>/` with the same parts under the same names.

  __init__.py      NAME, SUMMARY and the parts' functions re-exported (`__all__`), nothing else
  spec.py          NAME, SUMMARY (what `iolab study list` shows) and build(quick) -> the study spec
                   as a dict, the same shape a user's TOML has (`iolab study NAME --print-spec`)
  hook.py          only if the study has one: before_group(ctx: GroupContext) -> GroupDecision | None,
                   a check or preparation on each prepared target before its trials (studies/hooks.py)
  analysis.py      findings(doc) -> its typed findings (a Findings model, analysis/findings.py) and
                   analyze(doc) -> their JSON (docs/results.md): pure, on the results document, so
                   every finding can be recomputed from a stored run and tested without a machine
  presentation.py  present(doc, findings) -> (headline lines, report sections); reads the typed
                   findings' attributes (a JSON object of them is parsed first)
  verdicts.py      only if the study reports verdicts: study_verdicts(doc) -> [ReportedVerdict], each
                   undecided one with the configurations that would decide it: where a time budget
                   (`--budget`) spends repetitions first (analysis/verdicts.py, runner/schedule.py)

A part may use a module of its own inside the package (write-modes' crosscheck.py, part of
its analysis); parts shared by several studies are in studies/common.py, or are another
study's part (virtio reuses iozone's). Adding a study is its package and one line here
(docs/architecture.md#the-study-shape).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from iolab.core.errors import IolabError

BUILTIN: dict[str, str] = {
    "write-modes": "iolab.studies.write_modes",
    "iozone": "iolab.studies.iozone",
    "cgroup-weights": "iolab.studies.cgroup_weights",
    "virtio": "iolab.studies.virtio",
    "sync-amplification": "iolab.studies.sync_amplification",
    "vm-profile": "iolab.studies.vm_profile",
    "fleet-scan": "iolab.studies.fleet_scan",
}
DEFAULT_STUDY = "write-modes"
# Analyses that are not studies of their own: a reproduction's page of claims, an A/B study's verdict.
ANALYSES: dict[str, str] = {"reproduce": "iolab.reproduce.page", "ab": "iolab.publish.ab"}

# The shape, as tests/studies/test_study_shape.py checks it on every package above.
PARTS = ("spec", "analysis", "presentation")                  # every study has these modules
OPTIONAL_PARTS = ("hook", "verdicts")                        # and may have these
EXPORTS = ("NAME", "SUMMARY", "build", "findings", "analyze", "present")  # what __init__ re-exports
HOOK_EXPORT = "before_group"                                  # ... plus this, exactly with hook.py
VERDICTS_EXPORT = "study_verdicts"                            # ... and this, exactly with verdicts.py
OPTIONAL_EXPORTS = {"hook": HOOK_EXPORT, "verdicts": VERDICTS_EXPORT}


def available() -> dict[str, ModuleType]:
    """Every built-in study, imported. A study whose own package is absent from this build is
    left out; any other import error is a bug and raised."""
    out = {}
    for name, mod in BUILTIN.items():
        try:
            out[name] = importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod:
                raise
    return out


def get(name: str) -> ModuleType:
    studies = available()
    if name not in studies:
        raise IolabError(f"no built-in study {name!r}; available: {', '.join(studies)} (see `iolab study list`)")
    return studies[name]


def analysis_module(name: str) -> ModuleType:
    """The module whose analyze/present apply to a run: a built-in study, or the generic one."""
    if name in ANALYSES:
        return importlib.import_module(ANALYSES[name])
    if name in BUILTIN:
        try:
            return get(name)
        except IolabError:
            pass
    return importlib.import_module("iolab.analysis.generic")
