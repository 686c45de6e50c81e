"""The `iolab` command. Thin: parse, call the layers, print; errors become exit codes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from iolab import __version__
from iolab.core import paths
from iolab.core.errors import IolabError
from iolab.store.sqlite import Store

err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)

db_option = click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
                         help="results database (default: $IOLAB_DATA/results.sqlite)")


def _store(db: Path | None) -> Store:
    return Store(db or paths.default_db())


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="iolab")
def cli() -> None:
    """iolab: a performance lab for the Linux storage stack, host to guest."""


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


def _run_options(f: Any) -> Any:
    f = click.option("--dry-run", is_flag=True, help="print the plan (trials, time, what is created) and stop")(f)
    f = click.option("--destroy-data", "destroy", multiple=True, metavar="DEVICE",
                     help="allow overwriting this block device even though it holds data")(f)
    f = click.option("-o", "--output", type=click.Path(path_type=Path), help="where to write the HTML report")(f)
    return db_option(f)


def _make_study_command(name: str) -> click.Command:
    @click.command(name, help=f"Run the built-in study {name}.")
    @click.option("--quick", is_flag=True, help="reduced matrix and durations, for a first look and CI")
    @click.option("--print-spec", is_flag=True,
                  help="print the study as a TOML spec (to copy, change and run with `iolab run`) and stop")
    @_run_options
    def cmd(quick: bool, print_spec: bool, dry_run: bool, destroy: tuple[str, ...], output: Path | None,
            db: Path | None) -> None:
        from iolab.studies import builtin
        from iolab.studies.spec import from_dict

        mod = builtin.get(name)
        if print_spec:
            import tomli_w

            click.echo(tomli_w.dumps(_without_none(mod.build(quick))), nl=False)
            return
        spec = from_dict(mod.build(quick), f"builtin:{name}", {"quick": quick})
        _execute(spec, db, dry_run, destroy, output, None, getattr(mod, "before_group", None))

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
def run(spec: Path | None, resume: str | None, dry_run: bool, destroy: tuple[str, ...], output: Path | None,
        db: Path | None) -> None:
    """Run a study spec (TOML), an fio job file (.fio) as a study, or --resume a run."""
    from iolab.studies import builtin
    from iolab.studies.spec import from_dict, load_spec_file

    if resume:
        store = _store(db)
        rec = store.resolve(resume)
        store.close()
        spec_obj = from_dict(rec.spec, rec.source, rec.options)
        resume = rec.id
    elif spec is None:
        raise click.UsageError("give a SPEC file or --resume RUN")
    else:
        spec_obj = load_spec_file(spec)
    # a spec analysed as a built-in study gets that study's hook too (e.g. a prefill or a sanity gate)
    hook = getattr(builtin.analysis_module(spec_obj.settings.analysis), "before_group", None)
    _execute(spec_obj, db, dry_run, destroy, output, resume, hook)


def _execute(spec: Any, db: Path | None, dry_run: bool, destroy: tuple[str, ...], output: Path | None,
             resume: str | None, hook: Any) -> None:
    from iolab.runner.runner import Runner
    from iolab.targets import blockdev

    blockdev.DESTROY_ALLOWED.update(os.path.realpath(d) for d in destroy)
    store = _store(db)
    runner = Runner(spec, store, err, before_group=hook)
    runner.instantiate()
    if dry_run:
        for line in runner.dry_run_lines():
            click.echo(line)
        return
    run_id = runner.start(resume)
    err.print(f"run [bold]{run_id}[/bold] ({spec.name}), results in {store.path}")
    try:
        status = runner.run()
    finally:
        _finish(store, run_id, output)
    if status == "failed":
        raise IolabError(f"run {run_id} failed: no trial succeeded (see `iolab report {run_id}`)")


def _finish(store: Store, run_id: str, output: Path | None) -> None:
    """Always write the report, also for partial runs: the summary and its path end the output."""
    from iolab.report.document import analysed
    from iolab.report.render import render

    rec = store.resolve(run_id)
    doc, summary, sections = analysed(store, rec)
    path = output or paths.reports_dir() / run_id / "report.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(doc, sections, summary, "html"))
    ok = sum(t["status"] == "ok" for t in doc["trials"])
    err.print(f"\n[bold]{rec.study}[/bold] {doc['status']}: {ok}/{len(doc['trials'])} trials ok")
    for line in summary:
        err.print(f"  • {line}")
    out.print(f"report: {path}")


# -- results ------------------------------------------------------------------------------
@cli.command()
@db_option
@click.option("-n", "limit", default=30, show_default=True, help="how many runs")
def runs(db: Path | None, limit: int) -> None:
    """Past runs in the results store."""
    import time

    store = _store(db)
    table = RichTable("study", "status", "trials ok/all", "started")
    table.add_column("run", no_wrap=True, overflow="ignore")
    for r in store.runs(limit):
        trials = store.trials(r.id)
        table.add_row(r.study, r.status, f"{sum(t.status == 'ok' for t in trials)}/{len(trials)}",
                      time.strftime("%Y-%m-%d %H:%M", time.localtime(r.created)), r.id)
    out.print(table)


@cli.command()
@click.argument("run_ref", metavar="RUN")
@click.option("--format", "fmt", type=click.Choice(["html", "md", "csv", "json"]), default="html", show_default=True)
@click.option("-o", "--output", type=click.Path(path_type=Path), help="write here instead of the default place")
@db_option
def report(run_ref: str, fmt: str, output: Path | None, db: Path | None) -> None:
    """Render a run's report (RUN: id, id prefix or 'latest'). json follows docs/results.md."""
    from iolab.report.document import analysed
    from iolab.report.render import render

    store = _store(db)
    rec = store.resolve(run_ref)
    doc, summary, sections = analysed(store, rec)
    text = render(doc, sections, summary, fmt)
    if output is None and fmt == "html":
        output = paths.reports_dir() / rec.id / "report.html"
    if output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    out.print(f"report: {output}")


