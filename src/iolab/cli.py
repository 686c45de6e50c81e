"""The `iolab` command. Thin: parse, call the layers, print; errors become exit codes.

Size: one short function per command (run, study, reproduce, runs, report, compare, clean,
doctor, ...), each only parsing options and calling a layer; together they read as the
command reference. Split into a package by command group when a group grows logic of its own.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from iolab import __version__
from iolab.core import paths, signals
from iolab.core.errors import DataDirUnwritable, InputError, IolabError
from iolab.core.inputs import check_writable
from iolab.core.signals import exit_on_stop_signals_while_starting, ignore_stop_signals, interrupt_on_stop_signals
from iolab.core.streams import ReaderMayGo
from iolab.fleet import guard as fleet_guard
from iolab.fleet.cli import fleet as fleet_group
from iolab.store import registry as stores
from iolab.store import schema
from iolab.store.base import RunRecord, Store
from iolab.store.push import push_run

err = Console(file=ReaderMayGo("stderr"), highlight=False, soft_wrap=True)  # type: ignore[arg-type]
STARTED = time.monotonic()  # a --budget counts from here: the wall time the user waits
out = Console(file=ReaderMayGo("stdout"), highlight=False, soft_wrap=True)  # type: ignore[arg-type]

db_option = click.option("--db", type=str, default=None, envvar="IOLAB_DB", show_envvar=True,
                         help="results store: a file path (SQLite; default: $IOLAB_DATA/results.sqlite) "
                              "or postgresql://user@host/dbname (docs/store.md)")


def _store(db: str | None) -> Store:
    """The results store a run writes to; a place where it cannot be is an input error (exit 2)."""
    return stores.open_store(*_db_ref(db))


def _existing_store(db: str | None) -> Store | None:
    """The results store for commands that only read: None when there is none yet (nothing is created)."""
    return stores.open_existing(*_db_ref(db))


def _resolve_store(db: str | None) -> Store:
    store = _existing_store(db)
    if store is None:
        raise InputError(f"no runs in {stores.shown(_db_ref(db)[0])} yet (run a study first, or give --db)")
    return store


def _resolve(store: Store, ref: str) -> Any:
    """The run RUN names; a RUN that names none (or several) is an input error."""
    try:
        return store.resolve(ref)
    except IolabError as exc:
        raise InputError(str(exc)) from None


def _db_ref(db: str | None) -> tuple[str, str]:
    """The --db value (or the default database) and how messages name it."""
    return (db, "--db") if db else (str(paths.default_db()), "results database")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="iolab")
def cli() -> None:
    """iolab: a performance lab for the Linux storage stack, host to guest."""
    global STARTED
    STARTED = time.monotonic()


cli.add_command(fleet_group)


# -- studies ------------------------------------------------------------------------------
@cli.group(invoke_without_command=True)
@click.pass_context
def study(ctx: click.Context) -> None:
    """Built-in studies: `iolab study list`, `iolab study NAME`."""
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


@study.command("list")
def study_list() -> None:
    """The built-in studies, one line each."""
    from iolab.studies import builtin

    for name, mod in builtin.available().items():
        out.print(f"[bold]{name:20}[/bold] {mod.SUMMARY}")


class Duration(click.ParamType):
    """A time budget: '90s', '5m', '2h', '1.5h' or seconds; at least one second, at most 30 days."""

    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        from iolab.core.units import parse_duration

        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            self.fail(f"{exc} (e.g. 90s, 5m, 2h)", param, ctx)
        if seconds < 1:
            self.fail(f"{value!r} is under a second: a budget must leave room for a trial", param, ctx)
        return seconds


budget_option = click.option(
    "--budget", type=Duration(), default=None, metavar="DURATION",
    help="wall time for the whole run (e.g. 5m, 90s, 2h): the minimum repetitions first, then rounds where a "
         "verdict is still undecided, then intervals; never a round it cannot finish (docs/statistics.md)")


def _run_options(f: Any) -> Any:
    f = budget_option(f)
    f = click.option("--dry-run", is_flag=True, help="print the plan (trials, time, what is created) and stop")(f)
    f = click.option("--destroy-data", "destroy", multiple=True, metavar="[HOST:]DEVICE",
                     help="allow overwriting this block device (a fleet host's: HOST:DEVICE) "
                          "even though it holds data")(f)
    f = click.option("-o", "--output", type=click.Path(path_type=Path), help="where to write the HTML report")(f)
    return db_option(f)


def _make_study_command(name: str) -> click.Command:
    @click.command(name, help=f"Run the built-in study {name}.")
    @click.option("--quick", is_flag=True, help="reduced matrix and durations, for a first look and CI")
    @click.option("--print-spec", is_flag=True,
                  help="print the study as a TOML spec (to copy, change and run with `iolab run`) and stop")
    @click.option("--hosts", "hosts_file", type=click.Path(path_type=Path), metavar="FILE",
                  help="a fleet study's hosts: a TOML file of [[hosts]] tables (docs/fleet.md)")
    @_run_options
    def cmd(quick: bool, print_spec: bool, hosts_file: Path | None, budget: float | None, dry_run: bool,
            destroy: tuple[str, ...], output: Path | None, db: str | None) -> None:
        from iolab.fleet.hosts import load_hosts_file
        from iolab.spec.study import from_dict
        from iolab.studies import builtin

        mod = builtin.get(name)
        fleet_guard.allow_destroy(destroy)  # before validation: the guard runs there too
        doc = mod.build(quick)
        needs_hosts = getattr(mod.spec, "NEEDS_HOSTS", False)
        if hosts_file is not None and not needs_hosts:
            raise InputError(f"--hosts: {name} runs on this machine, not on a fleet")
        if hosts_file is not None:
            doc["target"]["hosts"] = load_hosts_file(hosts_file)
        if print_spec:
            import tomli_w

            click.echo(tomli_w.dumps(_without_none(doc)), nl=False)
            return
        if needs_hosts and hosts_file is None:
            raise InputError(f"{name} runs on a fleet: give --hosts FILE, a TOML file of [[hosts]] tables "
                             f"(`iolab study {name} --print-spec` shows their shape; docs/fleet.md)")
        spec = from_dict(doc, f"builtin:{name}", {"quick": quick, **({"hosts": str(hosts_file)} if hosts_file else {})})
        _execute(spec, db, dry_run, output, None, getattr(mod, "before_group", None), budget,
                 getattr(mod, "study_verdicts", None))

    return cmd


def _without_none(value: Any) -> Any:
    """TOML has no null: a key set to None means 'the default', so it is left out."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def _register_studies() -> None:
    from iolab.studies.builtin import BUILTIN

    for name in BUILTIN:
        study.add_command(_make_study_command(name))


