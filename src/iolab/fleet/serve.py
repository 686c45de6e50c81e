"""How a host joins a fleet: `fio --server` bound to one address, never all by default.

fio's server has no authentication: anything that reaches its port can send it a job
(which may write any device the server can open), and a client's `--trigger-remote` runs
a shell command on it. So the default bind is loopback, a unix socket is the other
natural choice (reach it through `ssh -L`), and a wildcard address (0.0.0.0, ::) is
refused unless asked for by name (`--all-interfaces`). The command replaces itself with
fio (exec), so a service manager supervises fio directly (docs/fleet.md has a unit).
"""

from __future__ import annotations

import ipaddress
import os
import re

from iolab.core.errors import InputError
from iolab.fleet.hosts import DEFAULT_PORT

DEFAULT_BIND = f"127.0.0.1:{DEFAULT_PORT}"
WARNING = ("fio's server has no authentication: anyone who can reach its address can run fio jobs "
           "there (writing any device the server can open) and, with --trigger-remote, shell commands. "
           "Bind it to loopback or a unix socket and reach it through an SSH tunnel, or to a private "
           "network only iolab's machine reaches.")
_BRACKETED = re.compile(r"\[(?P<addr>[^\]]+)\](?::(?P<port>\d+))?")
_PATH = re.compile(r"/[A-Za-z0-9_./+-]{1,106}")  # sun_path holds 108 bytes


def server_arg(bind: str, all_interfaces: bool = False) -> str:
    """The value of `fio --server=` for --bind ADDR[:PORT] (IPv6 as [ADDR]:PORT) or a socket path."""
    if bind.startswith("/"):
        if not _PATH.fullmatch(bind) or "/../" in bind + "/":
            raise InputError(f"--bind {bind!r}: a unix socket path of letters, digits and '_./+-', "
                             "at most 107 characters, no '..'")
        return f"sock:{bind}"
    m = _BRACKETED.fullmatch(bind)
    if m:
        addr_text, port_text = m["addr"], m["port"]
    elif bind.count(":") == 1:
        addr_text, port_text = bind.split(":")
    else:
        addr_text, port_text = bind, None
    try:
        addr = ipaddress.ip_address(addr_text)
    except ValueError:
        raise InputError(f"--bind {bind!r}: expected an IP address (IPv6 as [ADDR]:PORT) or a unix "
                         "socket path; a host name could resolve to any interface") from None
    port = int(port_text) if port_text else DEFAULT_PORT
    if not 1 <= port <= 65535:
        raise InputError(f"--bind {bind!r}: port must be 1-65535")
    if addr.is_unspecified and not all_interfaces:
        raise InputError(f"--bind {bind!r} listens on every interface, and fio's server has no "
                         "authentication; pass --all-interfaces if that is really what you want")
    return f"{'ip6' if addr.version == 6 else 'ip'}:{addr},{port}"


def server_argv(bind: str, all_interfaces: bool = False, fio: str = "fio") -> list[str]:
    return [fio, f"--server={server_arg(bind, all_interfaces)}"]


def running_servers() -> list[str]:
    """The --server values of fio servers running on this machine (from /proc/*/cmdline)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0].decode(errors="replace")) == "fio":
            found += [a.decode(errors="replace").split("=", 1)[1] if b"=" in a else "ip:0.0.0.0,8765"
                      for a in argv[1:] if a.startswith(b"--server")]
    return sorted(set(found))


def exposed(server: str) -> bool:
    """A --server value reachable from other machines (not loopback, not a unix socket)."""
    kind, _, rest = server.partition(":")
    if kind == "sock" or (not rest and server.startswith("/")):
        return False
    addr = rest.rsplit(",", 1)[0] if rest else server
    try:
        return not ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return True  # a name or anything unparsed: assume reachable


def security_line(servers: list[str]) -> tuple[str, str]:
    """(state, detail) for `iolab doctor`: a fio server reachable from the network is a warning."""
    open_ = [s for s in servers if exposed(s)]
    if open_:
        return "warn", (f"fio server(s) listening on {', '.join(open_)}: no authentication, anyone who reaches "
                        "it runs jobs (and --trigger-remote commands); bind to loopback or a unix socket and "
                        "use an SSH tunnel or a private network (docs/fleet.md)")
    here = f"fio server(s) on {', '.join(servers)} (local only); " if servers else ""
    return "ok", (here + "fleet hosts: `iolab fleet serve` binds loopback or a unix socket by default; "
                  "fio's server has no authentication (docs/fleet.md)")
