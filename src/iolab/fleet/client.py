"""Driving fio's client: one `fio --client` per host, started at one instant, each on its own.

One client for every host made every host hostage to the worst: fio's client writes its
JSON only when every server is done, so one hung server lost every host's results, and one
server's stray text in the shared output broke the parse for all. Here each host gets its
own client, in its own work directory, with its own deadline:

* **Started together.** Every client is spawned first and waits on a FIFO in its work dir
  (`gate`); closing all the FIFOs' write ends releases them at one instant.
* **Its own deadline, about the trial's own time.** A host whose result has not come back
  PEER_LAG_S after the other hosts' did (they run the same time-based job from the same
  instant), or START_ALLOWANCE_S past the job's own length, is stopped (a job that ends by
  size, such as a prefill, has only the trial's timeout): SIGINT (on which fio asks its
  server to stop the job), then SIGKILL HOST_STOP_GRACE_S later (a hung server never
  answers). Nothing waits for the trial's generous timeout. Ctrl-C or SIGTERM of iolab stops
  every client the same way, with STOP_GRACE_S for healthy servers to stop their jobs.
* **Its result read as untrusted data** (fleet/fio_output.py): fio's JSON found by its header
  and decoded exactly; files opened without following links, read up to a cap; file sizes
  bounded by RLIMIT_FSIZE.
* **Logs for every host.** fio's client writes a host's logs as `<log name>.<host>`, with
  the host as it was given: `logs/h_iops.1.log.192.0.2.7`, or, for a unix-socket host, through
  the relay socket in the work dir (fleet/relay.py), `logs/h_iops.1.log.server.sock`.
* **As an unprivileged user.** fio's client obeys its server (SENDFILE reads any file it
  names, IOLOG writes at any path it names), so each client runs as accounts.CLIENT_USER
  with a work dir of its own (0700) under one only root may enter.
* **Confined to its work dir** (`client_confinement`, core/confine.py): what the user alone
  does not stop, a mount namespace does. The client sees the root read-only and, in place of
  the directories where users and iolab keep data (/root, /home, /tmp, /var/tmp, /var/lib,
  /srv, /mnt, /media, /opt, iolab's data and scratch dirs), empty read-only ones: a file there
  that happens to be world-readable cannot be sent back, a world-writable directory cannot be
  written. Only its work dir is writable; the network is the host's (it dials its servers).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import signal
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iolab.cgroups.executor import HostExecutor
from iolab.core import paths
from iolab.core.confine import Confinement
from iolab.core.errors import CapabilityMissing
from iolab.core.exec import ExecRequest, ExecResult, Running
from iolab.core.resources import Ledger
from iolab.fleet import accounts, fio_output
from iolab.fleet.aggregate import HistSample, HostRun, Sample, parse_hist_log, parse_log
from iolab.fleet.hosts import FleetHost
from iolab.fleet.relay import RELAY_NAME, UnixRelay

RESULT_FILE = "fio-result.json"
JOB_FILE = "job.fio"
GATE = "gate"
LOG_DIR = "logs"
LOG_PREFIX = f"{LOG_DIR}/h"      # relative: fio's client writes `logs/h_iops.1.log.<host>` in its work dir
STOP_GRACE_S = 15.0              # Ctrl-C: healthy servers stop their jobs within this
HOST_STOP_GRACE_S = 3.0          # a host past its deadline: a live server stops at once, a hung one never
START_ALLOWANCE_S = 15.0         # fio's job start through its server (1.4 s on an idle machine here)
PEER_LAG_S = 5.0                 # a healthy host's result comes back within this of the others'
GATE_TIMEOUT_S = 30.0
FILE_SIZE_LIMIT = 256 << 20      # RLIMIT_FSIZE of a client: no file it writes grows past this
_GATE_SCRIPT = 'read _ < gate; exec "$@"'


@dataclass
class HostResult:
    """One host's client, as it ended."""

    name: str
    run: HostRun | None            # its result, when it came back whole
    why: str | None                # why not
    doc: dict[str, Any] | None     # fio's document for this host
    said: str = ""                 # text fio printed before its JSON (the server's messages), bounded
    log_bound_ms: float | None = None  # host clock minus ours is at least this (from its logs' arrival)
    exec: ExecResult | None = None
    text: str = ""                 # the output file's text before the JSON, the client's stdout and stderr