@cli.command()
@click.argument("spec", required=False, type=click.Path(path_type=Path))
@click.option("--resume", "resume", metavar="RUN", help="finish only the missing trials of RUN (id or 'latest')")
@_run_options
def run(spec: Path | None, resume: str | None, budget: float | None, dry_run: bool, destroy: tuple[str, ...],
        output: Path | None, db: str | None) -> None:
    """Run a study spec (TOML), an fio job file (.fio) as a study, or --resume a run."""
    from iolab.spec.study import from_dict, load_spec_file
    from iolab.studies import builtin

    fleet_guard.allow_destroy(destroy)  # before validation: a job file's device is guarded there
    if resume:
        store = _resolve_store(db)
        rec = _resolve(store, resume)
        store.close()
        if (rec.spec.get("study") or {}).get("analysis") == "reproduce":
            raise IolabError(f"{rec.id} is a reproduction: resume it with `iolab reproduce --resume {rec.id}`")
        spec_obj = from_dict(rec.spec, rec.source, rec.options)
        resume = rec.id
    elif spec is None:
        raise click.UsageError("give a SPEC file or --resume RUN")
    else:
        spec_obj = load_spec_file(spec)
    # a spec analysed as a built-in study gets that study's hook too (e.g. a prefill or a sanity gate)
    analysis = builtin.analysis_module(spec_obj.settings.analysis)
    _execute(spec_obj, db, dry_run, output, resume, getattr(analysis, "before_group", None), budget,
             getattr(analysis, "study_verdicts", None))


def _execute(spec: Any, db: str | None, dry_run: bool, output: Path | None,
             resume: str | None, hook: Any, budget: float | None = None, verdicts: Any = None) -> None:
    """Check every input first (devices allowed, database, report path, targets' preflight);
    --dry-run then prints the plan and creates nothing at all: no database, no ledger."""
    from iolab.publish.document import verdict_source
    from iolab.runner.runner import Runner
    from iolab.runner.schedule import Budget

    stores.check_target(*_db_ref(db))
    if output is not None:
        check_writable(output, "-o")
    # --budget, or the spec's own (a quick study's), whichever is tighter; on --resume without
    # --budget the run's stored budget goes on (runner/schedule.py)
    seconds = min((b for b in (budget, None if resume else spec.settings.budget) if b), default=None)
    if dry_run or (budget is not None and not resume):
        intervals = spec.settings.budget_on == "verdicts+intervals"
        plan_budget = (Budget(seconds, (lambda run_id: []) if verdicts else None, hard=budget is not None,
                              intervals=intervals) if seconds else None)  # a plan has no verdicts yet, only whether
        runner = Runner(spec, None, err, before_group=hook, budget=plan_budget)  # type: ignore[arg-type]  # no store: a plan never opens one
        runner.instantiate()  # a plan needs no store
        if budget is not None and not resume:
            _check_budget_affords_minimum(budget, runner.estimate_seconds(),
                                          f"{spec.settings.repetitions} repetition(s) of every configuration are")
        if dry_run:
            for line in runner.dry_run_lines():
                click.echo(line)
            return
    else:  # every target's preflight (a disk that holds data, ...) before anything is created, the store too
        Runner(spec, None, err, before_group=hook).instantiate()  # type: ignore[arg-type]  # a plan: no store
    _clean_dead_runs()
    store = _store(db)
    runner = Runner(spec, store, err, before_group=hook,
                    budget=Budget(seconds, verdict_source(store, verdicts) if verdicts else None,
                                  hard=budget is not None, started=STARTED,
                                  intervals=spec.settings.budget_on == "verdicts+intervals"))
    runner.instantiate()
    run_id = runner.start(resume)
    err.print(f"run [bold]{run_id}[/bold] ({spec.name}), results in {escape(store.location)}")
    problem = None
    try:
        status = runner.run()
    finally:
        try:
            problem = _finish(store, run_id, output)
        finally:
            store.close()
    if problem:
        raise IolabError(problem)
    if status == "failed":
        raise IolabError(f"run {run_id} failed: no trial succeeded (see `iolab report {run_id}`)")


