"""Running an A/B study (`iolab ab`): two variants of a study interleaved in randomised blocks.

An A/B study is a run of its own (study "ab", analysis "ab", no trials) whose `extra.blocks` lists
its blocks: in block j both variants ran, in an order drawn by a seeded coin, each as an ordinary
run of its variant's spec (`extra.children` maps "07-B" to that run), with a fixed number of
repetitions per configuration. Each block is a fresh level for each variant: a new Runner, so a
new target set-up (loop device, image, guest boot), new workload processes, and a load command
of the variant's (e.g. `stress-ng --cpu 1` beside B only) started before its run and ended after
it, in the same ledger as the run's resources. After every look of the design (analysis/ab.py)
the blocks so far are judged; the study stops when every row is decided or the budget is spent.
Child runs carry `options.ab` (`iolab history` and `compare`'s store of earlier runs leave them out).
A load that ends before its variant's run does (it exited, or something killed it) makes that
side of the block invalid (`extra.blocks[].invalid`, its status named) and ends the study after
that block: the verdict sets that side aside, and the CLI exits 4 (analysis/ab.py `incomplete`).
"""

from __future__ import annotations

import os
import random
import shlex
import shutil
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from iolab.analysis import ab
from iolab.cgroups.executor import HostExecutor
from iolab.core import metrics, signals
from iolab.core.errors import InputError, Interrupted, IolabError
from iolab.core.exec import ExecRequest, Running, set_session_policy
from iolab.core.resources import Ledger
from iolab.runner.manifest import environment
from iolab.runner.runner import Runner, new_run_id
from iolab.spec.study import StudySpec, from_dict, load_spec_file
from iolab.store.base import Store
from iolab.studies import builtin, overrides

NAME = "ab"
LOAD_TIMEOUT_S = 7 * 24 * 3600  # the load ends with its block; this is only its executor's deadline


class NoVerdict(IolabError):
    """An A/B study that measured nothing on both sides: neither 'regression' nor 'no regression'."""

    exit_status = 3


class Incomplete(IolabError):
    """No regression shown, but not a pass: B failed or stalled where A did not and that row is
    undecided or invalid, or a load ended before its run (analysis/ab.py `incomplete`)."""

    exit_status = 4


def check_metric_names(a: Variant, b: Variant, names: Sequence[str]) -> None:
    """--metric: each name must be one the variants' workloads declare (core/metrics.py), checked
    before anything is created; the message lists the names they declare."""
    declared = [metrics.for_workload(c.workload) for v in (a, b) for c in v.spec.configs]
    unknown = [n for n in names if not any(n in d for d in declared)]
    if unknown:
        known = sorted({m.name for d in declared for m in d})
        raise InputError(f"--metric {', '.join(map(repr, unknown))}: no such metric in A's or B's workloads; "
                         f"they declare {', '.join(known)}")


@dataclass
class Variant:
    """One side of the study: its spec (with any overrides applied) and what runs beside it."""

    name: str  # "A" or "B"
    spec: StudySpec
    source: str  # the spec file, for the record
    overrides: list[str] = field(default_factory=list)
    load: list[str] = field(default_factory=list)  # argv of a command run beside each of its blocks
    hook: Any = None
    env: dict[str, str] = field(default_factory=dict)  # iolab's environment during its runs (e.g. PATH)


def variants(spec_a: Path, spec_b: Path | None, set_a: Sequence[str], set_b: Sequence[str], load_a: str | None,
             load_b: str | None, env_a: Sequence[str] = (), env_b: Sequence[str] = ()) -> tuple[Variant, Variant]:
    """Both variants, validated before anything is created: the specs (B defaults to A's file) with
    their overrides applied (a wrong key is the spec's own error, exit 2), the same configurations
    on both sides (matched by their axis labels), load commands that exist."""
    out = []
    for name, path, sets, load, env in (("A", spec_a, set_a, load_a, env_a),
                                        ("B", spec_b or spec_a, set_b, load_b, env_b)):
        base = load_spec_file(path)
        doc = overrides.apply(base.raw, sets, f"--set-{name.lower()}")
        spec = from_dict(doc, f"{path} (variant {name}{': ' + ', '.join(sets) if sets else ''})", base.options)
        argv = _load_argv(load, f"--load-{name.lower()}")
        hook = getattr(builtin.analysis_module(spec.settings.analysis), "before_group", None)
        out.append(Variant(name, spec, str(path), list(sets), argv, hook, _env(env, f"--env-{name.lower()}")))
    a, b = out
    la, lb = _labels(a.spec), _labels(b.spec)
    if la != lb:
        raise InputError("A and B must have the same configurations (the same axes and values), to be compared "
                         f"block by block: only in A: {sorted(la - lb) or 'none'}; "
                         f"only in B: {sorted(lb - la) or 'none'}")
    return a, b