@dataclass
class ClientRun:
    ok: list[HostRun]
    failed: dict[str, str]                                      # host name -> why
    hosts: dict[str, HostResult] = field(default_factory=dict)
    jobs: dict[str, str] = field(default_factory=dict)

    @property
    def raw(self) -> dict[str, Any]:
        return {"hosts": {n: r.doc for n, r in self.hosts.items() if r.doc is not None}}


def client_argv(account: accounts.Account, argv: list[str]) -> list[str]:
    """How a fleet client is started: as `account`, files bounded by RLIMIT_FSIZE, after the gate.
    The OS-level confinement (a mount namespace with only the work dir writable) wraps this."""
    prlimit = shutil.which("prlimit") or "/usr/bin/prlimit"
    return accounts.drop_argv(account, [prlimit, f"--fsize={FILE_SIZE_LIMIT}", "--",
                                        "/bin/sh", "-c", _GATE_SCRIPT, "iolab-fleet-gate", *argv])


# Where users and iolab keep data: hidden from a fleet client (an empty read-only tmpfs each).
# /run stays (/etc/resolv.conf may point into it: remote hosts are dialled by name), as does
# /etc (the system's own configuration; its secrets, /etc/shadow, are root's alone).
CLIENT_HIDDEN = ("/root", "/home", "/tmp", "/var/tmp", "/var/lib", "/srv", "/mnt", "/media", "/opt", "/etc/iolab")


def client_confinement(programs: tuple[str, ...] = ()) -> Confinement:
    """The fleet client's confinement: everything read-only, the data directories hidden, only
    the executor's work dir writable (HostExecutor adds it), the host's network. It keeps for
    `client_argv`'s setpriv just what switching to the client's user takes (setuid, setgid, the
    bounding set) and entering the work dir that user owns (DAC_READ_SEARCH); setpriv drops
    all of them, also from the bounding set, before anything of fio runs. A directory that
    holds one of `programs` (a fio built into /opt) stays visible."""
    def under(path: str, d: str) -> bool:
        return path == d or path.startswith(d + "/")

    needed = [os.path.realpath(p) for p in programs]
    hidden: list[str] = []
    for d in (*CLIENT_HIDDEN, str(paths.data_dir()), str(paths.scratch_dir())):
        real = os.path.realpath(d)
        if os.path.isdir(real) and not any(under(real, h) for h in hidden) \
                and not any(under(p, real) for p in needed):
            hidden.append(real)
    return Confinement(hidden=tuple(hidden), share_net=True, unix_sockets=True,  # a server may be a socket path
                       caps=("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_DAC_READ_SEARCH"))


def expected_seconds(job: str) -> float | None:
    """ramp_time + runtime of a time-based job iolab rendered; None when the job ends by size."""
    opts = dict(ln.split("=", 1) for ln in job.splitlines() if "=" in ln and not ln.startswith(("#", ";")))
    if opts.get("time_based") != "1" or "runtime" not in opts:
        return None
    return sum(_seconds(opts.get(k, "0")) for k in ("runtime", "ramp_time"))


def _seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)?", text.strip())
    if not m:
        return 0.0
    return float(m.group(1)) * {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}[m.group(2) or "s"]


@dataclass
class _Client:
    host: FleetHost
    ex: HostExecutor
    relay: UnixRelay | None = None
    running: Running | None = None
    result: ExecResult | None = None
    crash: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    finished_at: float | None = None
    doc: dict[str, Any] | None = None
    before: str = ""
    truncated: bool = False
    stopped_at: float | None = None
    stopped_why: str | None = None
    killed: bool = False

    @property
    def pid(self) -> int | None:
        return getattr(getattr(self.running, "proc", None), "pid", None)

    @property
    def has_result(self) -> bool:
        return self.done.is_set() and self.stopped_at is None and bool(fio_output.host_entries(self.doc))


