"""Resource kinds are registered by the modules that create them; nothing central lists them.

* every kind any module of iolab records in a ledger is registered once the targets are
  imported (resources.load_all_kinds), in a fresh interpreter: so `iolab clean` after a crash
  can undo every entry it finds, whichever modules the dead process had loaded;
* the kinds are undone in the order the ledger's safety depends on (processes, cgroups,
  scheduler claims while the device is attached, mounts, loop devices, files, dirs);
* a target module that brings kinds of its own (tests/core/kind_target.py, named only by one
  registry line) has them undone in their declared place among the others by `iolab clean`
  and swept by `iolab clean --all`, with no edit of resources.py, cleaners.py or cleanup.py.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from tests.core import kind_target
from tests.core.helpers import Lab

from iolab import cleanup
from iolab.core import owner, registry, resources

SRC = Path(resources.__file__).resolve().parents[1]


def recorded_kinds() -> dict[str, list[str]]:
    """Every kind a module of iolab writes into a ledger: the literal first argument of
    `….creating(kind, …)`, `….add(kind, …)` and the cgroup backends' `_record(kind, …)`."""
    found: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("creating", "add", "_record") and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                    and (node.func.attr == "_record" or "ledger" in ast.unparse(node.func.value))):
                found.setdefault(node.args[0].value, []).append(f"{path.relative_to(SRC)}:{node.lineno}")
    return found


def test_every_kind_iolab_records_is_registered_by_importing_the_targets() -> None:
    recorded = recorded_kinds()
    assert {"file", "dir", "mount", "loop", "pgroup", "cgroup", "scheduler", "process"} <= set(recorded), recorded
    code = ("import json\nfrom iolab.core import resources\nresources.load_all_kinds()\n"
            "print(json.dumps([[k.name, k.order, k.sweep is not None] for k in resources.kinds()]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    registered = {name: (order, sweeps) for name, order, sweeps in json.loads(out)}
    missing = {k: where for k, where in recorded.items() if k not in registered}
    assert not missing, f"recorded but no module registers their kind when the targets are imported: {missing}"
    # the order the ledger's safety depends on (was a hand-kept list in resources.py)
    order = [n for n, _ in sorted(registered.items(), key=lambda kv: kv[1][0]) if n in recorded]
    assert order[:8] == ["pgroup", "process", "cgroup", "scheduler", "mount", "loop", "file", "dir"], order
    # every kind `iolab clean --all` must find without a ledger has a sweep; dirs go with the files
    assert all(registered[k][1] for k in ("pgroup", "process", "cgroup", "scheduler", "mount", "loop", "file"))


@pytest.fixture
def kind_lab(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> Lab:
    monkeypatch.setenv("IOLAB_DATA", str(lab.data))
    monkeypatch.setenv("IOLAB_SCRATCH", str(lab.scratch))
    monkeypatch.setitem(registry.TARGETS, kind_target.KIND, kind_target.REF)
    kind_target.CALLS.clear()
    kind_target.PROBE.clear()
    return lab


def _dead_owner() -> owner.Owner:
    p = subprocess.Popen(["sleep", "0"])
    start = owner.start_time(p.pid)
    p.wait()
    assert start is not None
    return owner.Owner(p.pid, start)


def test_a_targets_own_kinds_are_undone_in_their_declared_place(kind_lab: Lab) -> None:
    """A dead owner's ledger lists the test kinds around a file, in the wrong order on purpose:
    the early kind (declared between mounts and loop devices) runs while the file still exists,
    the late one (after dirs) once it is gone; the whole ledger is undone and removed."""
    probe = kind_lab.scratch / "iolab-kinds-probe.img"
    kind_lab.scratch.mkdir(parents=True, exist_ok=True)
    probe.write_text("x")
    kind_target.PROBE.append(str(probe))
    kind_lab.ledger_dir.mkdir(parents=True, exist_ok=True)
    ledger = kind_lab.ledger_dir / f"{_dead_owner().token}.json"
    ledger.write_text(json.dumps([kind_target.entry(kind_target.LATE, "late"), kind_target.entry("file", str(probe)),
                                  kind_target.entry(kind_target.EARLY, "early")]))
    cleaned, errors = resources.clean_orphans()
    assert errors == []
    assert cleaned == [f"{kind_target.EARLY} early", f"file {probe}", f"{kind_target.LATE} late"]
    assert kind_target.CALLS == [(kind_target.EARLY, "early", True), (kind_target.LATE, "late", False)]
    assert not probe.exists() and not ledger.exists()


def test_clean_all_runs_a_targets_own_sweep_in_its_place(kind_lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other kinds' sweeps are replaced by recorders (a real sweep is machine-wide: other
    tests' leftovers are not this test's to take), so the order of every sweep is seen."""
    resources.load_all_kinds()
    for name, kind in list(resources._KINDS.items()):
        if kind.sweep is not None and name != kind_target.EARLY:
            monkeypatch.setitem(resources._KINDS, name, replace(
                kind, sweep=lambda scope, n=name: (kind_target.CALLS.append((n, "sweep", False)) or [], [])))
    cleaned, errors = cleanup.sweep_tagged()
    assert errors == [] and cleaned == [f"{kind_target.EARLY} swept"]
    order = [kind for kind, what, _ in kind_target.CALLS if what.startswith("sweep")]
    core = ["pgroup", "process", "cgroup", "scheduler", "mount", kind_target.EARLY, "loop", "file"]
    assert [k for k in order if k in core] == core, order  # (other targets' own kinds in their places too)
    assert (kind_target.EARLY, f"sweep {Path(kind_lab.scratch).resolve()}", False) in kind_target.CALLS