def _clean_dead_runs() -> None:
    """What dead runs of this data dir left (a helper still doing O_SYNC writes after a kill -9, a
    loop device, a mount, cgroups) would share the machine with this run's trials, a resumed run's
    above all: undone first, exactly as `iolab clean` would (only owners that are dead)."""
    from iolab.core import resources

    if not resources.orphaned():
        return
    cleaned, errors = resources.clean_orphans()
    if cleaned:
        err.print(f"first undid what dead iolab runs left in this data dir, as `iolab clean` does: "
                  f"{escape(', '.join(cleaned[:4]))}" + (f" and {len(cleaned) - 4} more" if len(cleaned) > 4 else ""))
    for e in errors:
        err.print(f"[yellow]warning:[/yellow] {escape(e)}")


def _check_budget_affords_minimum(budget: float, minimum_s: float, minimum: str) -> None:
    """A --budget the minimum repetitions' estimate already exceeds is refused before anything is
    created: a run that would stop half-way through its minimum answers nothing (every interval
    needs the minimum), and the user is better served by a number to give than by a failed run.
    The estimate is the workloads' own (set-ups and guest boots not counted): a budget that passes
    here can still run out inside the minimum, which the run then says up front and in its report."""
    from iolab.analysis.budget import fmt_seconds

    if minimum_s > budget:
        enough = minimum_s * 1.25
        give = f"{math.ceil(enough)}s" if enough < 90 else f"{math.ceil(enough / 60)}m"
        raise InputError(f"--budget {fmt_seconds(budget)} cannot afford the minimum: {minimum} estimated at "
                         f"{fmt_seconds(minimum_s)} (the workloads' own estimates, set-ups not counted); give "
                         f"--budget {give} or more, or fewer repetitions (study.repetitions)")


def _finish(store: Store, run_id: str, output: Path | None) -> str | None:
    """Always write the report, also for partial runs: the summary and its path end the output.
    When the store has not taken every write of the run (they wait in the local spool) or cannot
    be read now, the report waits too: what to do is returned (and printed), never raised over
    the run's own outcome."""
    from iolab.publish.document import write_html

    store.write_kept()
    waiting = store.waiting(run_id)
    problem = None
    if waiting:
        problem = (f"{waiting} write(s) of run {run_id} wait in the local spool: {store.location} did not take "
                   "them (nothing is lost). The next run into it writes them, or `iolab push --spool --to URL`; "
                   f"then `iolab report {run_id}` writes the report")
    else:
        try:
            rec = store.resolve(run_id)
            path, doc, summary = write_html(store, rec, output)
        except (IolabError, DataDirUnwritable) as exc:
            problem = f"the report of run {run_id} could not be written ({exc}); `iolab report {run_id}` writes it"
        else:
            ok = sum(t["status"] == "ok" for t in doc["trials"])
            err.print(f"\n[bold]{rec.study}[/bold] {doc['status']}: {ok}/{len(doc['trials'])} trials ok")
            for line in summary:
                err.print(f"  • {line}")
            out.print(f"report: {path}")
    if problem:
        err.print(f"[yellow]{escape(problem)}[/yellow]")
    return problem


@cli.command()
@click.option("--quick", is_flag=True, help="every study's reduced matrix (claims that need the full one are "
                                            "'not testable here')")
