"""The built-in studies. Each is one module with the same parts:

NAME, SUMMARY           what `iolab study list` shows
build(quick) -> dict    the study spec, the same shape a user's TOML has
analyze(doc) -> dict    findings from the results document (pure; testable on stored data)
present(doc, findings)  -> (headline lines, report sections)
before_group (optional) a check on a prepared target before its trials (e.g. a sanity gate)
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
}
DEFAULT_STUDY = "write-modes"


def available() -> dict[str, ModuleType]:
    out = {}
    for name, mod in BUILTIN.items():
        try:
            out[name] = importlib.import_module(mod)
        except ModuleNotFoundError:
            continue  # not part of this build yet
    return out


def get(name: str) -> ModuleType:
    studies = available()
    if name not in studies:
        raise IolabError(f"no built-in study {name!r}; available: {', '.join(studies)} (see `iolab study list`)")
    return studies[name]


def analysis_module(name: str) -> ModuleType:
    """The module whose analyze/present apply to a run: a built-in study, or the generic one."""
    if name in BUILTIN:
        try:
            return get(name)
        except IolabError:
            pass
    return importlib.import_module("iolab.analysis.generic")