def _env(pairs: Sequence[str], option: str) -> dict[str, str]:
    """NAME=VALUE pairs: iolab's environment while the variant runs, so every tool it finds on PATH,
    and every process it starts, sees them (two QEMU builds: PATH=/opt/qemu-b/bin:/usr/bin:/bin)."""
    out = {}
    for text in pairs:
        name, sep, value = text.partition("=")
        if not sep or not name or not all(c.isalnum() or c == "_" for c in name) or name[0].isdigit():
            raise InputError(f"{option} {text!r}: expected NAME=VALUE with a variable name (letters, digits, _)")
        if name.startswith("IOLAB_"):
            raise InputError(f"{option} {text!r}: iolab's own settings ({name}) are the study's, not a variant's")
        out[name] = value
    return out


def _labels(spec: StudySpec) -> set[str]:
    return {", ".join(f"{k}={v}" for k, v in c.labels.items()) for c in spec.configs}


def _load_argv(cmd: str | None, option: str) -> list[str]:
    if not cmd:
        return []
    try:
        argv = shlex.split(cmd)
    except ValueError as exc:
        raise InputError(f"{option} {cmd!r}: {exc}") from None
    if not argv or shutil.which(argv[0]) is None:
        raise InputError(f"{option} {cmd!r}: no command {argv[0] if argv else ''!r} on PATH")
    return argv


def fixed_repetitions(spec: StudySpec, repetitions: int) -> StudySpec:
    """The variant as one block runs it: exactly `repetitions` successful trials per configuration."""
    doc = dict(spec.raw)
    study = dict(doc.get("study") or {})
    study.update(repetitions=repetitions, max_repetitions=repetitions)
    doc["study"] = study
    return from_dict(doc, spec.source, spec.options)


