"""A study hook gets a narrow interface to the runner (studies/hooks.py), never the runner itself:
it can run a one-off workload on the prepared target, store a run-level extra, print a line and
answer which configurations to skip; the runner records every skip, with its reason, in the
results and the report. The real Runner, store and host target with real fio, in-process, so
the context the hook is handed can be inspected for what it can reach."""

from __future__ import annotations

import gc
import io
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any

import pytest
from rich.console import Console

from iolab.publish.document import analyse_document, results_document
from iolab.report.markdown import render_markdown
from iolab.runner.runner import ConfigState, Runner
from iolab.spec.study import from_dict
from iolab.store.registry import open_store
from iolab.studies.cgroup_weights.hook import GateRun, gate_decision
from iolab.studies.hooks import GroupContext, GroupDecision, GroupHook
from iolab.workloads.fio import FioParams, FioWorkload

NARROW = {"configs", "placement", "run_workload", "set_extra", "message"}
FIO = {"kind": "fio", "rw": "write", "size": "1M", "runtime": 0, "ramp_time": 0, "ioengine": "psync",
       "direct": False}
REASON = "8k blocks are not wanted on this target"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("IOLAB_SCRATCH", str(tmp_path / "scratch"))
    yield tmp_path


def _run(tmp: Path, hook: GroupHook) -> tuple[Runner, str, dict[str, Any], str]:
    spec = from_dict({"study": {"name": "hooked", "repetitions": 2, "max_repetitions": 2},
                      "target": {"kind": "host"}, "workload": dict(FIO, bs=[4096, 8192])}, "test.toml")
    (tmp / "data").mkdir(parents=True, exist_ok=True)
    store = open_store(tmp / "data" / "results.sqlite")
    out = io.StringIO()
    try:
        runner = Runner(spec, store, Console(file=out, width=200), before_group=hook)
        runner.instantiate()
        runner.start()
        status = runner.run()
        doc, summary, sections = analyse_document(results_document(store, store.resolve(runner.run_id)))
    finally:
        store.close()
    assert not list((tmp / "scratch").glob("iolab-host-*")), "the host target left its scratch dir"
    return runner, status, {**doc, "_markdown": render_markdown(doc, sections, summary)}, out.getvalue()


def _reaches(start: object, targets: list[object], limit: int = 200_000) -> list[str]:
    """Type names of the paths' ends: which of `targets` (by identity) are reachable from `start`
    through references (attributes, closures, bound methods, partials, containers). Modules,
    classes and functions' globals are not followed: they reach everything by design."""
    wanted = {id(t) for t in targets}
    module_dicts = {id(vars(m)) for m in list(sys.modules.values()) if isinstance(m, ModuleType)}
    seen, stack, found = {id(start)}, [start], []
    while stack and len(seen) < limit:
        obj = stack.pop()
        if id(obj) in wanted:
            found.append(type(obj).__name__)
            continue
        refs = gc.get_referents(obj)
        if isinstance(obj, FunctionType):
            refs = [obj.__closure__, obj.__defaults__, obj.__kwdefaults__]
        for r in refs:
            if r is None or id(r) in seen or isinstance(r, (ModuleType, type)) or id(r) in module_dicts:
                continue
            seen.add(id(r))
            stack.append(r)
    assert len(seen) < limit, "reference walk did not finish"
    return found


def test_hook_gets_only_the_narrow_interface_and_its_skip_is_recorded(env: Path) -> None:
    seen: dict[str, Any] = {}

    def hook(ctx: GroupContext) -> GroupDecision:
        seen["ctx"] = ctx
        one_off = ctx.run_workload(FioWorkload(FioParams(**dict(FIO, bs=4096))), 60)
        seen["one_off"] = one_off
        ctx.set_extra("hook_check", {"write_bytes": one_off.metrics["write_bytes"]})
        ctx.message("hook: the target takes writes")
        return GroupDecision(skip=[c.id for c in ctx.configs if c.workload["bs"] == 8192], reason=REASON)

    runner, status, doc, console = _run(env, hook)
    ctx = seen["ctx"]
    # the interface: exactly the narrow methods, no room for more
    assert {n for n in dir(ctx) if not n.startswith("_")} == NARROW
    with pytest.raises(AttributeError):
        ctx.runner = runner  # type: ignore[attr-defined]
    for reserved in ("problems", "", None):
        with pytest.raises(ValueError):
            ctx.set_extra(reserved, 1)
    # ... and no path from it to the runner or its state (the old hook got the runner itself)
    state = [runner, runner.state, *runner.state.values()]
    assert all(isinstance(s, ConfigState) for s in runner.state.values()) and runner.state
    assert _reaches(ctx, state) == []
    # the walk finds what is reachable: an attribute, and a runner captured in a closure
    assert _reaches(ctx, [ctx.placement]) == ["Placement"]
    assert _reaches(GroupContext([], ctx.placement, lambda k, v: runner.store.set_extra(runner.run_id, k, v),
                                 print), state) == ["Runner"]

    # the one-off workload ran for real and was not stored as a trial
    assert seen["one_off"].metrics["write_bytes"] == 1 << 20
    assert doc["extra"]["hook_check"] == {"write_bytes": 1 << 20}
    assert "hook: the target takes writes" in console
    by_bs: dict[int, list[dict[str, Any]]] = {}
    for t in doc["trials"]:
        by_bs.setdefault(t["params"]["_workload"]["bs"], []).append(t)
    assert [t["status"] for t in by_bs[4096]] == ["ok", "ok"]
    # the skip: one record, visible as a failed trial with the hook's reason, never run
    skipped = by_bs[8192]
    assert len(skipped) == 1 and skipped[0]["status"] == "failed" and skipped[0]["metrics"] == {}
    assert skipped[0]["error"] == f"skipped by study hook before_group: {REASON}"
    assert skipped[0]["traceback"] is None
    assert status == "partial" and doc["status"] == "partial"
    assert "skipped 1 configuration(s)" in console and REASON in console
    assert REASON in doc["_markdown"], "the report shows why the configuration has no numbers"
    [rec] = [r for r in doc["findings"]["repetitions"] if r["config_id"] == skipped[0]["id"].rsplit("-r", 1)[0]]
    assert rec["stop_reason"] == f"skipped by the study's hook: {REASON}", rec  # a decision, not "short of n"