@cli.command()
@click.argument("run_a")
@click.argument("run_b")
@db_option
def compare(run_a: str, run_b: str, db: Path | None) -> None:
    """What changed from RUN_A to RUN_B, per configuration and metric, with confidence intervals."""
    from iolab.analysis.compare import compare_runs
    from iolab.report.document import results_document

    store = _store(db)
    a, b = (results_document(store, store.resolve(r)) for r in (run_a, run_b))
    rows = compare_runs(a, b)
    table = RichTable("configuration", "metric", "A", "B", "B/A [95% CI]", "verdict")
    for r in rows:
        table.add_row(r["config"], r["metric"], f"{r['a']:.4g}", f"{r['b']:.4g}",
                      f"{r['ratio']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]", r["verdict"])
    out.print(table)


# -- machine ------------------------------------------------------------------------------
@cli.command()
@click.option("--json", "as_json", is_flag=True, help="machine-readable")
def doctor(as_json: bool) -> None:
    """What this machine can do: fio, QEMU, KVM or only TCG, cgroups, schedulers, root, space."""
    from iolab.doctor import checks

    results = checks()
    if as_json:
        out.print_json(json.dumps(results))
        return
    for item in results["checks"]:
        mark = {"ok": "[green]ok[/green]", "warn": "[yellow]warn[/yellow]", "missing": "[red]missing[/red]"}[item["state"]]
        out.print(f"{mark:>24}  [bold]{item['name']:14}[/bold] {escape(item['detail'])}")


@cli.command()
@click.option("--all", "sweep", is_flag=True, help="also remove tagged leftovers with no ledger entry")
def clean(sweep: bool) -> None:
    """Remove anything iolab created and left behind (after a crash or kill -9)."""
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
    _register_studies()
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        err.print("aborted")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except IolabError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        sys.exit(exc.exit_status)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