@click.option("--resume", "resume", metavar="RUN", help="finish a reproduction: completed studies are kept")
@click.option("--dry-run", is_flag=True, help="print what each study would run and stop; creates nothing")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="where to write the reproduction's HTML page")
@budget_option
@db_option
def reproduce(quick: bool, resume: str | None, dry_run: bool, output: Path | None, budget: float | None,
              db: str | None) -> None:
    """Run the five reference studies (R1-R5) and write one page: every published claim, this
    machine's value with its CI, holds / differs / undecided /
    not testable here, and why."""
    from iolab.analysis.budget import fmt_seconds
    from iolab.publish.document import write_html
    from iolab.reproduce.session import Reproduction, minimum_seconds, plan_lines

    if output is not None:
        check_writable(output, "-o")
    by_budget = False
    if budget is not None and not resume and (minimum := minimum_seconds(quick, err)) > budget:
        # not refused, unlike a single run's: the studies it reaches are still answered
        if not quick:  # the quick matrices answer most claims in a fraction of the time: a budget is a quick run
            full, quick, by_budget = minimum, True, True
            minimum = minimum_seconds(True, err)
            err.print(f"[yellow]--budget {fmt_seconds(budget)} cannot afford the full studies' minimum "
                      f"(estimated {fmt_seconds(full)}): every study runs its quick matrix (as --quick, minimum "
                      f"estimated {fmt_seconds(minimum)}, guest boots not counted)[/yellow]")
        if minimum > budget:
            err.print(f"[yellow]--budget {fmt_seconds(budget)} cannot afford every study's minimum repetitions "
                      f"(estimated {fmt_seconds(minimum)}, guest boots not counted): the studies run cheapest claim "
                      "first, each only while its minimum fits, then the rest goes to open claims, cheapest decision "
                      "first; the page says which claims it decided and which claims it left open[/yellow]")
    if dry_run:
        for line in plan_lines(quick, err, budget):
            click.echo(line)
        return
    _clean_dead_runs()
    store = _store(db)
    if resume:
        _resolve(store, resume)
    repro = Reproduction(store, err, on_child_done=lambda name, path: err.print(f"{name} report: {path}"),
                         started=STARTED)
    run_id = repro.resume(resume, budget) if resume else repro.start(quick, budget, quick_by_budget=by_budget)
    err.print(f"reproduction [bold]{run_id}[/bold]{' (quick)' if repro.quick else ''}, results in "
              f"{escape(store.location)}")
    try:
        repro.run()
    finally:
        try:
            path, doc, summary = write_html(store, repro.record(), output)
        finally:
            store.close()  # a PostgreSQL store's connection (and a SQLite file's lock) ends with the command
        err.print(f"\n[bold]reproduce[/bold] {doc['status']}")
        for line in summary:
            err.print(f"  • {escape(line)}")
        out.print(f"report: {path}")


# -- results ------------------------------------------------------------------------------
@cli.command()
@db_option
@click.option("-n", "limit", default=30, show_default=True, type=click.IntRange(min=1), help="how many runs")
@click.option("--json", "as_json", is_flag=True, help="one JSON array: id, study, status, trial counts, start time")
def runs(db: str | None, limit: int, as_json: bool) -> None:
    """Past runs in the results store, newest first; ids are printed whole (to copy into
    `report`, `compare` or `run --resume`), at any terminal width and through a pipe."""
    import time

    from iolab.report.comparison import text_table

    store = _existing_store(db)
    if store is None:
        out.print(f"no runs yet ({escape(stores.shown(_db_ref(db)[0]))} does not exist)")
        return
    from iolab.store.rows import UnreadableRow

    items: list[dict[str, Any]] = []
    try:
        for r in store.runs(limit):
            try:
                trials = store.trials(r.id)
            except UnreadableRow as exc:  # one bad row of a colleague's must not hide everyone's runs
                store.unreadable.append(str(exc))
                status, trials = "unreadable", []
            else:
                status = _status_now(store, r)
            when = r.created if isinstance(r.created, int | float) and 0 <= r.created < 1e11 else None
            items.append({"id": r.id, "study": r.study, "status": status,
                          "trials_ok": sum(t.status == "ok" for t in trials), "trials": len(trials),
                          "failed": sum(t.status != "ok" for t in trials), "created": when,
                          "created_utc": None if when is None else time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                 time.gmtime(when)),
                          "owner_role": r.owner_role, "owner_host": r.owner_host})
    finally:
        store.close()
    _say_unreadable(store.unreadable, "listed without their trials, or left out")
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return
    if not items:
        click.echo(f"no runs in {store.location}")
        return
    click.echo(text_table(["run", "study", "status", "trials ok/all", "started", "owner"], [
        [i["id"], i["study"], i["status"], f"{i['trials_ok']}/{i['trials']}",
         "?" if i["created"] is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(i["created"])),
         f"{i['owner_role'] or '-'}@{i['owner_host'] or '?'}"] for i in items]))


def _status_now(store: Store, r: RunRecord) -> str:
    """A run's stored status, except that one stored as running whose process (on this host) is gone
    reads "interrupted": it was killed or its machine went down; `iolab run --resume` finishes it.
    On another host iolab cannot see the process: "running" stays."""
    from iolab.store.base import holder_alive, this_host

    if r.status != "running" or (r.owner_host and r.owner_host != this_host()):
        return str(r.status)
    holder = store.holder(r.id)
    return "running" if holder is not None and holder_alive(holder) else "interrupted"


@cli.command()
@click.argument("run_ref", metavar="RUN", required=False)
@click.option("--to", "to", required=True, metavar="STORE",
              help="the store to copy into: a file path or postgresql://user@host/dbname (docs/store.md)")
@click.option("--force", is_flag=True,
              help="replace a run of that id from another origin (database role or host); the replaced run and "
                   "its trials stay in the store's history tables")
@click.option("--spool", "from_spool", is_flag=True,
              help="instead of a RUN: write what this machine's spool kept for STORE while it could not take it "
                   "(in order, each once), then stop")
