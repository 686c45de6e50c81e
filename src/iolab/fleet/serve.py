"""How a host joins a fleet: `fio --server` as an unprivileged user that may write just the
device or directory it benchmarks, on a unix socket only that user and the operator reach.

fio's server has no authentication: anything that reaches it can send it a job (which may
write whatever the server's user can open), and a client's `--trigger-remote` runs a shell
command as that user. So, started as root, `iolab fleet serve`:

* runs fio as accounts.SERVER_USER (made on first use), switched with setpriv (no
  capabilities, no_new_privs, environment reset): a job or a trigger can write only what
  that user can;
* grants that user read-write on each `--device` (a POSIX ACL entry on the node, after the
  same data-safety guard as iolab's `device` target: a device holding data needs
  `--destroy-data DEVICE`) and on each `--directory` (never a system directory);
* listens on a unix socket (default /run/iolab-fio/fio.sock) in a directory owned by that
  user, group the operator's (`--operator-group`, else the group of the user who ran sudo),
  mode 2710, socket 0770: nobody else on the host can connect. iolab reaches it through
  `ssh -L local.sock:/run/iolab-fio/fio.sock` (docs/fleet.md);
* a TCP address is still possible (a private network only iolab's machine reaches); a
  wildcard one needs `--all-interfaces`.

Not root: fio runs as the user who started it (said on stderr), nothing else changes. The
command replaces itself with fio (exec), so a service manager supervises fio directly.
"""

from __future__ import annotations

import grp
import ipaddress
import os
import pwd
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from iolab.core import diskguard
from iolab.core.errors import InputError, RefusedError
from iolab.fleet import accounts, acl
from iolab.fleet.hosts import DEFAULT_PORT

DEFAULT_SOCKET = "/run/iolab-fio/fio.sock"
DEFAULT_BIND = DEFAULT_SOCKET
SOCKET_DIR_MODE = 0o2710   # the server creates its socket; the operator's group may only pass through
SERVER_UMASK = 0o007       # the socket (and fio's files) for the user and the operator's group only
SYSTEM_DIRS = ("/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/root", "/run", "/sbin", "/sys",
               "/usr", "/var", "/var/lib", "/var/log", "/home")
WARNING = ("fio's server has no authentication: anyone who can reach its socket or address can run fio jobs "
           "there (writing whatever its user can open) and, with --trigger-remote, shell commands as its user.")
_BRACKETED = re.compile(r"\[(?P<addr>[^\]]+)\](?::(?P<port>\d+))?")
_PATH = re.compile(r"/[A-Za-z0-9_./+-]{1,106}")  # sun_path holds 108 bytes


def server_arg(bind: str, all_interfaces: bool = False) -> str:
    """The value of `fio --server=` for --bind ADDR[:PORT] (IPv6 as [ADDR]:PORT) or a socket path."""
    if bind.startswith("/"):
        if not _PATH.fullmatch(bind) or "/../" in bind + "/" or bind.endswith("/"):
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


@dataclass
class Plan:
    """What `iolab fleet serve` does before it becomes fio."""

    argv: list[str]                       # what is exec'd (the user switch included)
    cwd: str
    notes: list[str] = field(default_factory=list)


def prepare(bind: str, all_interfaces: bool, devices: list[str], directories: list[str], user: str,
            operator_group: str | None, destroy: list[str], fio: str, dry: bool = False) -> Plan:
    """Check everything, then (unless dry) make the user, the socket's directory and the grants.
    InputError / RefusedError (exit 2) before anything is changed."""
    arg = server_arg(bind, all_interfaces)
    root = os.geteuid() == 0
    diskguard.allow_destroy(destroy)
    for dev in devices:
        diskguard.check_free(dev)  # a device holding data needs --destroy-data
    dirs = [_checked_directory(d) for d in directories]
    notes = []
    if not root:
        notes.append(f"not root: fio's server runs as {pwd.getpwuid(os.geteuid()).pw_name}, and can write whatever "
                     "that user can (run as root to give it a user of its own)")
        sock_dir = Path(bind).parent if arg.startswith("sock:") else None
        if sock_dir is not None and not dry:
            sock_dir.mkdir(mode=0o700, exist_ok=True)
            _check_socket_dir(sock_dir, os.geteuid(), os.getegid())
        return Plan([fio, f"--server={arg}"], str(dirs[0] if dirs else sock_dir or "/"), notes)
    if dry:
        found = accounts.lookup(user)
        who = [f"--reuid={found.uid if found else user}", f"--regid={found.gid if found else user}"]
        return Plan(["setpriv", *who, "...", fio, f"--server={arg}"], str(dirs[0] if dirs else "/"), notes)
    account, made = accounts.ensure(user)
    if made:
        notes.append(f"created the system user {user} (no home, no login shell)")
    gid = _operator_gid(operator_group, account)
    sock_dir = Path(bind).parent if arg.startswith("sock:") else None
    if sock_dir is None:
        notes.append(f"listening on TCP {bind}: every user of {'this machine' if _loopback(arg) else 'the network'} "
                     "who reaches it can use the server; a unix socket (the default) is for the operator only")
    else:
        _reachable(sock_dir.parent, account)
        if not sock_dir.exists():
            sock_dir.mkdir()
            os.chown(sock_dir, account.uid, gid)
            os.chmod(sock_dir, SOCKET_DIR_MODE)
        _check_socket_dir(sock_dir, account.uid, gid)
    for place in dirs:
        _reachable(place.parent, account)
    for dev in devices:
        acl.grant(diskguard.block_device(dev).path, account.uid, 6)
        notes.append(f"{user} may read and write {dev} (an ACL entry, until the device node is made again)")
    for place in dirs:
        acl.grant(str(place), account.uid, 7)
        notes.append(f"{user} may create files in {place} (an ACL entry)")
    if not devices and not dirs:
        notes.append(f"no --device or --directory: {user} may write nothing but world-writable places")
    return Plan(accounts.drop_argv(account, [fio, f"--server={arg}"]), str(dirs[0] if dirs else sock_dir or "/"),
                notes)


