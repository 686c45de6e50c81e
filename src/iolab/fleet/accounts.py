"""The unprivileged system users a fleet runs fio as, and the one call that drops to them.

Two users, one per side, each owning nothing but what its side works on:

* CLIENT_USER runs every `fio --client` on iolab's machine. fio's client obeys its server:
  SENDFILE makes it read any file the server names and send it back, an IOLOG makes it
  write `<name>.<host>` at any path the server names (fio 3.33 client.c: fio_send_file,
  fio_client_handle_iolog). As root that is every file of the machine; as this user it is
  what the user may touch: its own work directory (fleet/client.py).
* SERVER_USER runs `fio --server` on a host (`iolab fleet serve`): a job, and a client's
  `--trigger-remote` shell command, can then write only the device or directory the server
  was given, not the host.

Both are system users without a home, a login shell, supplementary groups or capabilities;
`setpriv` (util-linux) switches to one with its environment reset and no_new_privs, so
nothing the process runs can regain privileges. The accounts are made on first use
(`useradd --system`), or by `setup.sh install`.
"""

from __future__ import annotations

import os
import pwd
import shutil
from dataclasses import dataclass
from pathlib import Path

from iolab.core import children
from iolab.core.errors import CapabilityMissing

CLIENT_USER = "iolab-fio-client"
SERVER_USER = "iolab-fio"
_COMMENTS = {CLIENT_USER: "iolab fleet fio clients (no home, no login)",
             SERVER_USER: "iolab fleet fio server (no home, no login)"}


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int


def lookup(name: str) -> Account | None:
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        return None
    return Account(name, pw.pw_uid, pw.pw_gid)


def ensure(name: str) -> tuple[Account, bool]:
    """(the account, whether it was just created). Making one needs root."""
    found = lookup(name)
    if found is not None:
        if found.uid == 0 or found.gid == 0:
            raise CapabilityMissing(f"user {name} exists with uid {found.uid}, gid {found.gid}: the fleet needs "
                                    "it unprivileged (neither uid nor gid 0)")
        return found, False
    if os.geteuid() != 0:
        raise CapabilityMissing(f"the system user {name} does not exist, and only root can create it "
                                f"(run as root, or: useradd --system --user-group --no-create-home "
                                f"--home-dir /nonexistent --shell /usr/sbin/nologin {name})")
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    nologin = shutil.which("nologin") or "/usr/sbin/nologin"
    r = children.run([useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                      "--shell", nologin, "--comment", _COMMENTS.get(name, "iolab fleet"), name],
                     capture_output=True, text=True, timeout=60)
    found = lookup(name)  # another iolab may have made it at the same moment: that is as good
    if found is None:
        raise CapabilityMissing(f"could not create the system user {name}: {r.stderr.strip() or r.returncode}")
    return found, r.returncode == 0


def drop_argv(account: Account, argv: list[str]) -> list[str]:
    """argv run as `account`: uid and gid switched, no supplementary groups, no capabilities (also
    not inheritable or in the bounding set), no_new_privs, and the environment reset to the
    user's (HOME=/nonexistent, a plain PATH): no secret of the caller's environment reaches it."""
    setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
    return [setpriv, f"--reuid={account.uid}", f"--regid={account.gid}", "--clear-groups", "--no-new-privs",
            "--inh-caps=-all", "--bounding-set=-all", "--reset-env", "--", *argv]


def give(path: Path, account: Account, mode: int) -> None:
    """Hand a directory or file iolab just made to the account, nobody else."""
    os.chown(path, account.uid, account.gid, follow_symlinks=False)
    os.chmod(path, mode)