class ABStudy:
    """One A/B study in a store: run blocks until decided, or the budget ends."""

    def __init__(self, store: Store, console: Console, a: Variant, b: Variant, design: ab.Design,
                 repetitions: int, seed: int, metric_names: tuple[str, ...] = (),
                 on_block: Callable[[int, list[ab.Row]], None] | None = None):
        self.store, self.console = store, console
        self.variants = {"A": a, "B": b}
        self.design, self.repetitions, self.seed = design, repetitions, seed
        self.metric_names = metric_names
        self.on_block = on_block
        self.run_id = ""
        self.blocks: list[dict[str, Any]] = []
        self.children: dict[str, str] = {}
        self.rows: list[ab.Row] = []
        self.status = "running"
        self.load_failures: list[str] = []  # a load that ended before its run: what and when

    @staticmethod
    def plan_lines(a: Variant, b: Variant, design: ab.Design, repetitions: int, seed: int) -> list[str]:
        """--dry-run: the design and each variant's plan; instantiates (preflight) both, creates nothing."""
        lines = [f"A/B study, seed {seed}: blocks of one fresh run of A and one of B in random order, "
                 f"{repetitions} trial(s) per configuration each; looks after {', '.join(map(str, design.looks))} "
                 f"blocks (each at {design.look_alpha:.3g}); minimum effect ±{design.min_effect:.0%}"]
        for v in (a, b):
            runner = Runner(fixed_repetitions(v.spec, repetitions), None, Console(stderr=True),  # type: ignore[arg-type]  # a plan: no store
                            before_group=v.hook)
            runner.instantiate()
            lines.append(f"== {v.name}: {v.source}" + (f" with {', '.join(v.overrides)}" if v.overrides else "")
                         + (f"; beside it: {shlex.join(v.load)}" if v.load else "")
                         + (f"; environment {' '.join(f'{k}={x}' for k, x in v.env.items())}" if v.env else ""))
            lines += [f"   {line}" for line in runner.dry_run_lines()]
        return lines

    def start(self) -> str:
        self.run_id = new_run_id(NAME)
        about = "A/B study: two variants in randomised blocks"
        spec = {"study": {"name": NAME, "analysis": NAME, "description": about},
                "ab": {"design": vars(self.design) | {"looks": self.design.looks}, "repetitions": self.repetitions,
                       "seed": self.seed, "metrics": list(self.metric_names),
                       "variants": {k: {"source": v.source, "overrides": v.overrides, "load": v.load, "env": v.env,
                                        "spec": v.spec.raw} for k, v in self.variants.items()}}}
        self.store.create_run(self.run_id, NAME, "ab", spec, {"seed": self.seed}, environment())
        return self.run_id

    def run(self) -> list[ab.Row]:
        """Blocks until every row is decided at a look, or max_blocks; returns the verdict rows."""
        coin = random.Random(self.seed)
        looks = set(self.design.looks)
        try:
            for j in range(1, self.design.max_blocks + 1):
                order = ["A", "B"] if coin.random() < 0.5 else ["B", "A"]
                self._block(j, order)
                if self.load_failures:  # the variant asked for was not what ran: stop, judge what is there
                    break
                if j in looks:
                    final = j == self.design.max_blocks
                    self.rows = ab.judge(ab.rows_of(self._documents(), self.metric_names), self.design, final,
                                         intervals=False)
                    self.store.set_extra(self.run_id, "decision", {
                        "blocks": j, "look": j, "decided": ab.decided(self.rows),
                        "verdicts": {f"{r.config} {r.metric}": r.verdict for r in self.rows}})
                    if self.on_block:
                        self.on_block(j, self.rows)
                    if self.rows and ab.decided(self.rows):
                        break
            # the verdict with every interval (and 'undecided' with its hint when the budget ended)
            self.rows = ab.judge(ab.rows_of(self._documents(), self.metric_names), self.design, True)
            self.status = "complete" if self.rows and any(r.verdict != "invalid" for r in self.rows) else "failed"
        except (Interrupted, KeyboardInterrupt):  # inside a block's run, or between its steps
            self.status = "partial"
            raise Interrupted(f"interrupted: A/B study {self.run_id} keeps its {len(self.blocks)} block(s) so far (its "
                              "report judges them); an A/B study is not resumed: start it again") from None
        except BaseException:
            self.status = "partial"
            raise
        finally:
            self.store.set_status(self.run_id, self.status)
        return self.rows

    def _block(self, j: int, order: list[str]) -> None:
        entry: dict[str, Any] = {"block": j, "order": order, "runs": {}}
        self.blocks.append(entry)
        self.store.set_extra(self.run_id, "blocks", self.blocks)
        for name in order:
            v = self.variants[name]
            spec = fixed_repetitions(v.spec, self.repetitions)
            spec = replace(spec, options={**spec.options, "ab": {"run": self.run_id, "variant": name, "block": j}})
            ledger = _WatchedLedger()
            saved = {k: os.environ.get(k) for k in v.env}
            load: tuple[HostExecutor, Running] | None = None
            watch: LoadWatch | None = None
            try:
                os.environ.update(v.env)  # the variant's tools (PATH) and environment, for its run only
                if v.load:
                    load = _start_load(v.load, ledger, spec.settings.workload_session)
                    watch = ledger.watch = LoadWatch(load[1])
                runner = Runner(spec, self.store, self.console, ledger=ledger, before_group=v.hook)
                runner.instantiate()
                child = runner.start()
                entry["runs"][name] = child
                self.children[f"{j:02d}-{name}"] = child
                self.store.set_extra(self.run_id, "children", self.children)
                self.store.set_extra(self.run_id, "blocks", self.blocks)
                self.console.print(f"block {j}/{self.design.max_blocks}: [bold]{name}[/bold] run {child}"
                                   + (f" beside `{shlex.join(v.load)}`" if v.load else ""))
                runner.run()
            finally:
                with signals.held():  # a second Ctrl-C must not strand the load or the ledger's entries
                    if watch is not None:
                        watch.stopping = True
                    if load is not None:
                        _stop_load(*load)
                    ledger.release_all()  # also ends a load whose start a signal cut short (its pgroup entry)
                    for k, old in saved.items():
                        if old is None:
                            os.environ.pop(k, None)
                        else:
                            os.environ[k] = old
            if watch is not None and (how := watch.early()):
                why = (f"block {j}: {name}'s load `{shlex.join(v.load)}` {how}, before {name}'s run {child} ended: "
                       f"that run is set aside and the study stops (--load-{name.lower()})")
                entry.setdefault("invalid", {})[name] = why
                self.load_failures.append(why)
                self.store.set_extra(self.run_id, "blocks", self.blocks)
                self.console.print(f"[red]{why}[/red]")

    def _documents(self) -> list[dict[str, dict[str, Any]]]:
        return [{k: trials_document(self.store, rid) | ({"invalid": blk["invalid"][k]} if k in blk.get("invalid", {})
                                                        else {}) for k, rid in blk["runs"].items()}
                for blk in self.blocks]