@db_option
def push(run_ref: str | None, to: str, force: bool, from_spool: bool, db: str | None) -> None:
    """Copy RUN (finished or partial) from this store (--db) into another (--to), as it is;
    pushing again replaces the copy, never duplicates it. A run of that id from another origin
    is never replaced without --force. `--spool` writes the writes kept while STORE was away."""
    if from_spool:
        if run_ref:
            raise click.UsageError("--spool writes what the spool kept for --to; give no RUN with it")
        _push_spool(to)
        return
    if not run_ref:
        raise click.UsageError("give a RUN to push (or --spool)")
    source = _resolve_store(db)
    try:
        rec = _resolve(source, run_ref)
        target = stores.open_store(to, "--to", spool=False)
        try:
            pushed = push_run(source, target, rec, force)
        finally:
            target.close()
    finally:
        source.close()
    role, host = pushed.origin
    out.print(f"pushed {pushed.run_id} ({pushed.status}, {pushed.trials} trials) to {escape(target.location)}"
              f" as {role or '-'}@{host or '?'}")
    if pushed.replaced is not None:
        out.print(f"replaced the run of {escape(pushed.replaced.origin)} that had that id (kept in the store's "
                  "run_history and trial_history)")


def _push_spool(to: str) -> None:
    target = stores.open_store(to, "--to")
    try:
        done = target.replay()
    finally:
        target.close()
    if done is None:
        out.print(f"{escape(target.location)} keeps no spool (a local store is written directly)")
        return
    out.print(f"spool of {escape(target.location)}: {done.written} write(s) written, {done.rejected} set aside, "
              f"{done.left} still waiting")
    if done.left or done.rejected:
        raise IolabError(f"not everything kept could be written: {done.reason}")


@cli.command()
@db_option
def migrate(db: str | None) -> None:
    """Create the results store, or bring its schema to this iolab's version: every command that
    writes does this on its own; this does only that, e.g. once by the role that owns iolab's
    tables in a shared PostgreSQL database (docs/store.md#roles)."""
    ref, what = _db_ref(db)
    stores.open_store(ref, what).close()
    stored = stores.backend_for(ref, what).stored_schema(ref, what)
    out.print(f"{escape(stores.shown(ref))}: schema v{stored.version} (this iolab: v{schema.LATEST}; read by iolab "
              f"from v{stored.readers_from}, written from v{stored.writers_from})")


@cli.command()
@click.argument("study")
@click.option("--host", default=None, help="only runs made on this host (its hostname)")
@click.option("--config", "config_id", default=None, metavar="ID", help="only this configuration (its id)")
@click.option("--metric", "metric_names", multiple=True, metavar="NAME",
              help="follow this metric (repeatable; default: every metric with a declared direction)")
@click.option("-n", "limit", default=1000, show_default=True, type=click.IntRange(min=1),
              help="look at the newest N runs of the store")
@click.option("--power", is_flag=True,
              help="also say, from each shown series' own noise, how many runs after a 2/5/10 % step it would "
                   "take to suspect and to confirm it (simulated; a few seconds per series)")
@click.option("--all", "show_all", is_flag=True, help="print the runs of every series, not only those with a change")
@click.option("--json", "as_json", is_flag=True, help="the series and their change points as JSON")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="also write the history as an HTML page with a chart per series with a change")
@db_option
def history(study: str, host: str | None, config_id: str | None, metric_names: tuple[str, ...], limit: int,
            power: bool, show_all: bool, as_json: bool, html_path: Path | None, db: str | None) -> None:
    """STUDY over its runs: every configuration x metric (median per run; a count: its mean), judged together
    (Holm over all of them at 5 %), with confirmed changes (>= 3 runs on each side), a change
    suspected in the newest 1-2 runs, each with its size and 95 % interval and what changed in the
    machine at it (kernel, fio, QEMU, iolab). docs/store.md#history."""
    from iolab.analysis.history import RunData, build
    from iolab.publish.history import history_html, history_json, history_text

    if html_path is not None:
        check_writable(html_path, "--html")
    from iolab.publish.integrity import run_problem, trial_problem
    from iolab.store.rows import UnreadableRow

    store = _resolve_store(db)
    data: list[RunData] = []
    try:
        for r in store.runs(limit):
            if r.study != study:
                continue
            try:
                trials = store.trials(r.id)
            except UnreadableRow as exc:  # a colleague's bad run is set aside, the history goes on
                store.unreadable.append(str(exc))
                continue
            problem = run_problem(store.location, r) or next(
                (p for p in (trial_problem(store.location, r.id, t) for t in trials) if p), None)
            if problem:
                store.unreadable.append(problem)
                continue
            data.append(RunData(r.id, r.created, r.environment, trials, r.options))
    finally:
        store.close()
    _say_unreadable(store.unreadable, "set aside")
    hist = build(data, metric_names, config_id, host)
    if not hist.series:
        shown = ", ".join(metric_names)
        raise InputError(f"no successful trials of study {study!r}{f' on host {host!r}' if host else ''}"
                         f"{f' for configuration {config_id!r}' if config_id else ''}"
                         f"{f' with metric {shown!r}' if metric_names else ''} in {store.location}")
    powers = _history_power(hist) if power else None
    if html_path is not None:
        from iolab.publish.document import write_report

        write_report(html_path, history_html(study, hist))
        err.print(f"history page: {html_path}")
    click.echo(history_json(hist, powers, store.unreadable) if as_json else history_text(hist, powers, show_all))


