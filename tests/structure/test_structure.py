"""The shape docs/architecture.md promises, checked on the source: no import cycle, layers
that only point down (one ranked list, no exceptions), workloads that reach targets through targets/base only, no late
import that hides an edge, no module over 400 lines without a reason, and no child process
started anywhere but core/children.py and the host executor (both start it with the stop
signals held, so no stop signal leaves a child running unseen).

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

# Layers, bottom first: a package may import itself and the packages below it, never one
# above it, and there is no list of exceptions. Read bottom-up: the vocabulary (core), the
# machine (cgroups and the host executor, native helpers, QEMU, the results store), fio's
# language, the fleet, targets, the workloads that run on them and the probes that watch
# them; the study spec checked against all of those; the report's document model and its
# exporters; the pure analysis; the studies; documents built from stored runs (publish);
# the runner that makes runs, reproduce, cleanup, doctor, and the command line on top.
# "iolab" is the package's own __init__ (its version).
LAYERS = [
    "iolab",
    "core",
    "cgroups",
    "native",
    "vm",
    "store",
    "fio",
    "fleet",
    "targets",
    "workloads",
    "probes",
    "spec",
    "report",
    "analysis",
    "studies",
    "publish",
    "runner",
    "reproduce",
    "cleanup",
    "doctor",
    "cli",
    "entry",  # the process entry point: signal handlers (core), then the command (late)
    "__main__",  # `python -m iolab`
]
RANK = {name: i for i, name in enumerate(LAYERS)}
# late (function-level) imports of iolab modules, allowed where the module says why
LATE_OK = {
    "iolab.cli": "each command imports what it runs: `iolab --help` and `iolab runs` start fast",
    "iolab.entry": "the command is imported after the stop signals are handled (docstring of entry.py)",
}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "iolab"


def layer_violations(graph: dict[str, dict[str, bool]]) -> list[str]:
    """Every import of a package above the importer's own, and every package not in LAYERS
    (a new package takes its place in the order before anything may import it)."""
    out = []
    for a, targets in graph.items():
        pa = _package(a)
        if pa not in RANK:
            out.append(f"{a}: package {pa!r} has no place in LAYERS")
            continue
        for b in targets:
            pb = _package(b)
            if RANK.get(pb, len(LAYERS)) > RANK[pa]:
                out.append(f"{a} -> {b} ({pa} may import only what is below it: {pb} is above)")
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


# Where a child process may be started: core/children.py (every other module goes through it,
# so a stop signal can never leave a child running unseen) and the host executor, which
# starts fio and its kin inside signals.held() in a cgroup leaf it kills.
SPAWN_OK = {"iolab.core.children", "iolab.cgroups.executor"}
_SPAWNERS = {"subprocess": {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput"},
             "os": {"system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "spawnv", "spawnve",
                    "spawnvp", "spawnvpe"}}  # not exec*: it replaces the process (fleet's server), no child


def spawn_violations(mods: dict[str, Path]) -> list[str]:
    """Every call of subprocess.run/Popen/..., os.system/fork/... (or such a name imported from
    those modules) in a module that is not in SPAWN_OK."""
    out = []
    for name, path in mods.items():
        if name in SPAWN_OK:
            continue
        tree = ast.parse(path.read_text())
        imported = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                    and n.module in _SPAWNERS for a in n.names if a.name in _SPAWNERS[n.module]}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                    and f.attr in _SPAWNERS.get(f.value.id, ())) or (isinstance(f, ast.Name) and f.id in imported):
                out.append(f"{name}:{node.lineno} starts a child itself: use iolab.core.children.run or start")
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


def test_every_child_process_is_started_through_core_children() -> None:
    assert spawn_violations(modules()) == []


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
        "iolab/analysis/x.py": "from iolab.runner.plan import S\nfrom iolab.report.model import M\n",
        "iolab/runner/__init__.py": "",
        "iolab/runner/plan.py": "",  # one module of a package above: no less an upward edge
        "iolab/report/__init__.py": "",
        "iolab/report/model.py": "from iolab.core import a\n",  # down: allowed
        "iolab/report/html.py": "from iolab.publish.document import D\n",  # rendering reaching back to building
        "iolab/publish/__init__.py": "",
        "iolab/publish/document.py": "from iolab.report.model import M\n",
        "iolab/newpkg/__init__.py": "",
        "iolab/newpkg/n.py": "from iolab.core import a\n",  # a package with no place in the order
        "iolab/vm/q.py": "import os, subprocess\nfrom subprocess import check_output as co\n"
                         "subprocess.run(['x'])\nco(['y'])\nos.system('z')\nsubprocess.PIPE\n",
        "iolab/core/children.py": "import subprocess\nsubprocess.Popen(['x'])\n",  # the one allowed place
    })
    assert cycles(g) == [["iolab.core.a", "iolab.core.b"]]
    assert late_violations(g) == ["iolab.core.a imports iolab.core.b inside a function"]
    layers = layer_violations(g)
    assert sorted(v.split(" (")[0] for v in layers) == [
        "iolab.analysis.x -> iolab.runner.plan",
        "iolab.core.b -> iolab.studies.s",
        "iolab.newpkg.n: package 'newpkg' has no place in LAYERS",
        "iolab.newpkg: package 'newpkg' has no place in LAYERS",
        "iolab.report.html -> iolab.publish.document",
    ]
    assert workload_target_violations(g) == ["iolab.workloads.w -> iolab.targets.loop"]
    assert [o.split(":")[0] for o in oversized(mods)] == ["iolab.targets.loop"]
    assert [v.split(" ")[0] for v in spawn_violations(mods)] == ["iolab.vm.q:3", "iolab.vm.q:4", "iolab.vm.q:5"]