def revoke(user: str, devices: list[str], directories: list[str]) -> list[str]:
    """Take back the ACL entries `prepare` granted `user`; what was done, one line each."""
    account = accounts.lookup(user)
    if account is None:
        return [f"no user {user}: nothing to take back"]
    out = []
    for path in [*(diskguard.block_device(d).path for d in devices), *directories]:
        done = acl.revoke(path, account.uid)
        out.append(f"{user}: access to {path} taken back" if done else f"{user}: no entry on {path}")
    return out


def exec_server(plan: Plan) -> None:
    """Become fio's server (never returns)."""
    os.umask(SERVER_UMASK)
    os.chdir(plan.cwd)
    os.execv(plan.argv[0], plan.argv)


def _loopback(arg: str) -> bool:
    try:
        return ipaddress.ip_address(arg.split(":", 1)[1].rsplit(",", 1)[0]).is_loopback
    except ValueError:
        return False


def _operator_gid(name: str | None, account: accounts.Account) -> int:
    if name:
        try:
            return grp.getgrnam(name).gr_gid
        except KeyError:
            raise InputError(f"--operator-group {name!r}: no such group") from None
    sudo = os.environ.get("SUDO_GID", "")
    return int(sudo) if sudo.isdigit() and int(sudo) != 0 else account.gid


def _checked_directory(d: str) -> Path:
    p = Path(d)
    if not p.is_absolute():
        raise InputError(f"--directory {d!r}: an absolute path, please")
    try:
        st = os.lstat(p)
    except OSError as exc:
        raise InputError(f"--directory {d}: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise InputError(f"--directory {d}: not a directory (a link is not followed: name the real one)")
    real = p.resolve()
    if str(real) in SYSTEM_DIRS or str(real).startswith(("/proc/", "/sys/", "/dev/", "/etc/", "/usr/", "/boot/")):
        raise RefusedError(f"--directory {d}: {real} is a system directory; give fio's server a directory of its own")
    return real


def _check_socket_dir(d: Path, uid: int, gid: int) -> None:
    """The socket's directory must be the server user's and reachable by the operator's group only."""
    st = os.lstat(d)
    problems = []
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        problems.append("is not a directory")
    if st.st_uid != uid:
        problems.append(f"belongs to uid {st.st_uid}, not the server's ({uid})")
    if st.st_mode & 0o007:
        problems.append("lets every user in")
    if st.st_mode & 0o070 and st.st_gid != gid:
        problems.append(f"lets group {st.st_gid} in, not the operator's ({gid})")
    if problems:
        raise RefusedError(f"the socket's directory {d} {'; it '.join(problems)}: remove it (iolab makes it) or "
                           f"fix it: chown {uid}:{gid} {d} && chmod {SOCKET_DIR_MODE:o} {d}")


def _reachable(path: Path, account: accounts.Account) -> None:
    """Every directory on the way to `path` must let the server's user pass (mode bits only)."""
    for p in [path, *path.parents]:
        st = os.stat(p)
        bits = 0o100 if st.st_uid == account.uid else 0o010 if st.st_gid == account.gid else 0o001
        if not st.st_mode & bits and (acl.user_perm(str(p), account.uid) or 0) & 1 == 0:
            raise RefusedError(f"{account.name} cannot pass through {p} (mode {stat.S_IMODE(st.st_mode):o}, owner "
                               f"{st.st_uid}): put the socket and the data where it can reach them")


def running_servers() -> list[str]:
    """The --server values of fio servers running on this machine (from /proc/*/cmdline)."""
    return sorted({s for s, _ in running_server_processes()})


def running_server_processes() -> list[tuple[str, int]]:
    """(--server value, uid) of every fio server running on this machine."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            uid = os.stat(f"/proc/{pid}").st_uid
        except OSError:
            continue
        if argv and os.path.basename(argv[0].decode(errors="replace")) == "fio":
            found += [(a.decode(errors="replace").split("=", 1)[1] if b"=" in a else "ip:0.0.0.0,8765", uid)
                      for a in argv[1:] if a.startswith(b"--server")]
    return found


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


def security_line(servers: list[str], as_root: list[str] | None = None) -> tuple[str, str]:
    """(state, detail) for `iolab doctor`: a fio server reachable from the network, or running as
    root, is a warning."""
    open_ = [s for s in servers if exposed(s)]
    if open_:
        return "warn", (f"fio server(s) listening on {', '.join(open_)}: no authentication, anyone who reaches "
                        "it runs jobs (and --trigger-remote commands); use `iolab fleet serve` (a unix socket for "
                        "the operator, reached by ssh -L) or a private network (docs/fleet.md)")
    if as_root:
        return "warn", (f"fio server(s) on {', '.join(sorted(set(as_root)))} run as root: a job or a --trigger-remote "
                        "command can write anything here; `iolab fleet serve` runs it as an unprivileged user that "
                        "may write only its device or directory (docs/fleet.md)")
    here = f"fio server(s) on {', '.join(servers)} (local only, unprivileged); " if servers else ""
    return "ok", (here + "fleet hosts: `iolab fleet serve` runs fio's server as an unprivileged user on a unix "
                  "socket only the operator reaches; fio's server has no authentication (docs/fleet.md)")
