"""`iolab fleet ...`: the other side of a fleet (fleet/serve.py)."""

from __future__ import annotations

import os
import shutil
import sys

import click

from iolab.core.errors import CapabilityMissing
from iolab.fleet import serve


@click.group()
def fleet() -> None:
    """Run studies on many hosts through fio's client/server mode (docs/fleet.md)."""


@fleet.command("serve")
@click.option("--bind", default=serve.DEFAULT_BIND, show_default=True, metavar="ADDR[:PORT]|/SOCKET",
              help="where fio's server listens: an IP address ([ADDR]:PORT for IPv6) or a unix socket path")
@click.option("--all-interfaces", is_flag=True, help="allow a wildcard --bind (0.0.0.0, ::): fio's server "
              "has no authentication")
@click.option("--print", "print_only", is_flag=True, help="print the fio command instead of running it")
def serve_cmd(bind: str, all_interfaces: bool, print_only: bool) -> None:
    """Start `fio --server` here (it replaces this process, so systemd supervises fio itself)."""
    argv = serve.server_argv(bind, all_interfaces)
    if print_only:
        click.echo(" ".join(argv))
        return
    exe = shutil.which("fio")
    if exe is None:
        raise CapabilityMissing("fio is not installed on this host (apt install fio): a fleet host runs fio's server")
    click.echo(f"warning: {serve.WARNING}", err=True)
    click.echo(f"starting: {' '.join(argv)}", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, [exe, *argv[1:]])