@pytest.mark.parametrize(("answer", "why"), [
    (lambda ctx: GroupDecision(skip=["0123456789ab"], reason="x"),
     "ValueError: the hook skips configurations that are not on this target: 0123456789ab"),
    (lambda ctx: ctx.set_extra("problems", []), "ValueError: a study hook cannot set extra 'problems'"),
    (lambda ctx: ["skip them all"], "TypeError: a study hook returns a GroupDecision or None, not list"),
])
def test_a_wrong_answer_is_the_hooks_failure(env: Path, answer: GroupHook, why: str) -> None:
    """An unknown configuration id, a reserved extra, a wrong return type: every configuration of
    the target fails with the hook's reason (none runs), and the run goes on to its end."""
    _, status, doc, _ = _run(env, answer)
    assert status == "failed"
    assert len(doc["trials"]) == 2 and all(t["status"] == "failed" for t in doc["trials"])
    for t in doc["trials"]:
        assert t["error"].startswith(f"study hook before_group failed: {why}"), t["error"]
    assert "problems" not in doc["extra"]


def test_a_decision_names_ids_and_a_reason() -> None:
    with pytest.raises(ValueError, match="must say why"):
        GroupDecision(skip=("abc",))
    with pytest.raises(TypeError):
        GroupDecision(skip="abc", reason="a string is not a list of ids")  # type: ignore[arg-type]
    assert GroupDecision(skip=["a", "b"], reason="r").skip == ("a", "b")
    assert GroupDecision().skip == ()


def _gate(enforces: bool, ratio: float | None, active: bool | None) -> GateRun:
    return GateRun("v1-bfq" if enforces else "v1-none", enforces, ratio=ratio, active=active,
                   aggregate_iops=1000.0 if ratio else None, error=None if ratio else "no fio")


def test_the_stored_gate_keeps_its_json_keys_in_order() -> None:
    """extra["sanity_gate/<controller>"] as it always was (docs/results.md; analysis.Gate reads it)."""
    ran = _gate(True, 1.02, False).as_json()
    assert list(ran) == ["controller", "enforces_weights", "weights", "expected_ratio", "ratio",
                         "aggregate_iops", "active", "verdict"]
    assert ran["weights"] == [100, 400] and ran["expected_ratio"] == 4.0
    failed = _gate(True, None, None).as_json()
    assert list(failed) == ["controller", "enforces_weights", "weights", "expected_ratio", "ratio", "active",
                            "error", "verdict"]
    assert failed["verdict"] == "gate could not run: no fio" and failed["ratio"] is None


def test_cgroup_gate_skips_only_an_inactive_enforcing_controller() -> None:
    """cgroup-weights' decision from its measured gate: an enforcing controller that did not
    enforce 1:4 skips its whole sweep, saying so; the control and a gate that could not run skip
    nothing (the trials then show what happened)."""
    d = gate_decision(_gate(True, 1.02, False), ["a", "b"])
    assert d is not None and d.skip == ("a", "b")
    assert d.reason == ("sanity gate v1-bfq: controller not active (observed 1.02 for weights 1:4); "
                        "the sweep was skipped")
    assert gate_decision(_gate(True, 3.9, True), ["a"]) is None
    assert gate_decision(_gate(False, 1.0, False), ["a"]) is None
    assert gate_decision(_gate(True, None, None), ["a"]) is None

