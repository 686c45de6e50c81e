"""Helpers for the core tests: an isolated iolab (data dir, scratch dir, ledger) per test,
driven through the real `iolab` command, with real fio and real loop devices.

Everything a test's iolab could leave behind lives under that test's own scratch dir, so
the checks ("no loop device, no mount, no fio left") look only there: other people may be
running iolab or fio on the same machine at the same time.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
IOLAB = REPO / ".venv" / "bin" / "iolab"

# A small, fast fio workload on a small loop device: the base of most specs here.
LOOP_TARGET = """
[target]
kind = "loop"
size = "64M"
"""


def fio_workload(**over: Any) -> str:
    """A [workload] table for a 1 s randread on 16 MiB; keyword arguments override/add keys."""
    opts: dict[str, Any] = {"kind": "fio", "rw": "randread", "bs": "4k", "size": "16M", "runtime": 1,
                            "ramp_time": 0}
    opts.update(over)
    return "[workload]\n" + "\n".join(f"{k} = {_toml(v)}" for k, v in opts.items()) + "\n"


def study_table(name: str, **over: Any) -> str:
    opts: dict[str, Any] = {"name": name}
    opts.update(over)
    return "[study]\n" + "\n".join(f"{k} = {_toml(v)}" for k, v in opts.items()) + "\n"


def sysbench_cpu_spec(name: str, **study: Any) -> str:
    """A study of sysbench cpu, 1 thread, 1 s, on the host: the quickest real workload with a
    rate (events/s) that a CPU hog or another build moves; `study` adds keys to [study]."""
    return (study_table(name, **study) + '\n[target]\nkind = "host"\n\n'
            '[workload]\nkind = "sysbench-cpu"\nthreads = 1\ntime = 1\n')


def _toml(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return str(v)


def one_line(text: str) -> str:
    """Whitespace-normalised text: terminal line wrapping must not decide a test."""
    return " ".join(text.split())


@dataclass
class Lab:
    """One isolated iolab: its own results DB, reports, ledger and scratch directory."""

    root: Path
    data: Path
    scratch: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def db(self) -> Path:
        return self.data / "results.sqlite"

    @property
    def ledger_dir(self) -> Path:
        return self.data / "ledger"

    # -- running iolab ---------------------------------------------------------------
    def iolab(self, *args: str | os.PathLike, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        # stdin is not a terminal either: rich must not pick up a width from the caller's tty
        return subprocess.run([str(IOLAB), *map(str, args)], env=self.env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=timeout, cwd=self.root)

    def popen(self, *args: str | os.PathLike) -> subprocess.Popen[str]:
        return subprocess.Popen([str(IOLAB), *map(str, args)], env=self.env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=self.root)

    def spec(self, text: str, name: str = "spec.toml") -> Path:
        p = self.root / name
        p.write_text(textwrap.dedent(text))
        return p

    def report_json(self, run: str = "latest") -> dict[str, Any]:
        r = self.iolab("report", run, "--format", "json")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    # -- looking at the results store directly ---------------------------------------
    def query(self, sql: str, *args: Any) -> list[tuple]:
        if not self.db.exists():
            return []
        con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)
        try:
            return con.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise
        finally:
            con.close()

    def run_rows(self) -> list[tuple]:
        return self.query("SELECT id, status FROM runs ORDER BY created")

    def trial_rows(self, run_id: str | None = None) -> list[tuple]:
        """(trial_id, config_id, status, error, started, seq) in stored order."""
        if run_id is None:
            return self.query("SELECT trial_id, config_id, status, error, started, seq FROM trials ORDER BY seq")
        return self.query("SELECT trial_id, config_id, status, error, started, seq FROM trials WHERE run_id=? "
                          "ORDER BY seq", run_id)

    # -- what exists on the machine that belongs to this lab -------------------------
    def loops(self) -> list[tuple[str, str]]:
        """(device, backing file) of loop devices whose image lives in this lab's scratch dir."""
        return [(dev, back) for dev, back in all_loops() if back.startswith(f"{self.scratch}/")]

    def mounts(self) -> list[str]:
        with open("/proc/mounts") as f:
            return [line.split()[1] for line in f if line.split()[1].startswith(f"{self.scratch}/")]

    def fio_pids(self) -> list[int]:
        """fio processes started by this lab's iolab (their cwd is a work dir under the scratch dir)."""
        out = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                if (d / "comm").read_text().strip() != "fio":
                    continue
                cwd = os.readlink(d / "cwd")
            except OSError:
                continue
            if cwd.startswith(f"{self.scratch}/"):
                out.append(int(d.name))
        return out

    def scratch_entries(self) -> list[str]:
        return sorted(p.name for p in self.scratch.iterdir()) if self.scratch.exists() else []

    def ledger_entries(self) -> list[str]:
        return sorted(p.name for p in self.ledger_dir.iterdir()) if self.ledger_dir.exists() else []

    def assert_nothing_left(self) -> None:
        """No loop device, mount, fio process, scratch file or live ledger entry of this lab."""
        assert self.loops() == [], f"loop devices left: {self.loops()}"
        assert self.mounts() == [], f"mounts left: {self.mounts()}"
        assert self.fio_pids() == [], f"fio processes left: {self.fio_pids()}"
        assert self.scratch_entries() == [], f"files left in {self.scratch}: {self.scratch_entries()}"
        assert self.ledger_entries() == [], f"ledger entries left: {self.ledger_entries()}"

    def wait_until(self, cond: Any, timeout: float, what: str, proc: subprocess.Popen | None = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return
            if proc is not None and proc.poll() is not None:
                out, err = proc.communicate()
                raise AssertionError(f"iolab exited ({proc.returncode}) before {what}:\n{err}")
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")

    # -- last-resort cleanup, so a failing test does not leak into the machine --------
    def force_cleanup(self) -> None:
        for pid in self.fio_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while self.fio_pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        for m in sorted(self.mounts(), reverse=True):
            subprocess.run(["umount", "-l", m], capture_output=True)
        for dev, _ in self.loops():
            subprocess.run(["losetup", "-d", dev], capture_output=True)
        shutil.rmtree(self.scratch, ignore_errors=True)


def all_loops() -> list[tuple[str, str]]:
    out = subprocess.run(["losetup", "-l", "-n", "-O", "NAME,BACK-FILE"], capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2:
            rows.append((parts[0], parts[1].strip()))
    return rows


def _scratch_parent() -> Path:
    """Scratch must be on a real disk (O_DIRECT): /var/tmp, never a tmpfs /tmp."""
    p = Path("/var/tmp")
    p.mkdir(exist_ok=True)
    return p


def make_lab(root: Path) -> Lab:
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="iolab-test-", dir=_scratch_parent()))
    data = root / "data"
    env = dict(os.environ)
    env.update({"IOLAB_DATA": str(data), "IOLAB_SCRATCH": str(scratch), "IOLAB_CACHE": str(root / "cache"),
                "PYTHONUNBUFFERED": "1"})
    env.pop("COLUMNS", None)
    return Lab(root=root, data=data, scratch=scratch, env=env)


def drive(lab: Lab, argvs: list[list[str]], timeout: float = 900) -> list[dict[str, Any]]:
    """Run many `iolab` command lines in one process (tests/core/cli_driver.py), with this lab's
    environment: [{"exit", "stdout", "stderr", "traceback", "hang"}] in order."""
    import sys

    cases, results = lab.root / "driver-cases.json", lab.root / "driver-results.json"
    env = {k: lab.env[k] for k in ("IOLAB_DATA", "IOLAB_SCRATCH", "IOLAB_CACHE")}
    cases.write_text(json.dumps([{"argv": [str(a) for a in argv], "env": env} for argv in argvs]))
    subprocess.run([sys.executable, "-m", "tests.core.cli_driver", str(cases), str(results)], cwd=REPO,
                   check=True, timeout=timeout)
    out = json.loads(results.read_text())
    cases.unlink()
    results.unlink()
    return out


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (loop devices)")
needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio")


def tmpfs_at(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` (made) for the test's life: a data dir that fills up or
    goes read-only (`mount -o remount,ro`). A generator for a fixture: `yield from tmpfs_at(...)`."""
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)