def run_clients(base: Path, ledger: Ledger | None, hosts: list[FleetHost], jobs: dict[str, str], timeout_s: float,
                skews: dict[str, float] | None = None, output_format: str = "json+",
                logs: bool = False) -> ClientRun:
    """Run each host's job through its own client, all released at one instant; per-host results."""
    if os.geteuid() != 0:
        raise CapabilityMissing(f"a fleet's fio clients run as the unprivileged user {accounts.CLIENT_USER} (fio's "
                                "client does what its server asks: send back any file, write anywhere), and only "
                                "root can switch to it: run iolab as root")
    account, _ = accounts.ensure(accounts.CLIENT_USER)
    fio = shutil.which("fio") or "fio"
    expected = max((e for j in jobs.values() if (e := expected_seconds(j)) is not None), default=None)
    own_limit = min(timeout_s, START_ALLOWANCE_S + expected * 1.1) if expected is not None else timeout_s
    clients: list[_Client] = []
    try:
        for h in hosts:
            clients.append(_prepare(base, ledger, h, jobs[h.name], account))
        for c in clients:
            address = f"sock:{RELAY_NAME}" if c.host.is_unix else c.host.client_arg()
            argv = client_argv(account, [fio, f"--output-format={output_format}", f"--output={RESULT_FILE}",
                                         f"--client={address}", JOB_FILE])
            c.running = c.ex.spawn(ExecRequest(argv=argv, timeout_s=own_limit + HOST_STOP_GRACE_S + 30))
            threading.Thread(target=_wait, args=(c,), daemon=True, name=f"fleet-client-{c.host.name}").start()
        released = _release(clients)
        _supervise(clients, released, own_limit, expected)
    except BaseException:
        _stop_all(clients)
        raise
    finally:
        for c in clients:
            if c.relay is not None:
                c.relay.close()
    try:
        return _collect(clients, jobs, skews or {}, logs)
    finally:
        for c in clients:
            c.ex.close()


def _prepare(base: Path, ledger: Ledger | None, h: FleetHost, job: str, account: accounts.Account) -> _Client:
    """The host's work dir (the client's user's, 0700), its job, its gate, its relay; the client
    confined to that dir (client_confinement)."""
    ex = HostExecutor(base, ledger, confinement=client_confinement((shutil.which("fio") or "fio",)))
    c = _Client(h, ex)
    try:
        accounts.give(ex.workdir, account, 0o700)
        (ex.workdir / JOB_FILE).write_text(job)
        os.chmod(ex.workdir / JOB_FILE, 0o644)
        (ex.workdir / LOG_DIR).mkdir()
        accounts.give(ex.workdir / LOG_DIR, account, 0o700)
        os.mkfifo(ex.workdir / GATE, 0o600)
        accounts.give(ex.workdir / GATE, account, 0o600)
        if h.is_unix:
            c.relay = UnixRelay(ex.workdir, h.address, account)
    except BaseException:
        ex.close()
        raise
    return c


def _wait(c: _Client) -> None:
    try:
        assert c.running is not None
        c.result = c.running.wait()
        read = fio_output.read_capped(c.ex.workdir / RESULT_FILE, fio_output.MAX_OUTPUT_BYTES)
        if read is not None:
            c.truncated = read.truncated
            c.doc, c.before = fio_output.locate_json(read.text)
    except BaseException as exc:  # noqa: BLE001 - reported as this host's failure
        c.crash = exc
    finally:
        c.finished_at = time.monotonic()
        c.done.set()


def _release(clients: list[_Client]) -> float:
    """Open every gate's write end (each client is waiting on its read end), then close them all."""
    fds: list[int] = []
    try:
        for c in clients:
            end = time.monotonic() + GATE_TIMEOUT_S
            while not c.done.is_set():
                try:
                    fds.append(os.open(c.ex.workdir / GATE, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC))
                    break
                except OSError as exc:
                    if exc.errno != errno.ENXIO or time.monotonic() > end:
                        c.stopped_why = f"its client did not start ({exc.strerror})"
                        _interrupt(c)
                        break
                    time.sleep(0.005)
    finally:
        released = time.monotonic()
        for fd in fds:
            os.close(fd)
    return released


def _supervise(clients: list[_Client], released: float, own_limit: float, expected: float | None) -> None:
    """Wait for every client; stop each at its own deadline."""
    while not all(c.done.is_set() for c in clients):
        now = time.monotonic()
        back = [c.finished_at for c in clients if c.has_result and c.finished_at is not None]
        for c in clients:
            if c.done.is_set():
                continue
            if c.stopped_at is None:
                # only a time-based job runs as long on every host; a job that ends by size (a prefill)
                # takes as long as its host's disk needs
                peers_back = max(back) + PEER_LAG_S + 0.05 * expected if back and expected is not None else None
                if peers_back is not None and now > peers_back:
                    c.stopped_why = (f"no result {now - max(back):.0f} s after the other hosts' came back (its job "
                                     "runs as long as theirs): its server hangs or stopped answering")
                elif now > released + own_limit:
                    c.stopped_why = (f"no result within {own_limit:.0f} s" + (f" (its job takes {expected:.0f} s)"
                                                                              if expected else "")
                                     + ": its server hangs or stopped answering")
                if c.stopped_why:
                    _interrupt(c)
            elif not c.killed and now > c.stopped_at + HOST_STOP_GRACE_S:
                c.killed = True
                assert c.running is not None
                c.running.kill()
        time.sleep(0.02)


