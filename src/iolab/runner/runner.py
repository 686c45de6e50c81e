"""The runner: for each trial, prepare target -> start probes -> run workload -> stop probes
-> store result and manifest in one transaction -> release target.

It never lets one failed trial end a study, never lets an interruption lose a finished
trial, and never leaves behind what it created (the ledger undoes it, also on Ctrl-C).
"""

from __future__ import annotations

import math
import signal
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from iolab.core import registry
from iolab.core.errors import Interrupted, IolabError, TrialFailed
from iolab.core.model import Config, Trial, TrialResult
from iolab.core.resources import Ledger
from iolab.probes.base import Probe
from iolab.probes.registry import probe_classes
from iolab.runner import confounders, plan
from iolab.runner.manifest import environment
from iolab.runner.progress import Reporter, reporter_for
from iolab.store.sqlite import Store
from iolab.studies.spec import StudySpec
from iolab.targets.base import Placement, Target
from iolab.workloads.base import Workload

# A built-in study may run checks on a prepared target before its trials (e.g. a sanity gate).
GroupHook = Callable[["Runner", Target, Placement, list[Config]], None]


@dataclass
class ConfigState:
    ok_values: list[float] = field(default_factory=list)
    attempts: int = 0
    failures: int = 0


def new_run_id(study: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{study}-{uuid.uuid4().hex[:4]}"


class Runner:
    def __init__(self, spec: StudySpec, store: Store, console: Console | None = None,
                 ledger: Ledger | None = None, before_group: GroupHook | None = None):
        self.spec = spec
        self.store = store
        self.console = console or Console(stderr=True)
        self.ledger = ledger or Ledger()
        self.before_group = before_group
        self.state: dict[str, ConfigState] = defaultdict(ConfigState)
        self.run_id = ""
        self.reporter: Reporter = reporter_for(self.console)

    # -- planning ------------------------------------------------------------
    def instantiate(self) -> None:
        """Build every target and workload object and run preflights: fails before creating anything."""
        self.workloads = {c.id: registry.workload_class(c.workload["kind"])(
            registry.workload_class(c.workload["kind"]).Params(**c.workload)) for c in self.spec.configs}
        self.targets: dict[str, Target] = {}
        for g in plan.target_groups(self.spec):
            cls = registry.target_class(g.target["kind"])
            t = cls(cls.Params(**g.target), self.ledger)
            t.preflight()
            self.targets[_tkey(g.target)] = t

    def main_metric(self, c: Config) -> str:
        return self.spec.settings.metric or self.workloads[c.id].main_metric

    def timeout_for(self, c: Config) -> float:
        return self.spec.settings.trial_timeout or 3 * self.workloads[c.id].estimate_seconds() + 60

    def estimate_seconds(self) -> float:
        reps = self.spec.settings.repetitions
        return sum(self.workloads[c.id].estimate_seconds() * reps for c in self.spec.configs)

    def dry_run_lines(self) -> list[str]:
        s = self.spec.settings
        n = len(self.spec.configs)
        lines = [f"study {s.name}: {n} configuration(s) x {s.repetitions}..{s.max_repetitions} repetitions "
                 f"= {n * s.repetitions}..{n * s.max_repetitions} trials",
                 f"adaptive stop: 95% CI half-width of the main metric <= {s.ci_target:.0%} of its mean",
                 f"estimated time: {_fmt_s(self.estimate_seconds())} at {s.repetitions} repetitions "
                 f"(up to {_fmt_s(self.estimate_seconds() * s.max_repetitions / s.repetitions)})",
                 f"order: {s.order}", "will create or touch:"]
        for t in self.targets.values():
            lines += [f"  - {line}" for line in t.describe()]
        lines.append("configurations:")
        for c in self.spec.configs:
            label = ", ".join(f"{k}={v}" for k, v in c.labels.items()) or "(single)"
            lines.append(f"  - {c.id} {label}  [timeout {self.timeout_for(c):.0f} s, metric {self.main_metric(c)}]")
        return lines

    # -- running -------------------------------------------------------------
    def start(self, run_id: str | None = None) -> str:
        """Create a new run, or pick up an existing one (resume): finished trials are kept."""
        if run_id is None:
            self.run_id = new_run_id(self.spec.name)
            self.store.create_run(self.run_id, self.spec.name, self.spec.source, self.spec.raw, self.spec.options,
                                  environment())
        else:
            self.run_id = run_id
            for t in self.store.trials(run_id):
                st = self.state[t.config_id]
                st.attempts += 1
                if t.status == "ok":
                    metric = self.main_metric(next(c for c in self.spec.configs if c.id == t.config_id)) \
                        if any(c.id == t.config_id for c in self.spec.configs) else None
                    st.ok_values.append(t.metrics.get(metric, math.nan) if metric else math.nan)
                else:
                    st.failures += 1
        return self.run_id

    def run(self) -> str:
        """Run every missing trial; returns the final status."""
        status = "failed"
        self.reporter.start(self._remaining_estimate())
        try:
            with _signals_as_interrupt():
                for g in plan.target_groups(self.spec):
                    self._run_group(g)
            status = self._final_status()
        except KeyboardInterrupt:
            status = "partial"
            raise Interrupted(f"interrupted; finished trials are kept. Resume with: iolab run --resume {self.run_id}")
        finally:
            self.reporter.stop()
            with _signals_ignored():
                errors = self.ledger.release_all()
            self.store.set_status(self.run_id, status)
            for e in errors:
                self.console.print(f"[red]cleanup problem:[/red] {e}")
        return status

    def _run_group(self, g: plan.TargetGroup) -> None:
        target = self.targets[_tkey(g.target)]
        pending = [c for c in g.configs if self._wants_more(c)]
        if not pending:
            return
        self.reporter.message(f"setting up target {g.target['kind']} ...")
        try:
            placement = target.setup()
        except (IolabError, OSError, Exception) as exc:  # the study goes on with other targets
            if isinstance(exc, KeyboardInterrupt):
                raise
            for c in pending:
                self._record_failure(Trial(c, self.state[c.id].attempts), f"target setup failed: {exc}", {})
            target.teardown()
            return
        try:
            if self.before_group:
                self.before_group(self, target, placement, pending)
            round_no = 0
            while pending:
                for c in plan.round_order(pending, round_no, self.spec.settings.order == "interleaved"):
                    if self.spec.settings.order == "sequential":
                        while self._wants_more(c):
                            self._run_trial(target, placement, c)
                    elif self._wants_more(c):
                        self._run_trial(target, placement, c)
                round_no += 1
                pending = [c for c in pending if self._wants_more(c)]
                self.reporter.set_total(self.reporter.done + self._remaining_estimate())
        finally:
            target.teardown()

    def _wants_more(self, c: Config) -> bool:
        st = self.state[c.id]
        if st.failures >= 2 and not st.ok_values:
            return False  # a configuration that fails twice with no success is abandoned, not retried forever
        s = self.spec.settings
        return plan.needs_more(st.ok_values, s.repetitions, s.max_repetitions, st.attempts, s.ci_target)

    def _remaining_estimate(self) -> int:
        s = self.spec.settings
        # after the minimum, a configuration that still wants more costs at least one more round
        return sum(max(s.repetitions - len(self.state[c.id].ok_values), 1) if self._wants_more(c) else 0
                   for c in self.spec.configs) or 1

    def _run_trial(self, target: Target, placement: Placement, c: Config) -> None:
        st = self.state[c.id]
        trial = Trial(c, st.attempts)
        label = ", ".join(f"{k}={v}" for k, v in c.labels.items()) or c.id
        self.reporter.trial_started(f"{label} #{trial.repetition + 1}")
        started = time.time()
        probes: list[Probe] = []
        try:
            target.reset_between_trials(placement)
            wanted = set(self.spec.settings.probes)
            probes = [p() for p in probe_classes() if (p.default or p.name in wanted) and p.applies_to(placement)]
            for p in probes:
                p.start(placement)
            result = self.workloads[c.id].run(placement, self.timeout_for(c))
            probe_data = {p.name: p.stop() for p in probes}
            probes = []
        except TrialFailed as exc:
            self._stop_probes(probes)
            self._record_failure(trial, str(exc), placement.manifest, started)
            self.reporter.trial_done(label, f"[red]failed[/red]: {str(exc)[:120]}")
            return
        except (OSError, ValueError, IolabError) as exc:
            self._stop_probes(probes)
            self._record_failure(trial, f"{type(exc).__name__}: {exc}", placement.manifest, started)
            self.reporter.trial_done(label, f"[red]failed[/red]: {str(exc)[:120]}")
            return
        flags = list(placement.manifest.get("flags", [])) + result.flags + \
            confounders.detect(c.workload, result.metrics, probe_data)
        metric = self.main_metric(c)
        manifest = {"target": placement.manifest, "workload": c.workload, "job": result.job_text,
                    "executor": placement.executor.name, "timeout_s": self.timeout_for(c)}
        metrics = dict(result.metrics)
        if result.cpu_busy is not None:
            metrics["generator_cpu_busy"] = result.cpu_busy
        tr = TrialResult(trial.id, c.id, trial.repetition, _params(c), "ok", None, metrics, probe_data, manifest,
                         flags, started, time.time())
        self.store.save_trial(self.run_id, tr, result.raw)
        st.attempts += 1
        st.ok_values.append(metrics.get(metric, math.nan))
        value = metrics.get(metric)
        shown = f"{metric}={value:.4g}" if isinstance(value, (int, float)) else "ok"
        self.reporter.trial_done(label, shown + (f" [yellow]({len(flags)} flag(s))[/yellow]" if flags else ""))

    def _stop_probes(self, probes: list[Probe]) -> None:
        for p in probes:
            try:
                p.stop()
            except Exception:  # a probe failing after a failed trial must not mask the trial's error
                pass

    def _record_failure(self, trial: Trial, error: str, target_manifest: dict[str, Any],
                        started: float | None = None) -> None:
        st = self.state[trial.config.id]
        tr = TrialResult(trial.id, trial.config.id, trial.repetition, _params(trial.config), "failed", error, {}, {},
                         {"target": target_manifest, "workload": trial.config.workload}, [], started or time.time(),
                         time.time())
        self.store.save_trial(self.run_id, tr, None)
        st.attempts += 1
        st.failures += 1

    def _final_status(self) -> str:
        s = self.spec.settings
        oks = [len(self.state[c.id].ok_values) for c in self.spec.configs]
        if not any(oks):
            return "failed"
        return "complete" if all(n >= s.repetitions for n in oks) else "partial"


def _params(c: Config) -> dict[str, Any]:
    """What a trial's 'params' holds in the results contract: the axis labels plus the full configs."""
    return {**c.labels, "_target": c.target, "_workload": c.workload}


def _tkey(target: dict) -> str:
    return repr(sorted(target.items()))


def _fmt_s(s: float) -> str:
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"


@contextmanager
def _signals_as_interrupt() -> Iterator[None]:
    """SIGTERM behaves like Ctrl-C: stop, clean up, keep finished trials."""
    def _raise(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextmanager
def _signals_ignored() -> Iterator[None]:
    """A second Ctrl-C during cleanup must not strand half-removed resources."""
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    old_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
