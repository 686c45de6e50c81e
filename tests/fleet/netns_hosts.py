"""A fleet of fio servers on one machine: one network namespace per host.

Each host is a network namespace tagged with the test process as owner
(`iolab-<token>-fleet-<i>`), a veth pair whose addresses are a /30 of the documentation
ranges (RFC 5737: 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24; .1 outside, .2 inside,
checked unused first), which no real network uses, so a test can never reach or shadow a real
host, `fio --server` bound to the inside address (`ip netns exec`), and its own scratch loop
device. Everything is recorded in a ledger before it is made and removed in reverse order,
also after a failure; a namespace or veth whose owner died (a killed pytest) is swept at the
next start. Two test processes at once get different subnets and names (their pids).
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from iolab.core import cleaners as _cleaners  # noqa: F401  (registers the file and loop cleaners)
from iolab.core import owner as owners
from iolab.core.resources import Ledger, Resource, register_cleaner

_REPO = Path(__file__).resolve().parents[2]
TEST_NETS = ("192.0.2", "198.51.100", "203.0.113")  # RFC 5737: documentation only, never routed
V6_PREFIX = "2001:db8:6f6c:"  # RFC 3849 documentation range: 2001:db8:6f6c:X::/64 beside each IPv4 /30
PORT = 8765


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


def namespaces() -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line.strip()]


def links() -> list[str]:
    return re.findall(r"^\d+: ([^:@]+)", _ip("-o", "link", "show").stdout, flags=re.M)


def _clean_netns(res: Resource) -> None:
    if res.ident in namespaces():
        _ip("netns", "del", res.ident)


def _clean_veth(res: Resource) -> None:
    if res.ident in links():  # gone with its namespace in the usual case
        _ip("link", "del", res.ident)


def _descendants(pid: int) -> list[int]:
    """Every live process below pid (fio's server forks each job into a session of its own,
    so killing the server's process group does not reach the job)."""
    children: dict[int, list[int]] = {}
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{p}/stat") as f:
                children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(p))
        except (OSError, ValueError, IndexError):
            continue
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _kill_server_tree(pid: int) -> None:
    """SIGKILL the server's process group and every job it forked."""
    below = _descendants(pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for c in below:
        try:
            os.kill(c, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _clean_server(res: Resource) -> None:
    pid, start = int(res.info.get("pid", 0)), int(res.info.get("start", 0))
    if pid and owners.is_alive(pid, start):
        _kill_server_tree(pid)
        deadline = time.monotonic() + 10
        while owners.is_alive(pid, start) and time.monotonic() < deadline:
            time.sleep(0.05)


register_cleaner("test-netns", _clean_netns)
register_cleaner("test-veth", _clean_veth)
register_cleaner("test-fio-server", _clean_server)


def sweep_dead() -> list[str]:
    """Namespaces, veths and host loop devices of test processes that died (a worker killed
    mid-test leaves them; each carries its owner's tag, the loop device in its image's name)."""
    gone = []
    for ns in namespaces():
        if "-fleet-" in ns and owners.dead_owner_of_name(ns):
            _ip("netns", "pids", ns, check=False)
            _ip("netns", "del", ns, check=False)
            gone.append(ns)
    for dev, backing in _cleaners.attached_loops():
        name = os.path.basename(backing)
        if "-fleet-" in name and owners.dead_owner_of_name(name):
            _cleaners.detach_loop(dev)
            gone.append(f"{dev} ({backing})")
    return gone


def subnet(x: int) -> tuple[str, str]:
    """(outside, inside) address of /30 number x (0..191) of the documentation ranges."""
    net, base = TEST_NETS[x // 64], (x % 64) * 4
    return f"{net}.{base + 1}", f"{net}.{base + 2}"


def free_subnets(n: int) -> list[int]:
    """n /30 numbers with nothing of theirs on any interface or route here."""
    used = _ip("-o", "-4", "addr", "show").stdout + _ip("-4", "route", "show").stdout
    seen = set(re.findall(r"\d+\.\d+\.\d+\.\d+", used))

    def quad(x: int) -> set[str]:
        net, base = TEST_NETS[x // 64], (x % 64) * 4
        return {f"{net}.{base + i}" for i in range(4)}

    taken = {x for x in range(192) if quad(x) & seen}
    start = os.getpid() % 192
    out = [x for x in list(range(start, 192)) + list(range(0, start)) if x not in taken][:n]
    if len(out) < n:
        raise RuntimeError("no free /30 subnets in the documentation ranges")
    return out


@dataclass
class NsHost:
    name: str
    netns: str
    veth: str
    address: str
    port: int
    device: str
    image: Path
    server: subprocess.Popen[bytes] | None = None
    server_res: Resource | None = None
    ledger: Ledger | None = None
    log_dir: Path | None = None
    proxy: subprocess.Popen[bytes] | None = None

    def kill_server(self) -> None:
        """SIGKILL the server and the jobs it forked, as a crashed host would lose them."""
        if self.server and self.server.poll() is None:
            _kill_server_tree(self.server.pid)
            self.server.wait(timeout=10)


    def freeze(self) -> list[int]:
        """SIGSTOP the server and every process it forked (its connection handler, its job): a host
        that hangs. The ledger's cleaner SIGKILLs them, stopped or not."""
        assert self.server is not None
        pids = [self.server.pid, *_descendants(self.server.pid)]
        for p in pids:
            try:
                os.kill(p, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        return pids

    def babble(self, mode: str, after: float = 0.5) -> None:
        """Put a babbling proxy (tests/fleet/babbler.py) on the host's address, in front of its real
        server, which moves to the namespace's loopback."""
        assert self.ledger is not None and self.server_res is not None
        self.kill_server()
        self.ledger.release(self.server_res)
        start_server(self.ledger, self, log_dir=self.log_dir, bind=("127.0.0.1", self.port + 1))
        log = open((self.log_dir or self.image.parent) / f"{self.name}-babbler.log", "wb")
        with self.ledger.creating("test-fio-server", f"{self.name}-babbler") as res:
            self.proxy = subprocess.Popen(
                ["ip", "netns", "exec", self.netns, sys.executable, "-m", "tests.fleet.babbler", "--listen",
                 self.address, "--port", str(self.port), "--upstream-port", str(self.port + 1), "--mode", mode,
                 "--after", str(after)],
                cwd=_REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            self.ledger.update(res, pid=self.proxy.pid, start=owners.start_time(self.proxy.pid) or 0)
        _wait_listening(self, self.port, self.proxy, log.name)


def _wait_listening(host: NsHost, port: int, proc: subprocess.Popen[bytes], log: str) -> None:
    deadline = time.monotonic() + 15
    while not _listening(host.netns, port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{host.name}: nothing listens on port {port}: {Path(log).read_text()}")
        time.sleep(0.1)


def _listening(netns: str, port: int) -> bool:
    out = subprocess.run(["ip", "netns", "exec", netns, "ss", "-Hltn", f"sport = :{port}"],
                         capture_output=True, text=True, timeout=10).stdout
    return bool(out.strip())


def start_server(ledger: Ledger, host: NsHost, fio: str = "fio", log_dir: Path | None = None,
                 bind: tuple[str, int] | None = None) -> None:
    """`fio --server` in the host's namespace, on its address (or `bind`)."""
    address, port = bind or (host.address, host.port)
    log = (log_dir or host.image.parent) / f"{host.name}-server.log"
    family = "ip6" if ":" in address else "ip"
    with ledger.creating("test-fio-server", host.name) as res:
        host.server = subprocess.Popen(
            ["ip", "netns", "exec", host.netns, fio, f"--server={family}:{address},{port}"],
            stdout=open(log, "ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        ledger.update(res, pid=host.server.pid, start=owners.start_time(host.server.pid) or 0)
    host.server_res, host.ledger, host.log_dir = res, ledger, log_dir
    _wait_listening(host, port, host.server, str(log))


@contextmanager
def ns_fleet(workdir: Path, n: int = 3, image_mb: int = 64, start_servers: bool = True,
             ipv6: bool = False) -> Iterator[list[NsHost]]:
    """n namespace hosts with fio servers and loop devices; all removed on exit. ipv6: the servers
    listen on the veth's IPv6 address (2001:db8:6f6c:X::2, added without duplicate detection so it
    is usable at once) instead of its IPv4 one; both are on the link."""
    sweep_dead()
    ledger = Ledger(workdir / "ledger")
    hosts: list[NsHost] = []
    try:
        tag = f"{os.getpid() % 100000:05d}"
        with _subnets_chosen():
            _add_hosts(ledger, workdir, hosts, tag, n, image_mb, ipv6)
        if start_servers:
            for h in hosts:
                start_server(ledger, h, log_dir=workdir)
        yield hosts
    finally:
        for h in hosts:
            if h.server and h.server.poll() is None:
                h.kill_server()
        errors = ledger.release_all()
        assert not errors, errors


def _add_hosts(ledger: Ledger, workdir: Path, hosts: list[NsHost], tag: str, n: int, image_mb: int,
               ipv6: bool) -> None:
    for i, x in enumerate(free_subnets(n)):
        ns = owners.tag("fleet", f"h{i}")
        veth_out, veth_in = f"iofl{tag}o{i}", f"iofl{tag}i{i}"
        with ledger.creating("test-netns", ns):
            _ip("netns", "add", ns)
        with ledger.creating("test-veth", veth_out):
            _ip("link", "add", veth_out, "type", "veth", "peer", "name", veth_in)
        _ip("link", "set", veth_in, "netns", ns)
        outside, inside = subnet(x)
        _ip("addr", "add", f"{outside}/30", "dev", veth_out)
        _ip("link", "set", veth_out, "up")
        _ip("-n", ns, "addr", "add", f"{inside}/30", "dev", veth_in)
        if ipv6:
            _ip("-6", "addr", "add", f"{V6_PREFIX}{x:x}::1/64", "dev", veth_out, "nodad")
            _ip("-n", ns, "-6", "addr", "add", f"{V6_PREFIX}{x:x}::2/64", "dev", veth_in, "nodad")
        _ip("-n", ns, "link", "set", veth_in, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        image = workdir / f"{ns}.img"  # tagged: a killed test's loop device is found by `iolab clean --all`
        with ledger.creating("file", str(image)):
            with open(image, "xb") as f:
                f.truncate(image_mb << 20)
        with ledger.creating("loop", "", backing=str(image)) as res:
            dev = subprocess.run(["losetup", "-f", "--show", str(image)], capture_output=True, text=True,
                                 check=True, timeout=30).stdout.strip()
            ledger.update(res, ident=dev)
        address = f"{V6_PREFIX}{x:x}::2" if ipv6 else inside
        hosts.append(NsHost(f"h{i}", ns, veth_out, address, PORT, dev, image))


SUBNET_LOCK = Path("/run/lock/iolab-test-fleet-subnets.lock")


@contextmanager
def _subnets_chosen() -> Iterator[None]:
    """Choosing free /30s and putting addresses on them, one test process at a time (machine-wide):
    two pytest workers (or two suites) that read `ip addr` at once would pick the same subnets."""
    SUBNET_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(SUBNET_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def port_open(address: str, port: int) -> bool:
    with socket.socket() as sk:
        sk.settimeout(2)
        return sk.connect_ex((address, port)) == 0