def trials_document(store: Store, run_id: str) -> dict[str, Any]:
    """The part of a run's results document (docs/results.md) the A/B verdict reads: its trials."""
    return {"run_id": run_id, "trials": [{
        "id": t.trial_id, "params": t.params, "repetition": t.repetition, "status": t.status, "error": t.error,
        "metrics": t.metrics, "flags": t.flags, "manifest": t.manifest} for t in store.trials(run_id)]}


def _start_load(argv: list[str], ledger: Ledger, session: str) -> tuple[HostExecutor, Running]:
    """The variant's load command, started like the variant's workloads: in the same session
    placement (`workload_session`: with "shared" it runs in iolab's session beside them, so in
    their autogroup; with "own" in a session of its own), in a cgroup leaf of its own, in the ledger
    before it exists, so it ends with its block, on Ctrl-C, or with `iolab clean`."""
    executor = HostExecutor(ledger=ledger)
    previous = set_session_policy(session)
    try:
        return executor, executor.spawn(ExecRequest(argv=argv, timeout_s=LOAD_TIMEOUT_S))
    finally:
        set_session_policy(previous)


class LoadWatch:
    """Waits in a thread, without reaping (WNOWAIT: `Running.wait` still reaps), for the load to
    end, and keeps how it ended, so a load that ended before its run is told from the kill that
    ends it with the run (`stopping`, set before the run's ledger or `_stop_load` kills it)."""

    def __init__(self, running: Running):
        self.pid: int = running.proc.pid  # type: ignore[attr-defined]  # a HostExecutor's process
        self.t0 = time.monotonic()
        self.stopping = False
        self.ended: tuple[str, float, bool] | None = None  # (how, seconds after its start, while stopping)
        self.thread = threading.Thread(target=self._wait, name=f"ab-load-{self.pid}", daemon=True)
        self.thread.start()

    def _wait(self) -> None:
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
        except OSError:  # reaped already: ended by iolab's own kill
            return
        if info is None:
            return
        stopping = self.stopping
        if info.si_code == os.CLD_EXITED:
            how = f"exited with status {info.si_status}"
        else:
            how = f"was killed by {signal.Signals(info.si_status).name}"
        self.ended = (how, time.monotonic() - self.t0, stopping)

    def early(self) -> str:
        """'' while it ran until its run ended; else how and when it ended."""
        self.thread.join(timeout=5)
        if self.ended is None or self.ended[2]:
            return ""
        how, after, _ = self.ended
        return f"{how} {after:.1f} s after it started"


class _WatchedLedger(Ledger):
    """A block side's ledger: its release (the run's end) tells the load's watch that what ends
    the load now is iolab."""

    watch: LoadWatch | None = None

    def release_all(self) -> list[str]:
        if self.watch is not None:
            self.watch.stopping = True
        return super().release_all()


def _stop_load(executor: HostExecutor, running: Running) -> None:
    """End the load and reap it. The variant's run ends first and releases its ledger, which holds
    the load too: then its cgroup leaf is already gone, and reaping is all that is left."""
    try:
        running.kill()
        running.wait()
    except OSError:
        pass  # its leaf was released with the run's ledger: the process is gone (and reaped by wait)
    finally:
        executor.close()
