"""Every built-in study is a package with the same parts under the same names (studies/builtin.py),
so every study reads the same way; its analysis and presentation stay pure. Pure checks on the
installed packages: no machine needed."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from iolab.spec.study import from_dict
from iolab.studies import builtin
from iolab.studies.hooks import GroupContext

# A part may keep a module of its own inside its package; each one is named here, so a stray
# module (a second analysis, a copy of a helper) fails this test until someone decides on it.
PART_HELPERS: dict[str, set[str]] = {"write-modes": {"crosscheck"}, "virtio": {"layers"},
                                     "sync-amplification": {"cost"}}  # R3's second question, pure

# What analysis.py and presentation.py may not import: they work on the results document only.
SIDE_EFFECTS = ("iolab.runner", "iolab.store", "iolab.targets", "iolab.workloads", "iolab.probes",
                "iolab.cgroups", "iolab.core.exec", "iolab.core.resources", "iolab.vm.qemu",
                "iolab.native", "subprocess", "socket", "shutil")

STUDIES = sorted(builtin.BUILTIN)


def _package(name: str) -> ModuleType:
    return builtin.get(name)


def _modules(pkg: ModuleType) -> set[str]:
    return {m.name for m in pkgutil.iter_modules(pkg.__path__)}


def test_every_builtin_study_is_found_and_none_is_hidden() -> None:
    """available() leaves nothing out: a study that fails to import is an error, not a shorter list."""
    assert sorted(builtin.available()) == STUDIES
    assert builtin.DEFAULT_STUDY in STUDIES


@pytest.mark.parametrize("name", STUDIES)
def test_package_has_the_parts_and_nothing_else(name: str) -> None:
    pkg = _package(name)
    assert hasattr(pkg, "__path__"), f"{name} must be a package studies/<name>/, not a module"
    modules = _modules(pkg)
    optional = {p for p in builtin.OPTIONAL_PARTS if p in modules}
    expected = set(builtin.PARTS) | optional | PART_HELPERS.get(name, set())
    assert modules == expected, f"{name}: modules {sorted(modules)}, the shape allows {sorted(expected)}"
    exports = set(builtin.EXPORTS) | {builtin.OPTIONAL_EXPORTS[p] for p in optional}
    # top level: NAME, SUMMARY, the parts' functions and the part modules themselves; nothing else
    public = {k for k in vars(pkg) if not k.startswith("_")}
    assert public == exports | modules, f"{name}: top level {sorted(public - exports - modules)} is not a part"
    assert set(pkg.__all__) == exports | (modules - PART_HELPERS.get(name, set()))
    assert pkg.NAME == name and isinstance(pkg.SUMMARY, str) and pkg.SUMMARY.strip()


@pytest.mark.parametrize("name", STUDIES)
def test_each_part_provides_its_function_under_its_name(name: str) -> None:
    pkg = _package(name)
    parts = {p: importlib.import_module(f"{pkg.__name__}.{p}") for p in _modules(pkg)}
    checks = {"spec": ("build", ["quick"]), "analysis": ("analyze", ["doc"]),
              "presentation": ("present", ["doc", "f"]), "hook": ("before_group", ["ctx"]),
              "verdicts": ("study_verdicts", ["doc"])}
    for part, (fn, params) in checks.items():
        if part not in parts:
            continue
        func = getattr(parts[part], fn)
        assert getattr(pkg, fn) is func, f"{name}: {fn} must be re-exported from {part}.py"
        got = list(inspect.signature(func).parameters)
        assert len(got) == len(params), f"{name}.{part}.{fn}{tuple(got)}: expected {len(params)} parameter(s)"
    assert parts["spec"].NAME is pkg.NAME and parts["spec"].SUMMARY is pkg.SUMMARY
    if "hook" in parts:
        hint = inspect.signature(parts["hook"].before_group).parameters["ctx"].annotation
        assert hint in ("GroupContext", GroupContext), f"{name}: the hook takes a GroupContext, got {hint!r}"


@pytest.mark.parametrize("name", STUDIES)
@pytest.mark.parametrize("quick", [True, False])
def test_spec_builds_a_valid_study_analysed_by_itself(name: str, quick: bool) -> None:
    pkg = _package(name)
    spec = from_dict(pkg.build(quick), f"builtin:{name}", {"quick": quick})
    assert spec.name == name and spec.settings.analysis == name
    assert builtin.analysis_module(spec.settings.analysis) is pkg  # `iolab run` with analysis = NAME finds it


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


@pytest.mark.parametrize("name", STUDIES)
def test_analysis_and_presentation_are_pure(name: str) -> None:
    """They (and a study's verdicts) read the results document only: no runner, store, target,
    workload, probe or process (every import, also one inside a function)."""
    pkg = _package(name)
    root = Path(pkg.__path__[0])
    parts = ["analysis", "presentation", *(["verdicts"] if (root / "verdicts.py").exists() else [])]
    for part in (*parts, *sorted(PART_HELPERS.get(name, ()))):
        bad = sorted(m for m in _imports(root / f"{part}.py")
                     if any(m == s or m.startswith(s + ".") for s in SIDE_EFFECTS))
        assert not bad, f"{name}/{part}.py imports {bad}"


def test_the_shape_test_catches_a_stray_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above fails on a package with a module outside the shape (the wrong program it
    must not pass): a study package with an extra `util.py` and an extra top-level name."""
    pkg_dir = tmp_path / "iolab_shape_probe"
    pkg_dir.mkdir()
    for part in builtin.PARTS:
        (pkg_dir / f"{part}.py").write_text("def build(quick): ...\ndef analyze(doc): ...\n"
                                            "def present(doc, f): ...\nNAME = 'x'\nSUMMARY = 'x'\n")
    (pkg_dir / "util.py").write_text("")
    (pkg_dir / "__init__.py").write_text("from iolab_shape_probe.spec import NAME, SUMMARY, build\n"
                                         "from iolab_shape_probe.analysis import analyze\n"
                                         "from iolab_shape_probe.presentation import present\n"
                                         "from iolab_shape_probe import util\nHELPER = 1\n"
                                         "__all__ = ['NAME', 'SUMMARY', 'build', 'analyze', 'present']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(builtin.BUILTIN, "x", "iolab_shape_probe")
    with pytest.raises(AssertionError, match="util"):
        test_package_has_the_parts_and_nothing_else("x")
    (pkg_dir / "util.py").unlink()
    (pkg_dir / "__init__.py").write_text((pkg_dir / "__init__.py").read_text().replace(
        "from iolab_shape_probe import util\n", ""))
    for mod in [m for m in list(sys.modules) if m.startswith("iolab_shape_probe")]:
        del sys.modules[mod]
    with pytest.raises(AssertionError, match="HELPER"):
        test_package_has_the_parts_and_nothing_else("x")