def _say_unreadable(reasons: list[str], done: str) -> None:
    """Runs a listing command could not read (not in the form iolab writes), on stderr, each once."""
    if reasons:
        err.print(f"warning: {len(reasons)} run(s) not in the form iolab writes, {done}:")
        for reason in dict.fromkeys(reasons):
            err.print("  " + escape(reason.splitlines()[0]))


def _history_power(hist: Any) -> dict[str, Any]:
    """--power: per series (at most HISTORY_POWER_SERIES of them), from its own noise."""
    from iolab.analysis.detection_power import power

    out: dict[str, Any] = {}
    shown = [s for s in hist.series if s.noise_cv][:HISTORY_POWER_SERIES]
    for i, s in enumerate(shown):
        err.print(f"power {i + 1}/{len(shown)}: {s.config_id} {s.metric} (noise {s.noise_cv:.2%}, "
                  f"{len(s.points)} runs)")
        out[f"{s.config_id} {s.metric}"] = power(len(s.points), s.noise_cv, hist.rho, hist.family, tails=hist.tails,
                                                     skew=hist.skew)
    return out


HISTORY_POWER_SERIES = 12


@cli.command()
@click.argument("run_ref", metavar="RUN")
@click.option("--format", "fmt", type=click.Choice(["html", "md", "csv", "json"]), default="html", show_default=True)
@click.option("-o", "--output", type=click.Path(path_type=Path), help="write here instead of the default place")
@click.option("--compare", "compare_ref", metavar="RUN_A",
              help="add a comparison of this run (B) against RUN_A, as `iolab compare RUN_A RUN`")
@click.option("--threshold", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.02,
              show_default=True, help="with --compare: the noise threshold (a fraction, 0.02 = 2 %)")
@db_option
def report(run_ref: str, fmt: str, output: Path | None, compare_ref: str | None, threshold: float,
           db: str | None) -> None:
    """Render a run's report (RUN: id, id prefix or 'latest'). json follows docs/results.md."""
    from iolab.analysis.compare import compare_runs
    from iolab.publish.document import analysed, results_document, write_report
    from iolab.report import comparison
    from iolab.report.render import render

    if output is not None:
        check_writable(output, "-o")
    store = _resolve_store(db)
    rec = _resolve(store, run_ref)
    if output is None and fmt == "html":
        output = paths.reports_dir() / rec.id / "report.html"
    doc, summary, sections = analysed(store, rec, output.parent if output else None)
    if compare_ref:
        rec_a = _resolve(store, compare_ref)
        result = compare_runs(results_document(store, rec_a), doc, threshold=threshold,
                              history=_compare_history(store, rec_a, rec))
        doc["comparison"] = result
        summary = [*summary, comparison.headline(result)]
        sections = [comparison.section(result), *sections]
    text = render(doc, sections, summary, fmt)
    if output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    write_report(output, text)
    out.print(f"report: {output}")


@cli.command()
@click.argument("run_a")
@click.argument("run_b")
@click.option("--threshold", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.02,
              show_default=True, help="noise threshold: a smaller change is 'no difference' (0.02 = 2 %)")
@click.option("--metric", "metric_names", multiple=True, metavar="NAME", help="compare only this metric (repeatable)")
@click.option("--json", "as_json", is_flag=True, help="the comparison as one JSON object (docs/results.md)")
@db_option
def compare(run_a: str, run_b: str, threshold: float, metric_names: tuple[str, ...], as_json: bool,
            db: str | None) -> None:
    """What changed from RUN_A to RUN_B: per shared configuration and metric, B/A with its 95% CI,
    a p-value and a verdict that needs significance after Holm's correction over all rows AND a
    change beyond --threshold. Two levels of noise: the repetitions, and how far whole runs of a
    configuration move, read from earlier runs in the store (A's level is A and the runs like A
    before it); with none stored, a documented floor, and the verdict says it compares two runs
    only (gate with `iolab ab`). Every recorded difference between the runs is listed."""
    from iolab.analysis.compare import compare_runs
    from iolab.publish.document import results_document
    from iolab.report import comparison

    store = _resolve_store(db)
    rec_a, rec_b = (_resolve(store, r) for r in (run_a, run_b))
    if rec_a.id == rec_b.id:
        raise click.BadParameter(f"{run_b} is the same run as {run_a} ({rec_a.id}): compare two runs",
                                 param_hint="RUN_B")
    a, b = results_document(store, rec_a), results_document(store, rec_b)
    result = compare_runs(a, b, threshold=threshold, metric_names=metric_names,
                          history=_compare_history(store, rec_a, rec_b))
    measured = {r["metric"] for r in result["rows"]} | set(result["skipped_metrics"])
    missing = [m for m in metric_names if m not in measured]
    if missing:
        raise click.BadParameter(f"not measured on any shared configuration: {', '.join(missing)}",
                                 param_hint="--metric")
    if as_json:
        click.echo(json.dumps(result, indent=2, sort_keys=True))
        return
    click.echo(comparison.text_table(comparison.HEADERS, comparison.table_rows(result)))
    for side, key in (("A", "only_a"), ("B", "only_b")):
        for label in result[key]:
            click.echo(f"only in {side}: {label}")
    if result["skipped_metrics"]:
        click.echo("not compared (no better direction declared): " + ", ".join(result["skipped_metrics"]))
    click.echo("noise: " + result["noise"]["message"])
    click.echo(comparison.differences_text(result))
    click.echo(comparison.headline(result))