def _interrupt(c: _Client) -> None:
    """SIGINT the client: fio's client then asks its server to stop the job."""
    c.stopped_at = c.stopped_at or time.monotonic()
    if c.running is not None and not c.done.is_set():
        with contextlib.suppress(ProcessLookupError):
            c.running.send_signal(signal.SIGINT)  # to fio inside its confinement, not to bwrap


def _stop_all(clients: list[_Client]) -> None:
    """Ctrl-C, SIGTERM, an error: every client asked to stop its server's job, killed if it lingers."""
    for c in clients:
        c.stopped_why = c.stopped_why or "stopped"
        _interrupt(c)
    end = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < end and not all(c.done.is_set() or c.running is None for c in clients):
        time.sleep(0.05)
    for c in clients:
        if c.running is not None and not c.done.is_set():
            c.running.kill()
    for c in clients:
        if c.running is not None:
            c.done.wait(timeout=10)
        c.ex.close()


def _collect(clients: list[_Client], jobs: dict[str, str], skews: dict[str, float], logs: bool) -> ClientRun:
    """Each host's result, read once every client has ended (nothing of the client's user still runs
    in these directories)."""
    ok: list[HostRun] = []
    failed: dict[str, str] = {}
    results: dict[str, HostResult] = {}
    for c in clients:
        h = c.host
        stderr = c.result.stderr[-4000:] if c.result else ""
        text = c.before + "\n" + (c.result.stdout[-4000:] if c.result else "") + "\n" + stderr
        r = HostResult(h.name, None, None, c.doc, fio_output.said(c.before), exec=c.result, text=text)
        results[h.name] = r
        run = HostRun(h.name, {}, skew_ms=skews.get(h.name, 0.0))
        if logs:
            run.iops_logs, b1 = _logs(c.ex.workdir, "h_iops")
            run.bw_logs, b2 = _logs(c.ex.workdir, "h_bw")
            hist, b3 = _logs(c.ex.workdir, "h_clat_hist", hist=True)
            run.hist_logs = hist
            bounds = [b for b in (b1, b2, b3) if b is not None]
            r.log_bound_ms = max(bounds) if bounds else None
        entries = fio_output.host_entries(c.doc)
        errors = [e for e in entries if e.get("error")]
        if c.crash is not None:
            r.why = f"{h.label()}: its client could not be run ({c.crash})"
        elif c.stopped_why:
            r.why = f"{h.label()}: {c.stopped_why}; its client was stopped"
        elif c.truncated:
            r.why = f"{h.label()}: its output grew past {fio_output.MAX_OUTPUT_BYTES >> 20} MiB and was not read"
        elif not entries:
            rc = c.result.returncode if c.result else None
            r.why = (f"{h.label()}: no result (fio exit status {rc}): its server stopped, the connection was "
                     f"lost or its job did not start; fio said: {fio_output.said(text)}")
        elif errors:
            r.why = (f"{h.label()}: fio job {errors[0].get('jobname')} failed with error {errors[0]['error']}; "
                     f"fio said: {fio_output.said(text)}")
        if r.why:
            failed[h.name] = r.why
            continue
        run.stats = entries[0]
        r.run = run
        ok.append(run)
    return ClientRun(ok, failed, results, dict(jobs))


def _logs(workdir: Path, prefix: str, hist: bool = False) -> tuple[list[list[Any]], float | None]:
    """A host's logs of one kind (one list per job), and the lower bound of its clock skew they give:
    every sample was taken before the file holding it was written here, so (sample time on the host's
    clock) - (file's mtime on ours) <= skew, for the latest sample of each file."""
    out: list[list[Any]] = []
    bound: float | None = None
    where = workdir / LOG_DIR
    if not stat.S_ISDIR(os.lstat(where).st_mode):  # the client's user could have put a link there
        return out, bound
    names = sorted(p.name for p in where.iterdir() if p.name.startswith(prefix + "."))
    for name in names[:fio_output.MAX_LOG_FILES]:
        read = fio_output.read_capped(workdir / LOG_DIR / name, fio_output.MAX_LOG_BYTES)
        if read is None:
            continue
        samples: list[Sample] | list[HistSample] = parse_hist_log(read.text) if hist else parse_log(read.text)
        out.append(list(samples))
        if samples:
            b = max(s.t_ms for s in samples) - read.mtime_ns / 1e6
            bound = b if bound is None else max(bound, b)
    return out, bound
