"""Driving `fio --client`: one job file per host, one fio client for all of them.

fio's client returns one `client_stats` entry per host job (plus an "All clients" entry,
which iolab does not use: it lacks latency percentiles in fio 3.33) and writes each host's
logs on this side, suffixed with the host's address. A host whose server died, timed out or
whose job failed has no entry (or one with an error): that host's failure, not the trial's.

A server keeps running its job when its client is killed, so the client is never simply
killed: at its deadline, and on Ctrl-C or SIGTERM of iolab, it gets SIGINT, on which fio's
client tells every server to stop its job; only if it has not exited STOP_GRACE_S later is
it killed.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from iolab.core import owner as owners
from iolab.core.exec import ExecRequest, ExecResult, Executor
from iolab.fleet.aggregate import HostRun, parse_hist_log, parse_log
from iolab.fleet.hosts import FleetHost

RESULT_FILE = "fio-result.json"
ALL_CLIENTS = "All clients"
STOP_GRACE_S = 15.0


@dataclass
class ClientRun:
    ok: list[HostRun]
    failed: dict[str, str]            # host name -> why
    raw: dict[str, Any] | None
    result: ExecResult
    jobs: dict[str, str] = field(default_factory=dict)


def run_clients(executor: Executor, hosts: list[FleetHost], jobs: dict[str, str], timeout_s: float,
                log_dir: Path | None = None, skews: dict[str, float] | None = None,
                output_format: str = "json+") -> ClientRun:
    """Run each host's job through its server at once; per-host results, per-host failures."""
    argv = ["fio", f"--output-format={output_format}", f"--output={RESULT_FILE}"]
    files = {}
    for h in hosts:
        files[f"{h.name}.fio"] = jobs[h.name]
        argv += [f"--client={h.client_arg()}", f"{h.name}.fio"]
    res = run_stoppable(executor, ExecRequest(argv=argv, timeout_s=timeout_s, files=files, collect=[RESULT_FILE]))
    text = res.collected.get(RESULT_FILE, "")
    raw = _parse(text) if output_format.startswith("json") else None
    entries = [e for e in (raw or {}).get("client_stats", []) if e.get("jobname") != ALL_CLIENTS]
    ok: list[HostRun] = []
    failed: dict[str, str] = {}
    for h in hosts:
        mine = [e for e in entries if _is(h, e)]
        if not mine:
            why = "timed out and was stopped" if res.timed_out else f"fio exit status {res.returncode}"
            failed[h.name] = (f"no result from {h.label()}: its server stopped, the connection was lost "
                              f"or its job did not start ({why}; {_tail(res, text)})")
            continue
        errors = [e for e in mine if e.get("error")]
        if errors:
            failed[h.name] = f"{h.label()}: fio job {errors[0].get('jobname')} failed with error {errors[0]['error']}"
            continue
        run = HostRun(h.name, mine[0], skew_ms=(skews or {}).get(h.name, 0.0))
        if log_dir is not None:
            run.iops_logs = _logs(log_dir, f"{h.name}_iops")
            run.bw_logs = _logs(log_dir, f"{h.name}_bw")
            run.hist_logs = [parse_hist_log(p.read_text(errors="replace"))
                             for p in sorted(log_dir.glob(f"{h.name}_clat_hist.*.log*"))]
        ok.append(run)
    return ClientRun(ok, failed, raw, res, dict(jobs))


def run_stoppable(executor: Executor, req: ExecRequest) -> ExecResult:
    """Run a fio client; at its deadline or on any exception (Ctrl-C) ask it to stop its servers' jobs."""
    running = executor.spawn(replace(req, timeout_s=req.timeout_s + STOP_GRACE_S))
    pid = getattr(getattr(running, "proc", None), "pid", None)
    fired = threading.Event()

    def deadline() -> None:
        fired.set()
        _interrupt(pid)

    timer = threading.Timer(req.timeout_s, deadline)
    timer.daemon = True
    timer.start()
    try:
        res = running.wait()
    except BaseException:
        _interrupt(pid)
        end = time.monotonic() + STOP_GRACE_S
        while pid and _running(pid) and time.monotonic() < end:
            time.sleep(0.05)
        running.kill()
        raise
    finally:
        timer.cancel()
    if fired.is_set():
        res.timed_out = True
    return res


def _interrupt(pid: int | None) -> None:
    if pid is not None:
        try:
            os.kill(pid, signal.SIGINT)
        except ProcessLookupError:
            pass


def _running(pid: int) -> bool:
    fields = owners.proc_stat(pid)
    return fields is not None and len(fields) > 0 and fields[0] != "Z"


def _is(h: FleetHost, entry: dict[str, Any]) -> bool:
    name = str(entry.get("hostname", ""))
    if h.is_unix:
        return name == h.address
    port = entry.get("port")
    return name == h.address and (port is None or int(port) == h.port)


def _parse(text: str) -> dict[str, Any] | None:
    start = text.find("\n{") + 1 if not text.startswith("{") else 0
    try:
        data = json.loads(text[start:]) if text.strip() else None
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def _logs(log_dir: Path, prefix: str) -> list[list[Any]]:
    return [parse_log(p.read_text(errors="replace")) for p in sorted(log_dir.glob(f"{prefix}.*.log*"))]


def _tail(res: ExecResult, text: str) -> str:
    lines = [ln for ln in (res.tail() + "\n" + text[:2000]).splitlines()
             if ln.strip() and not ln.startswith("<") and "{" not in ln]
    return " / ".join(lines[-3:])[:400] or "fio said nothing more"
