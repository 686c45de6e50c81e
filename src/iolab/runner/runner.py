"""The runner: for each trial, prepare target -> start probes -> run workload -> stop probes
-> store result and manifest in one transaction -> release target.

It never lets one failed trial end a study, never lets an interruption lose a finished
trial, and never leaves behind what it created (the ledger undoes it, also on Ctrl-C).
Any exception inside a trial, a study hook or a target's setup/teardown is that part's
failure, stored with its traceback; only SIGINT, SIGTERM and SIGHUP stop a run. One run
is run by one process at a time: the store records the owner (core.owner) and a second
`--resume` of a run whose owner is alive is refused.

Size: the trial lifecycle (setup, study hook, trial cgroup, probes, workload, confounders,
store, failure records, teardown) is one sequence whose error paths must be read together;
the rules it applies live elsewhere (analysis/plan.py, analysis/sequential.py, store/).
"""

from __future__ import annotations

import functools
import math
import re
import socket
import time
import traceback
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape

from iolab.analysis import budget as spend
from iolab.analysis import plan
from iolab.cgroups import trial as trial_cgroups
from iolab.cgroups.trial import TrialCgroup
from iolab.core import metrics, registry, signals
from iolab.core import owner as owners
from iolab.core.errors import (
    CapabilityMissing,
    DataDirUnwritable,
    InputError,
    Interrupted,
    IolabError,
    RefusedError,
    SpecError,
    TrialFailed,
)
from iolab.core.exec import set_session_policy
from iolab.core.metrics import MetricSet, TrialDeclarations
from iolab.core.model import Config, Trial, TrialResult
from iolab.core.resources import Ledger
from iolab.core.units import MAX_DURATION
from iolab.probes.base import Probe
from iolab.probes.registry import probe_classes
from iolab.runner import confounders
from iolab.runner.manifest import environment
from iolab.runner.progress import Reporter, reporter_for
from iolab.runner.schedule import EXTRA_KEY as BUDGET_KEY
from iolab.runner.schedule import Budget, Schedule
from iolab.spec.study import StudySpec
from iolab.store.base import Store
from iolab.studies.hooks import GroupContext, GroupHook, configs_to_skip
from iolab.targets.base import TCG_TIME_FACTOR, Placement, Target

# A built-in study may check or prepare a target before its trials (e.g. a sanity gate): its
# GroupHook gets a GroupContext (studies/hooks.py), never the runner, and may answer with
# configurations to skip.
__all__ = ["GroupHook", "Runner"]

# A target set-up that failed with one of these fails the same way when tried again.
FINAL_SETUP_ERRORS = (CapabilityMissing, RefusedError, InputError, SpecError)


@dataclass
class ConfigState:
    """A configuration's repetitions so far: the main metric of every successful trial and the
    failed attempts, counted apart (failures do not use up max_repetitions, plan.StopRule)."""

    ok_values: list[float] = field(default_factory=list)
    attempts: int = 0  # ok + failed: the next trial's repetition index
    failures: int = 0


_ISSUED: set[str] = set()  # the ids this process made: one process never makes the same id twice


def new_run_id(study: str) -> str:
    """time-study-host-random: many machines writing one team store never collide (issue 14). The
    random part is 24 bits: ids made in the same second by one process (a reproduction's studies,
    an A/B's two sides) are kept apart by construction (redrawn on a repeat), so only two processes
    on one host in one second could draw alike (about one in 16 million per pair); 500 draws in one
    process collided in a CI run (the birthday bound: 0.7 % there)."""
    host = re.sub(r"[^A-Za-z0-9-]+", "-", socket.gethostname().split(".")[0])[:24].strip("-") or "host"
    while True:
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{study}-{host}-{uuid.uuid4().hex[:6]}"
        if run_id not in _ISSUED:
            _ISSUED.add(run_id)
            return run_id