def _compare_history(store: Store, a: Any, b: Any) -> list[dict[str, Any]]:
    """Stored runs that tell how far runs of A's study move on A's host: the same study and host,
    created before B, not B, not an `iolab ab` block; the newest COMPARE_HISTORY of them."""
    from iolab.publish.document import results_document
    from iolab.publish.integrity import run_problem

    host = (a.environment or {}).get("hostname")
    readable = []
    for r in store.runs(COMPARE_LOOKBACK):
        problem = run_problem(store.location, r) if r.study == a.study else None
        if problem:
            store.unreadable.append(problem)
        else:
            readable.append(r)
    candidates = [r for r in readable if r.study == a.study and r.id != b.id and r.created < b.created
                  and (r.environment or {}).get("hostname") == host and not (r.options or {}).get("ab")]
    docs = []
    for r in candidates[:COMPARE_HISTORY]:
        try:
            docs.append(results_document(store, r))
        except InputError as exc:  # an earlier run that cannot be read is no evidence of noise
            store.unreadable.append(str(exc).splitlines()[-1])
    _say_unreadable(store.unreadable, "left out of the run-level noise")
    return docs


COMPARE_LOOKBACK = 2000  # newest runs of the store scanned for earlier runs of A's study
COMPARE_HISTORY = 40  # of those, the newest runs of A's study on A's host that are read


@cli.command("ab")
@click.argument("spec_a", metavar="SPEC_A", type=click.Path(path_type=Path))
@click.argument("spec_b", metavar="[SPEC_B]", required=False, type=click.Path(path_type=Path))
@click.option("--set-a", "set_a", multiple=True, metavar="KEY=VALUE",
              help="override a key of A's spec (dotted: workload.iodepth=32, target.kernel=/boot/vmlinuz-x); "
                   "repeatable")
@click.option("--set-b", "set_b", multiple=True, metavar="KEY=VALUE", help="override a key of B's spec; repeatable")
@click.option("--load-a", metavar="CMD", help="a command run beside each of A's blocks (e.g. 'stress-ng --cpu 1')")
@click.option("--load-b", metavar="CMD", help="a command run beside each of B's blocks")
@click.option("--env-a", "env_a", multiple=True, metavar="NAME=VALUE",
              help="iolab's environment during A's runs (e.g. PATH=/opt/qemu-a/bin:/usr/bin:/bin); repeatable")
@click.option("--env-b", "env_b", multiple=True, metavar="NAME=VALUE", help="the same for B's runs")
@click.option("--blocks", "min_blocks", type=click.IntRange(2, 1000), default=8, show_default=True,
              help="blocks before the first look (each block: one fresh run of A and one of B, in random order)")
@click.option("--max-blocks", type=click.IntRange(2, 1000), default=20, show_default=True, help="the budget")
@click.option("--look-every", "step", type=click.IntRange(1, 1000), default=4, show_default=True,
              help="blocks between looks after the first")
@click.option("--repetitions", type=click.IntRange(1, 100), default=1, show_default=True,
              help="successful trials per configuration in each variant's run of a block")
@click.option("--min-effect", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05,
              show_default=True, help="a smaller change is no regression (0.05 = 5 %)")
@click.option("--metric", "metric_names", multiple=True, metavar="NAME",
              help="judge only this metric (repeatable; default: every metric with a declared direction)")
