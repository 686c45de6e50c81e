"""The shape docs/architecture.md promises, checked on the source: no import cycle, layers
that only point down, workloads that reach targets through targets/base only, no late
import that hides an edge, and no module over 400 lines without a reason.

Every check reads the import graph (tests/structure/import_graph.py, the standard
library's ast); each has a companion test that builds a small wrong graph and shows the
check finds what is wrong in it, so none of them can pass by finding nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.structure.import_graph import cycles, edges, modules

MAX_LINES = 400
SIZE_REASON = "Size:"  # a module over MAX_LINES says why in a docstring paragraph starting so

# Layers: a package may import only the packages listed (and itself). Read bottom-up: core
# and the machine-facing packages know nothing of studies; analysis is pure; the CLI and
# the runner sit on top. Package-level edges that exist for a reason are named here, not
# hidden: core's executor places processes in trial cgroups (cgroups.trial), and analysis
# reads a run document whose settings table studies/spec.py defines.
ALLOWED: dict[str, set[str] | None] = {
    "core": set(),
    "cgroups": {"core"},
    "vm": {"core"},
    "store": {"core"},
    "native": {"core"},
    "fleet": {"core", "cgroups", "fio"},
    "fio": {"core"},
    "targets": {"core", "cgroups", "vm", "native", "fleet", "fio"},
    "workloads": {"core", "cgroups", "native", "targets", "fio"},
    "probes": {"core", "targets", "vm"},
    "analysis": {"core", "probes", "report", "runner", "studies"},
    "report": {"core", "analysis", "store", "studies", "iolab"},
    "studies": {"core", "analysis", "report", "targets", "vm", "workloads"},
    "runner": {"core", "analysis", "cgroups", "probes", "store", "studies", "targets", "iolab"},
    "reproduce": {"core", "analysis", "report", "runner", "store", "studies"},
    "cleanup": {"core", "cgroups", "vm"},
    "doctor": {"core", "cgroups", "runner", "vm", "fleet", "store"},
    "cli": None,  # the top: anything
    "entry": {"core", "cli"},  # the process entry point: signal handlers (core), then the command
    "__main__": {"entry"},  # `python -m iolab`
}
# analysis is pure: of the packages above, it may use only their pure modules
ANALYSIS_MAY_USE = {"iolab.report.model", "iolab.runner.plan", "iolab.studies.spec", "iolab.probes.registry"}
# single modules a package may use although their package is above it, each with its reason
MODULE_EXCEPTIONS: dict[str, dict[str, str]] = {
    "fleet": {"iolab.fio.engine": "fio's job text and JSON: the fleet drives fio like a workload does"},
    "targets": {"iolab.fio.engine": "the fleet target reads fio's JSON like the fio workload"},
    "workloads": {"iolab.fleet.metrics": "the fio workload declares the per-host metrics it yields on a fleet"},
    "studies": {"iolab.probes.registry": "a spec names the probes it wants (study.probes, a workload's probes): "
                                         "validation checks each name against the registry"},
}
# late (function-level) imports of iolab modules, allowed where the module says why
LATE_OK = {
    "iolab.cli": "each command imports what it runs: `iolab --help` and `iolab runs` start fast",
    "iolab.entry": "the command is imported after the stop signals are handled (docstring of entry.py)",
    "iolab.report.render": "csv and json never import matplotlib (docstring of report/render.py)",
}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "iolab"


def layer_violations(graph: dict[str, dict[str, bool]]) -> list[str]:
    out = []
    for a, targets in graph.items():
        pa = _package(a)
        allowed = ALLOWED.get(pa, set())
        for b in targets:
            pb = _package(b)
            if pa == pb or allowed is None or b in MODULE_EXCEPTIONS.get(pa, {}):
                continue
            if pb not in allowed:
                out.append(f"{a} -> {b} ({pa} may import only {sorted(allowed)})")
            elif pa == "analysis" and pb != "core" and b not in ANALYSIS_MAY_USE:
                out.append(f"{a} -> {b} (analysis is pure: of {pb} it may use only {sorted(ANALYSIS_MAY_USE)})")
    return out


def workload_target_violations(graph: dict[str, dict[str, bool]]) -> list[str]:
    return [f"{a} -> {b}" for a, targets in graph.items() if _package(a) == "workloads"
            for b in targets if _package(b) == "targets" and b != "iolab.targets.base"]


def late_violations(graph: dict[str, dict[str, bool]]) -> list[str]:
    return [f"{a} imports {b} inside a function" for a, targets in graph.items() if a not in LATE_OK
            for b, top in targets.items() if not top]


def oversized(mods: dict[str, Path]) -> list[str]:
    out = []
    for name, path in mods.items():
        text = path.read_text()
        n = len(text.splitlines())
        doc = ast.get_docstring(ast.parse(text)) or ""
        if n > MAX_LINES and not any(p.strip().startswith(SIZE_REASON) for p in doc.split("\n\n")):
            out.append(f"{name}: {n} lines, and no '{SIZE_REASON} ...' paragraph in its docstring says why")
    return out


# ---------------------------------------------------------------------------- on the source

def test_no_import_cycle() -> None:
    found = cycles(edges())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_layers_point_down() -> None:
    assert layer_violations(edges()) == []


def test_workloads_reach_targets_only_through_the_base() -> None:
    assert workload_target_violations(edges()) == []


def test_late_imports_only_where_the_module_says_why() -> None:
    assert late_violations(edges()) == []


def test_no_module_over_400_lines_without_a_reason() -> None:
    assert oversized(modules()) == []


def test_the_graph_sees_the_whole_package() -> None:
    mods = modules()
    g = edges(mods)
    assert len(mods) > 100 and "iolab.runner.runner" in mods and "iolab.studies.cgroup_weights.analysis" in mods
    assert g["iolab.runner.runner"].get("iolab.store.base") is True  # a module-level edge
    assert g["iolab.cli"].get("iolab.runner.runner") is False  # a late one, still an edge


# ---------------------------------------------------------------------------- the checks can fail

def _graph(tmp: Path, files: dict[str, str]) -> tuple[dict[str, Path], dict[str, dict[str, bool]]]:
    for rel, text in files.items():
        f = tmp / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    mods = {rel[:-3].replace("/", ".").removesuffix(".__init__"): tmp / rel for rel in files}
    return mods, edges(mods)


def test_the_checks_find_what_is_wrong_in_a_bad_tree(tmp_path: Path) -> None:
    long_body = "x = 1\n" * (MAX_LINES + 1)
    mods, g = _graph(tmp_path, {
        "iolab/__init__.py": "",
        "iolab/core/__init__.py": "",
        "iolab/core/a.py": "def f():\n    from iolab.core import b\n",  # late half of a cycle
        "iolab/core/b.py": "from iolab.core import a\nfrom iolab.studies import s\n",  # cycle + upward edge
        "iolab/studies/__init__.py": "",
        "iolab/studies/s.py": '"""A study.\n\nSize: it is long for a reason."""\n' + long_body,
        "iolab/workloads/__init__.py": "",
        "iolab/workloads/w.py": "from iolab.targets.loop import X\nfrom iolab.targets.base import P\n",
        "iolab/targets/__init__.py": "",
        "iolab/targets/base.py": "",
        "iolab/targets/loop.py": '"""No reason given."""\n' + long_body,
        "iolab/analysis/__init__.py": "",
        "iolab/analysis/x.py": "from iolab.runner.runner import R\nfrom iolab.runner.plan import S\n",
        "iolab/runner/__init__.py": "",
        "iolab/runner/runner.py": "",
        "iolab/runner/plan.py": "",
    })
    assert cycles(g) == [["iolab.core.a", "iolab.core.b"]]
    assert late_violations(g) == ["iolab.core.a imports iolab.core.b inside a function"]
    layers = layer_violations(g)
    assert any(v.startswith("iolab.core.b -> iolab.studies.s") for v in layers)
    assert any(v.startswith("iolab.analysis.x -> iolab.runner.runner") for v in layers)
    assert not any("iolab.runner.plan" in v.split(" (")[0] for v in layers)  # a pure module is allowed
    assert workload_target_violations(g) == ["iolab.workloads.w -> iolab.targets.loop"]
    assert [o.split(":")[0] for o in oversized(mods)] == ["iolab.targets.loop"]