class Runner:
    def __init__(self, spec: StudySpec, store: Store, console: Console | None = None,
                 ledger: Ledger | None = None, before_group: GroupHook | None = None,
                 budget: Budget | None = None):
        self.spec = spec
        # a time budget (runner/schedule.py): the minimum, then open verdicts, then intervals. Its
        # seconds None: the budget the run was stored with, if any (resume)
        self.budget = budget
        self.schedule: Schedule | None = None
        self.store = store
        self.console = console or Console(stderr=True)
        self.ledger = ledger or Ledger()
        self.before_group = before_group
        self.state: dict[str, ConfigState] = defaultdict(ConfigState)
        self.skipped: set[str] = set()  # configurations a study hook skipped in this session
        self.run_id = ""
        self.reporter: Reporter = reporter_for(self.console)
        self.problems: list[dict[str, str]] = []  # teardown errors of this session (extra.problems)
        self._session_trial_s: dict[str, list[float]] = defaultdict(list)  # per target, while it is up
        self._dependence: dict[tuple[str, tuple[int, ...]], bool] = {}  # _run_dependent, per repetition counts
        if store is not None:  # what the store does on its own (results kept in its spool, written later);
            reporter = self.reporter  # only the reporter: a study hook reaches the store, never the runner
            store.notify = lambda text: reporter.message(f"[yellow]{escape(text)}[/yellow]")

    # -- planning ------------------------------------------------------------
    def instantiate(self) -> None:
        """Build every target and workload object and run preflights: fails before creating anything."""
        trial_cgroups.layout()  # every trial needs a cgroup hierarchy: say so now, not once per trial
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

    def stop_rule(self, c: Config) -> plan.StopRule:
        """The stopping rule for c: its main metric's declaration (range) decides the interval."""
        return plan.StopRule.of(self.spec.settings, metrics.for_workload(c.workload).get(self.main_metric(c)))

    def timeout_for(self, c: Config, time_factor: float = 1.0) -> float:
        """The spec's trial_timeout, else 3x the workload's estimate (stretched by the placement's
        time factor: a TCG guest) plus a minute, at most 30 days like trial_timeout itself (a job
        file's runtime=99999999999999d must not make a timeout that never comes)."""
        derived = 3 * self.workloads[c.id].estimate_seconds() * time_factor + 60
        return self.spec.settings.trial_timeout or min(derived, MAX_DURATION)

    def estimate_seconds(self) -> float:
        reps = self.spec.settings.repetitions
        return sum(self.workloads[c.id].estimate_seconds() * reps for c in self.spec.configs)

    def dry_run_lines(self) -> list[str]:
        s = self.spec.settings
        n = len(self.spec.configs)
        lines = [f"study {s.name}: {n} configuration(s) x {s.repetitions}..{s.max_repetitions} repetitions "
                 f"= {n * s.repetitions}..{n * s.max_repetitions} trials",
                 f"adaptive stop: 95% interval of the main metric within ±{s.ci_target:.0%} of its median and no "
                 f"run-order check tripped (looks {s.repetitions}..{s.max_repetitions}, docs/statistics.md); "
                 f"failed attempts do not count, a configuration is abandoned after "
                 f"{plan.MAX_FAILURES_WITHOUT_SUCCESS} failures with no success or {s.max_repetitions} failures",
                 f"estimated time: {_fmt_s(self.estimate_seconds())} at {s.repetitions} repetitions "
                 f"(up to {_fmt_s(self.estimate_seconds() * s.max_repetitions / s.repetitions)})",
                 f"order: {s.order}"]
        if self.budget is not None and self.budget.seconds:
            after = (["the configurations behind verdicts still undecided"] if self.budget.verdicts is not None
                     else []) + (["intervals wider than ±ci_target"] if self.budget.intervals else [])
            lines.append(f"budget: {spend.fmt_seconds(self.budget.seconds)} of wall time: "
                         + ("the minimum first (stopped too if the budget runs out)" if self.budget.hard else
                            "the minimum always runs whole")
                         + (f", then repetitions go to {', then to '.join(after)}" if after else ", nothing after it")
                         + "; no round starts that the measured times say cannot finish")
        lines.append("will create or touch:")
        for t in self.targets.values():
            lines += [f"  - {line}" for line in t.describe()]
            lines.append(f"  - {t.kind}: {t.offer(t.params).summary()}")
        # what a workload itself touches (a device a job file writes, the tenant's database)
        lines += sorted({f"  - {line}" for w in self.workloads.values() for line in w.touches()})
        lines.append("configurations:")
        for c in self.spec.configs:
            label = ", ".join(f"{k}={v}" for k, v in c.labels.items()) or "(single)"
            lines.append(f"  - {c.id} {label}  [timeout {self.timeout_for(c):.0f} s, metric {self.main_metric(c)}]")
        lines.append(f"(timeouts as on the host and under KVM; in a TCG guest the estimate is stretched "
                     f"x{TCG_TIME_FACTOR:g})")
        return lines

    # -- running -------------------------------------------------------------
    def start(self, run_id: str | None = None) -> str:
        """Create a new run, or pick up an existing one (resume): finished trials are kept."""
        if run_id is None:
            if self.budget is not None and self.budget.seconds:
                self.schedule = Schedule(self.budget)
            self.run_id = new_run_id(self.spec.name)
            self.store.create_run(self.run_id, self.spec.name, self.spec.source, self.spec.raw, self.spec.options,
                                  {**environment(), "workload_session": self.spec.settings.workload_session})
            self.store.claim_run(self.run_id, owners.me().token)
        else:
            holder = self.store.claim_run(run_id, owners.me().token)
            if holder is not None:
                o = owners.parse_token(holder)
                raise RefusedError(f"run {run_id} is being run right now by another iolab process "
                                   f"(pid {o.pid if o else holder}); wait for it to end or stop it, then resume")
            self.run_id = run_id
            extra = self.store.resolve(run_id).extra
            self.problems = list(extra.get("problems") or [])
            self.schedule = _resumed_schedule(self.budget, extra.get(BUDGET_KEY))
            for t in self.store.trials(run_id):
                if self.schedule is not None and t.ended >= t.started:
                    self.schedule.trial_ran(t.config_id, t.ended - t.started)
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
        previous_session = set_session_policy(self.spec.settings.workload_session)
        try:
            with signals.as_interrupt():
                if self.schedule is not None:
                    self.schedule.run(self)
                else:
                    for g in plan.target_groups(self.spec):
                        self._run_group(g)
                signals.raise_if_stop_pending()  # never call a run finished past a stop signal
            status = self._final_status()
        except KeyboardInterrupt:
            signals.stop_acted_on()
            status = "partial"
            raise Interrupted("interrupted; finished trials are kept. "
                              f"Resume with: iolab run --resume {self.run_id}") from None
        except DataDirUnwritable as exc:
            status = "partial"
            raise IolabError(f"the run stopped: {exc}. Its trials stored before are kept. Free space (or make "
                             f"the data dir writable), then `iolab clean` and `iolab run --resume {self.run_id}`"
                             ) from None
        finally:
            set_session_policy(previous_session)
            self.reporter.stop()
            with signals.ignored():
                errors = self.ledger.release_all()
                try:
                    self.store.set_status(self.run_id, status)
                    self.store.release_run(self.run_id, owners.me().token)
                except (Exception, DataDirUnwritable) as exc:  # the run's end is told on the console then
                    errors.append(f"could not record the run's status {status!r} in the store: {exc}")
            for e in errors:
                self.console.print(f"[red]cleanup problem:[/red] {e}")
        return status

    def _run_group(self, g: plan.TargetGroup, wants: Callable[[Config], bool] | None = None,
                   after_round: Callable[[plan.TargetGroup], None] | None = None) -> int:
        """Set the target up, run rounds of the configurations that `wants` more (default: the
        stopping rule) and tear it down; returns the trials run. Under a budget every set-up, round
        and trial must fit first (runner/schedule.py), and `after_round` may change what `wants`."""
        wants = wants or self._wants_more
        sched = self.schedule
        target = self.targets[_tkey(g.target)]
        pending = [c for c in g.configs if wants(c)]
        if not pending or (sched is not None and not sched.affords(sched.setup_s(g) + sched.round_s(pending))):
            return 0
        entered = time.monotonic()
        placement = self._set_up(target, g, pending, wants)
        if placement is None:
            return 0
        pending = [c for c in pending if wants(c)]
        ran = 0
        try:
            if self.before_group:
                hook_cgroup: TrialCgroup | None = None
                try:
                    hook_cgroup = TrialCgroup.create(self.ledger)  # its processes are ended like a trial's
                    ctx = GroupContext(pending, placement.within(hook_cgroup),
                                       functools.partial(self.store.set_extra, self.run_id), self.reporter.message)
                    decision = self.before_group(ctx)
                    skip = configs_to_skip(decision, pending)
                except Exception as exc:  # the hook's failure is this group's, not the run's
                    tb = traceback.format_exc()
                    for c in pending:
                        self._record_failure(Trial(c, self.state[c.id].attempts),
                                             f"study hook before_group failed: {_why(exc)}", placement.manifest, tb=tb)
                    self.reporter.message(f"[red]study hook failed[/red]: {_why(exc)[:160]}; skipping this target")
                    return ran
                finally:
                    self._end_cgroup(hook_cgroup, "the study hook before_group")
                if skip and decision is not None:
                    self._skip(skip, decision.reason, placement)
                    pending = [c for c in pending if c.id not in self.skipped]
            round_no = 0
            while pending:
                if sched is not None and not sched.affords_round(sched.round_s(pending)):
                    break  # never start a round the budget cannot finish
                for c in plan.round_order(pending, round_no, self.spec.settings.order == "interleaved"):
                    while wants(c) and (sched is None or sched.affords(sched.trial_s(c.id))):
                        self._timed_trial(target, placement, c)
                        ran += 1
                        if self.spec.settings.order != "sequential":
                            break
                round_no += 1
                if after_round is not None:
                    after_round(g)
                pending = [c for c in g.configs if wants(c)]
                self.reporter.set_total(self.reporter.done + self._remaining_estimate())
                if sched is not None and sched.ran_out:
                    break
        finally:
            self._teardown(target)
            if sched is not None:
                sched.setup_ran(g, time.monotonic() - entered - sum(self._session_trial_s.pop(_tkey(g.target), [])))
        return ran

    def _timed_trial(self, target: Target, placement: Placement, c: Config) -> None:
        """One trial, its wall time (probes and storing included) told to the budget."""
        started = time.monotonic()
        self._run_trial(target, placement, c)
        took = time.monotonic() - started
        self._session_trial_s[_tkey(c.target)].append(took)
        if self.schedule is not None:
            self.schedule.trial_ran(c.id, took)
        signals.raise_if_stop_pending()  # a Ctrl-C Python had to drop inside the trial stops the run here

    def _set_up(self, target: Target, g: plan.TargetGroup, pending: list[Config],
                wants: Callable[[Config], bool] | None = None) -> Placement | None:
        """The target's placement, or None when its configurations are given up. A failed set-up is
        one failed attempt of each pending configuration, and set-up is tried again while they
        still want trials (the same StopRule.abandoned bound as a trial's failures: two without a
        success), so a transient error (a boot timeout on a loaded host, a busy loop device) costs
        one attempt, not the target. What will fail the same way again is not retried: a missing
        capability, a refusal, an invalid input. The study goes on with other targets either way."""
        while pending:
            self.reporter.message(f"setting up target {g.target['kind']} ...")
            try:
                placement = target.setup()
                for note in placement.manifest.get("notes") or ():  # how it came up (e.g. a guest restored or booted)
                    self.reporter.message(str(note))
                return placement
            except Exception as exc:
                tb = traceback.format_exc()
                for c in pending:
                    self._record_failure(Trial(c, self.state[c.id].attempts), f"target setup failed: {_why(exc)}", {},
                                         tb=tb)
                self._teardown(target)
                if isinstance(exc, FINAL_SETUP_ERRORS):
                    return None
                pending = [c for c in pending if (wants or self._wants_more)(c)]
                if pending:
                    self.reporter.message(f"[yellow]target setup failed[/yellow]: {_why(exc)[:160]}; trying again")
        return None

    def _teardown(self, target: Target) -> None:
        """A teardown error is reported and stored (extra.problems); the run goes on, and what
        the target could not undo stays in the ledger for release_all at the end."""
        try:
            target.teardown()
        except Exception as exc:
            self._problem(f"teardown of target {target.kind}", exc)

    def _problem(self, where: str, exc: BaseException) -> None:
        self.problems.append({"where": where, "error": _why(exc), "traceback": traceback.format_exc()})
        self.console.print(f"[red]{where} failed:[/red] {_why(exc)}")
        try:
            self.store.set_extra(self.run_id, "problems", self.problems)
        except Exception as store_exc:  # the console message above is then all there is
            self.console.print(f"[red]could not store that problem:[/red] {store_exc}")

    def _skip(self, configs: list[Config], reason: str, placement: Placement) -> None:
        """A study hook's skip: one record per configuration, status failed, error saying why."""
        for c in configs:
            self._record_failure(Trial(c, self.state[c.id].attempts),
                                 f"skipped by study hook before_group: {reason}", placement.manifest)
            self.skipped.add(c.id)
        self.reporter.message(f"[yellow]skipped {len(configs)} configuration(s)[/yellow]: {reason[:160]}")

    def _wants_more(self, c: Config) -> bool:
        if c.id in self.skipped:
            return False
        st = self.state[c.id]
        return bool(self.stop_rule(c).wants_more(st.ok_values, st.failures, self._run_dependent(c)))

    def _run_dependent(self, c: Config) -> bool:
        """The run's lag-1 dependence of c's main metric, pooled over every configuration measuring
        it, is significant (plan.run_dependence): c then goes on to its cap. Recomputed only when a
        repetition arrived (the key is the metric and every configuration's count)."""
        metric = self.main_metric(c)
        peers = [p for p in self.spec.configs if self.main_metric(p) == metric]
        key = (metric, tuple(len(self.state[p.id].ok_values) for p in peers))
        if key not in self._dependence:
            self._dependence[key] = plan.run_dependence([self.state[p.id].ok_values for p in peers])
        return self._dependence[key]

    # -- what a budget's schedule asks (runner/schedule.py Runs) --------------------------------
    def groups(self) -> list[plan.TargetGroup]:
        return plan.target_groups(self.spec)

    def run_group(self, g: plan.TargetGroup, wants: Callable[[Config], bool],
                  after_round: Callable[[plan.TargetGroup], None] | None = None) -> int:
        return self._run_group(g, wants, after_round)

    def n_ok(self, c: Config) -> int:
        return len(self.state[c.id].ok_values)

    def room(self, c: Config) -> int:
        """How many more successful repetitions the cap allows."""
        return max(self.spec.settings.max_repetitions - self.n_ok(c), 0)

    def runnable(self, c: Config) -> bool:
        """Not skipped by the study's hook, not abandoned after failures."""
        st = self.state[c.id]
        return c.id not in self.skipped and not self.stop_rule(c).abandoned(len(st.ok_values), st.failures)

    def wants_more(self, c: Config) -> bool:
        return self._wants_more(c)

    def min_reps(self) -> int:
        return self.spec.settings.repetitions

    def prior_s(self, c: Config) -> float:
        """One trial's seconds before any was measured: the workload's own estimate."""
        return float(self.workloads[c.id].estimate_seconds())

    def message(self, text: str) -> None:
        self.reporter.message(text)

    def save(self, key: str, value: Any) -> None:
        self.store.set_extra(self.run_id, key, value)

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
        cgroup: TrialCgroup | None = None
        try:
            try:
                target.reset_between_trials(placement)
                cgroup = TrialCgroup.create(self.ledger)  # every host process of the trial lives in it
                here = placement.within(cgroup)
                own = c.workload.get("probes")  # a workload's own list replaces the study's
                wanted = set(self.spec.settings.probes if own is None else own)
                probes = [p() for p in probe_classes() if (p.default or p.name in wanted) and p.applies_to(here)]
                for p in probes:
                    p.start(here)
                timeout_s = self.timeout_for(c, placement.time_factor)
                result = self.workloads[c.id].run(here, timeout_s)
                probe_data = {p.name: p.stop() for p in probes}
                ran, probes = probes, []
                flags = list(placement.manifest.get("flags", [])) + result.flags + \
                    confounders.detect(c.workload, result.metrics, probe_data)
                manifest = {"target": placement.manifest, "workload": c.workload, "job": result.job_text,
                            "executor": placement.executor.name, "timeout_s": timeout_s,
                            "trial_cgroup": cgroup.manifest()}
                if result.manifest:  # the trial's own entries (the target's are in "target")
                    manifest["workload_facts"] = result.manifest
                if result.resolution:  # the error bound of the tool's clock, per metric
                    manifest["resolution"] = result.resolution
                trial_metrics = dict(result.metrics)
                if result.cpu_busy is not None:
                    trial_metrics["generator_cpu_busy"] = result.cpu_busy
                manifest[TrialDeclarations.KEY] = self.declarations(c, trial_metrics, ran, probe_data)
            except TrialFailed as exc:  # an explained failure (fio's exit status, a timeout): no traceback
                self._stop_probes(probes)
                self._record_failure(trial, str(exc), placement.manifest, started)
                self.reporter.trial_done(label, f"[red]failed[/red]: {str(exc)[:120]}")
                return
            except Exception as exc:  # anything else (a KeyError in a probe, a parse error): this trial's failure
                tb = traceback.format_exc()
                self._stop_probes(probes)
                self._record_failure(trial, _why(exc), placement.manifest, started, tb=tb)
                self.reporter.trial_done(label, f"[red]failed[/red]: {_why(exc)[:120]}")
                return
        finally:  # whatever the trial left running ends here, before the next trial starts
            self._end_cgroup(cgroup, f"trial {trial.id}")
        metric = self.main_metric(c)
        tr = TrialResult(trial.id, c.id, trial.repetition, _params(c), "ok", None, trial_metrics, probe_data, manifest,
                         flags, started, time.time())
        self.store.save_trial(self.run_id, tr, result.raw)
        st.attempts += 1
        st.ok_values.append(trial_metrics.get(metric, math.nan))
        value = trial_metrics.get(metric)
        shown = f"{metric}={value:.4g}" if isinstance(value, (int, float)) else "ok"
        self.reporter.trial_done(label, shown + (f" [yellow]({len(flags)} flag(s))[/yellow]" if flags else ""))

    def _end_cgroup(self, cgroup: TrialCgroup | None, whose: str) -> None:
        """Kill what a trial (or hook) left running and remove its cgroup. A process that will
        not die is a problem of the run (extra.problems); its ledger entry stays for release_all."""
        if cgroup is None:
            return
        try:
            cgroup.close()
        except Exception as exc:
            self._problem(f"ending the processes of {whose}", exc)

    def _stop_probes(self, probes: list[Probe]) -> None:
        for p in probes:
            try:
                p.stop()
            except Exception:  # a probe failing after a failed trial must not mask the trial's error
                pass

    def declarations(self, c: Config, names: Iterable[str], probes: Iterable[Probe] = (),
                     results: dict[str, Any] | None = None) -> dict[str, Any]:
        """What the trial's values mean, stored with them (core/metrics.py TrialDeclarations): the
        workload's and the probes' declarations of the names it produced, and its main metric."""
        ran = {p.name: (MetricSet(p.metrics), p.attributes, metrics.numeric_keys((results or {}).get(p.name)))
               for p in probes}
        return TrialDeclarations.record(self.main_metric(c), metrics.for_workload(c.workload), names,
                                        ran).to_manifest()

    def _record_failure(self, trial: Trial, error: str, target_manifest: dict[str, Any],
                        started: float | None = None, tb: str | None = None) -> None:
        st = self.state[trial.config.id]
        manifest = {"target": target_manifest, "workload": trial.config.workload,
                    TrialDeclarations.KEY: self.declarations(trial.config, ())}  # its main metric's meaning
        tr = TrialResult(trial.id, trial.config.id, trial.repetition, _params(trial.config), "failed", error, {}, {},
                         manifest, [], started or time.time(), time.time(), traceback=_clip(tb))
        self.store.save_trial(self.run_id, tr, None)
        st.attempts += 1
        st.failures += 1

    def _final_status(self) -> str:
        """failed: no success at all; partial: a configuration short of its minimum (abandoned
        after failures, its target failed, or a time budget ended the run first: a budget that ran
        out before the first trial leaves a run that did not fail, only did not start, and resumes);
        complete: every configuration has its minimum."""
        s = self.spec.settings
        oks = [len(self.state[c.id].ok_values) for c in self.spec.configs]
        if not any(oks):
            stopped = self.schedule is not None and self.schedule.ran_out and \
                not any(self.state[c.id].failures for c in self.spec.configs)
            return "partial" if stopped else "failed"
        return "complete" if all(n >= s.repetitions for n in oks) else "partial"


