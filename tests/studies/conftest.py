"""Running built-in studies through the real CLI, each test with its own data and scratch dirs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import machine

ROOT = Path(__file__).resolve().parents[2]
IOLAB = [sys.executable, "-m", "iolab.cli"]


class Lab:
    """An isolated iolab: its own results DB, reports, ledger and scratch directory."""

    def __init__(self, base: Path):
        self.env = dict(os.environ, IOLAB_DATA=str(base / "data"), IOLAB_SCRATCH=str(base / "scratch"))
        self.pids: list[int] = []  # every iolab process this lab ran: what they create carries their tag

    def run(self, *args: str, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess[str]:
        with subprocess.Popen(IOLAB + list(args), env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) as proc:
            self.pids.append(proc.pid)
            try:
                stdout, stderr = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise
        r = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        if check and r.returncode != 0:
            raise AssertionError(f"iolab {' '.join(args)} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
        return r

    def report_json(self, run: str = "latest") -> dict[str, Any]:
        return json.loads(self.run("report", run, "--format", "json").stdout)

    def quick_study(self, name: str, timeout: float = 900, complete: bool = True
                    ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
        """Run `iolab study NAME --quick`; check it ends with the report path and keeps the contract."""
        result = self.run("study", name, "--quick", timeout=timeout)
        assert "report: " in result.stdout.splitlines()[-1], "the run must end with the report path"
        doc = self.report_json()
        assert_contract(doc, name)
        if complete:
            assert doc["status"] == "complete"
        return result, doc

    def own_processes(self, pattern: str = "qemu-system") -> list[str]:
        """Processes matching `pattern` that this lab's iolab runs started: their command line
        carries the owner tag of one of those runs (`-name iolab-o<pid>.<start>-...`, also a
        diskless network peer's) or names the lab's scratch or data directory (a guest's disk
        image lives there). Another iolab run on the machine is not this lab's leftover."""
        out = subprocess.run(["pgrep", "-fa", pattern], capture_output=True, text=True).stdout
        mine = (self.env["IOLAB_SCRATCH"], self.env["IOLAB_DATA"], *(f"iolab-o{pid}." for pid in self.pids))
        return [ln for ln in out.splitlines() if any(m in ln for m in mine)]

    def report_path(self, result: subprocess.CompletedProcess[str]) -> Path:
        line = [ln for ln in result.stdout.splitlines() if ln.startswith("report: ")][-1]
        return Path(line.split("report: ", 1)[1].strip())


def _lab_base() -> Path:
    base = Path(os.environ.get("IOLAB_TEST_BASE", "/var/tmp")) / f"iolab-test-{os.getpid()}-{os.urandom(3).hex()}"
    base.mkdir(parents=True)
    return base


@pytest.fixture()
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    base = _lab_base()
    yield Lab(base)
    subprocess.run(["rm", "-rf", str(base)])


@dataclass
class Reproduced:
    """One `iolab reproduce --quick` run: its output, its page, and each study's child run."""

    lab: Lab
    result: subprocess.CompletedProcess[str]
    seconds: float
    doc: dict[str, Any]  # the reproduce run's own results document
    children: dict[str, str]  # study name -> run id

    @property
    def page(self) -> Path:
        return self.lab.report_path(self.result)

    def study(self, name: str, complete: bool = True) -> tuple[Path, dict[str, Any]]:
        """(report path, results document) of the study's run, checked against the contract."""
        assert name in self.children, f"reproduce ran no {name} run: {self.children}\n{self.result.stdout}"
        run_id = self.children[name]
        doc = self.lab.report_json(run_id)
        assert_contract(doc, name)
        if complete:
            assert doc["status"] == "complete", [(t["id"], t["error"]) for t in doc["trials"] if t["error"]]
        path = Path(self.lab.env["IOLAB_DATA"]) / "reports" / run_id / "report.html"
        assert path.is_file(), f"reproduce wrote no report for {name} at {path}"
        return path, doc


@pytest.fixture(scope="session")
def reproduced() -> Iterator[Reproduced]:
    """`iolab reproduce --quick` once per session; the study tests read its child runs.

    These are the same runs `iolab study NAME --quick` makes (docs/reproduce.md), so the
    suite runs each quick study once and also tests the reproduce page on them."""
    base = _lab_base()
    lab = Lab(base)
    # never beside a whole_machine test, in either direction (tests/machine.py): it boots TCG guests
    with machine.session_lock().reproduce_run() as waited:
        t0 = time.monotonic()
        result = lab.run("reproduce", "--quick", timeout=3000, check=False)
        seconds = time.monotonic() - t0
    print(f"\nwaited {waited:.0f} s for the whole_machine tests before the reproduce run")
    machine.NOTES.append(f"reproduce      {seconds:6.0f} s ran,  {waited:5.0f} s waited: iolab reproduce --quick "
                         f"(exit {result.returncode})")
    print(f"\niolab reproduce --quick: {seconds / 60:.1f} min, exit {result.returncode}")
    assert result.returncode == 0, \
        f"iolab reproduce --quick exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    run_id = lab.report_path(result).parent.name  # reports/<run id>/report.html; "latest" is its last child
    doc = lab.report_json(run_id)
    assert doc["study"] == "reproduce", (run_id, doc["study"])
    yield Reproduced(lab, result, seconds, doc, dict((doc.get("extra") or {}).get("children") or {}))
    subprocess.run(["rm", "-rf", str(base)])


def assert_contract(doc: dict[str, Any], study: str) -> None:
    """The results JSON contract of docs/results.md."""
    assert doc["study"] == study
    assert isinstance(doc["run_id"], str) and doc["run_id"]
    assert doc["status"] in ("complete", "partial", "failed")
    assert doc["environment"]["kernel"] and doc["environment"]["fio_version"]
    assert doc["trials"], "no trials"
    for t in doc["trials"]:
        assert set(t) >= {"id", "params", "repetition", "status", "error", "metrics", "probes"}
        assert t["status"] in ("ok", "failed")
        assert isinstance(t["repetition"], int)
        assert (t["error"] is None) == (t["status"] == "ok")
    assert isinstance(doc["findings"], dict) and doc["findings"]


def middles(values: list[float]) -> tuple[float, float]:
    """The middle order statistics of `values` (one twice for an odd count): a median computed on
    any monotone scale (raw, log, logit) lies between them, whatever the estimator's scale."""
    s = sorted(values)
    return s[(len(s) - 1) // 2], s[len(s) // 2]


def assert_median(x: float, values: list[float], what: object = "") -> None:
    """`x` is a median of `values` (between the middle order statistics, to rounding)."""
    lo, hi = middles(values)
    assert lo * (1 - 1e-9) <= x <= hi * (1 + 1e-9), (what, x, lo, hi)


def assert_median_ratio(x: float, num: list[float], den: list[float], what: object = "") -> None:
    """`x` is a ratio of the two sides' medians (positive values)."""
    (nl, nh), (dl, dh) = middles(num), middles(den)
    assert nl / dh * (1 - 1e-9) <= x <= nh / dl * (1 + 1e-9), (what, x, (nl, nh), (dl, dh))