@click.option("--seed", type=int, default=None, help="seed of the blocks' order (default: random, recorded)")
@click.option("--json", "as_json", is_flag=True, help="the verdict as one JSON object")
@click.option("--dry-run", is_flag=True, help="check both variants, print the design and stop; creates nothing")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="where to write the HTML report")
@db_option
def ab_command(spec_a: Path, spec_b: Path | None, set_a: tuple[str, ...], set_b: tuple[str, ...],
               load_a: str | None, load_b: str | None, env_a: tuple[str, ...], env_b: tuple[str, ...],
               min_blocks: int, max_blocks: int, step: int,
               repetitions: int, min_effect: float, metric_names: tuple[str, ...], seed: int | None,
               as_json: bool, dry_run: bool, output: Path | None, db: str | None) -> None:
    """Gate a change: A and B (two specs, one spec and --set-b overrides, --env-b for another build
    of a tool on PATH, or a load beside B)
    run interleaved in randomised blocks, each block a fresh run of each, until every
    configuration x metric is decided (beyond or within --min-effect, sign flips across blocks,
    Holm over all rows) or --max-blocks. Exit status: 0 no regression, 1 regression, 2 input
    error, 3 nothing measured, 4 incomplete (B failed or stalled where A did not, too few blocks
    to call it a regression; or a load ended before its run)."""
    import random

    from iolab.analysis.ab import Design
    from iolab.publish import ab as ab_report
    from iolab.publish.document import write_html
    from iolab.runner.ab import ABStudy, Incomplete, NoVerdict, check_metric_names, variants

    try:
        design = Design(min_blocks, max_blocks, step, min_effect)
    except ValueError as exc:
        raise InputError(f"--blocks/--max-blocks: {exc}") from None
    va, vb = variants(spec_a, spec_b, set_a, set_b, load_a, load_b, env_a, env_b)
    check_metric_names(va, vb, metric_names)
    stores.check_target(*_db_ref(db))
    if output is not None:
        check_writable(output, "-o")
    seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
    if dry_run:
        for line in ABStudy.plan_lines(va, vb, design, repetitions, seed):
            click.echo(line)
        return
    store = _store(db)
    study = ABStudy(store, err, va, vb, design, repetitions, seed, metric_names,
                    on_block=lambda j, rows: err.print(ab_report.headline(rows, design, j)))
    run_id = study.start()
    err.print(f"A/B study [bold]{run_id}[/bold] (seed {seed}), results in {store.location}")
    try:
        rows = study.run()
    finally:
        path, _, _ = write_html(store, store.resolve(run_id), output)
        (err if as_json else out).print(f"report: {path}")  # stdout is the JSON alone
    blocks = len(study.blocks)
    status = ab_report.exit_status(rows, study.load_failures)
    if as_json:
        click.echo(json.dumps(ab_report.AbVerdict(run_id, blocks, design, rows).as_json() | {"exit_status": status},
                              indent=2))
    else:
        click.echo(ab_report.text(rows, design, blocks))
    if status == 4:
        raise Incomplete(f"A/B study {run_id} shows no regression but is not a pass: "
                         + "; ".join(ab_report.incomplete(rows, study.load_failures)))
    if status == 3:
        raise NoVerdict(f"A/B study {run_id}: nothing was measured on both sides (see `iolab report {run_id}`)")
    raise SystemExit(status)


# -- machine ------------------------------------------------------------------------------
@cli.command()
@click.option("--json", "as_json", is_flag=True, help="machine-readable")
@db_option
def doctor(as_json: bool, db: str | None) -> None:
    """What this machine can do and what would make its numbers untrustworthy (exit 1 on a fail)."""
    from iolab.doctor import checks

    results = checks(_db_ref(db))
    if as_json:
        out.print_json(json.dumps(results))
    else:
        for item in results["checks"]:
            style = {"ok": "green", "warn": "yellow", "missing": "red", "fail": "bold red"}[item["state"]]
            # pad the plain word, then colour it: padding the markup would align the tags, not the words
            out.print(f"[{style}]{item['state']:>7}[/{style}]  [bold]{item['name']:14}[/bold] {escape(item['detail'])}")
    if any(item["state"] == "fail" for item in results["checks"]):
        raise SystemExit(1)  # iolab cannot work here as it is


@cli.command()
@click.option("--all", "sweep", is_flag=True,
              help="also remove, machine-wide, what carries the tag of a dead iolab process (any data dir)")
def clean(sweep: bool) -> None:
    """Remove what dead iolab processes left behind (after a crash or kill -9); never what a live run uses."""
    from iolab.cleanup import clean_everything

    cleaned, errors = clean_everything(sweep=sweep)
    for c in cleaned:
        out.print(f"removed {c}")
    for e in errors:
        err.print(f"[red]could not remove[/red] {e}")
    if not cleaned and not errors:
        out.print("nothing to clean")
    if errors:
        raise SystemExit(1)


def main() -> None:
    # still starting (`python -m iolab.cli` does not come through iolab.entry): registering the studies
    # imports their pydantic models; a stop signal there ends the process at once (core/signals.py)
    exit_on_stop_signals_while_starting()
    _register_studies()
    interrupt_on_stop_signals()
    try:
        cli.main(standalone_mode=False)
        signals.raise_if_stop_pending()  # a Ctrl-C Python dropped (core/signals.py) still means exit 130
    except BaseException:
        ignore_stop_signals()  # whatever ends the command, its last words are not cut by a late Ctrl-C
        try:
            raise
        except click.exceptions.Abort as exc:
            # click turns a KeyboardInterrupt (a stop signal) inside its main into Abort: that is an interruption
            stopped = isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt)
            err.print("interrupted" if stopped else "aborted")
            sys.exit(130)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except IolabError as exc:
            err.print(f"[red]error:[/red] {escape(str(exc))}")
            sys.exit(exc.exit_status)
        except DataDirUnwritable as exc:  # outside a run (which says more): iolab's own state cannot be written
            err.print(f"[red]error:[/red] {escape(str(exc))}")
            sys.exit(1)
        except KeyboardInterrupt:
            err.print("interrupted")
            sys.exit(130)
        except Exception as exc:
            # a compiled extension's import turns the KeyboardInterrupt raised inside it into its own
            # error ("ImportError: initialization failed" from scipy's, a Rust panic from pyo3's): the
            # stop signal still ended the command, and said so, not with a traceback
            if signals.stop_pending() is None or not signals.caused_by_interrupt(exc):
                raise
            err.print("interrupted")
            sys.exit(130)


if __name__ == "__main__":
    main()