def _resumed_schedule(given: Budget | None, stored: Any) -> Schedule | None:
    """A resumed run keeps its budget's accounting: what earlier sessions spent still counts, and
    the stored total holds unless this session gives one (then that is the run's new total)."""
    stored = stored if isinstance(stored, dict) else None
    total = stored.get("seconds") if stored else None
    if given is not None and given.seconds:
        schedule = Schedule(given)
    elif stored and isinstance(total, (int, float)) and total > 0:
        schedule = Schedule(Budget(float(total), given.verdicts if given else None,
                                   given.source if given else str(stored.get("source") or ""),
                                   hard=bool(stored.get("hard", True)), started=given.started if given else None,
                                   intervals=given.intervals if given else True))
    else:
        return None
    schedule.resume_from(stored, given=bool(given and given.seconds))
    return schedule


def _params(c: Config) -> dict[str, Any]:
    """What a trial's 'params' holds in the results contract: the axis labels plus the full configs."""
    return {**c.labels, "_target": c.target, "_workload": c.workload}


def _why(exc: BaseException) -> str:
    """The reason stored as a trial's error: the exception's type and message."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


TRACEBACK_MAX = 20_000


def _clip(tb: str | None) -> str | None:
    """Tracebacks are kept whole unless huge; then the end (where it was raised) is kept."""
    if tb is None or len(tb) <= TRACEBACK_MAX:
        return tb
    return "...\n" + tb[-TRACEBACK_MAX:]


def _tkey(target: dict) -> str:
    return repr(sorted(target.items()))


def _fmt_s(s: float) -> str:
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"
