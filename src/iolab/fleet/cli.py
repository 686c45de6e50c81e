"""`iolab fleet ...`: the other side of a fleet (fleet/serve.py)."""

from __future__ import annotations

import shutil
import sys

import click

from iolab.core.errors import CapabilityMissing
from iolab.fleet import accounts, serve


@click.group()
def fleet() -> None:
    """Run studies on many hosts through fio's client/server mode (docs/fleet.md)."""


@fleet.command("serve")
@click.option("--bind", default=serve.DEFAULT_BIND, show_default=True, metavar="/SOCKET|ADDR[:PORT]",
              help="where fio's server listens: a unix socket path (reached by `ssh -L`), or an IP address "
                   "([ADDR]:PORT for IPv6) on a network only iolab's machine reaches")
@click.option("--device", "devices", multiple=True, metavar="DEV",
              help="a block device the server may write (refused if it holds data, unless --destroy-data DEV)")
@click.option("--directory", "directories", multiple=True, metavar="DIR",
              help="a directory the server may create files in (never a system directory)")
@click.option("--user", default=accounts.SERVER_USER, show_default=True,
              help="the unprivileged user fio's server runs as (made on first use)")
@click.option("--operator-group", metavar="GROUP",
              help="the group that may reach the socket (default: that of the user who ran sudo, else none)")
@click.option("--destroy-data", "destroy", multiple=True, metavar="DEV",
              help="let the server write this device although it holds data")
@click.option("--all-interfaces", is_flag=True, help="allow a wildcard --bind (0.0.0.0, ::): fio's server "
              "has no authentication")
@click.option("--print", "print_only", is_flag=True, help="check, print what would run, change nothing")
@click.option("--revoke", is_flag=True, help="take back what an earlier serve granted --user on each --device "
              "and --directory, and stop (e.g. ExecStopPost of its unit)")
def serve_cmd(bind: str, devices: tuple[str, ...], directories: tuple[str, ...], user: str,
              operator_group: str | None, destroy: tuple[str, ...], all_interfaces: bool, print_only: bool,
              revoke: bool) -> None:
    """Start `fio --server` here as an unprivileged user (it replaces this process, so systemd
    supervises fio itself)."""
    if revoke:
        for line in serve.revoke(user, list(devices), list(directories)):
            click.echo(line, err=True)
        return
    exe = shutil.which("fio")
    if exe is None and not print_only:
        raise CapabilityMissing("fio is not installed on this host (apt install fio): a fleet host runs fio's server")
    plan = serve.prepare(bind, all_interfaces, list(devices), list(directories), user, operator_group,
                         list(destroy), exe or "fio", dry=print_only)
    if print_only:
        click.echo(" ".join(plan.argv))
        for note in plan.notes:
            click.echo(f"note: {note}", err=True)
        return
    click.echo(f"warning: {serve.WARNING}", err=True)
    for note in plan.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(f"starting: {' '.join(plan.argv)} (in {plan.cwd})", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    serve.exec_server(plan)
