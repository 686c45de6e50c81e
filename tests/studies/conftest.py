"""Running built-in studies through the real CLI, each test with its own data and scratch dirs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
IOLAB = [sys.executable, "-m", "iolab.cli"]


class Lab:
    """An isolated iolab: its own results DB, reports, ledger and scratch directory."""

    def __init__(self, base: Path):
        self.env = dict(os.environ, IOLAB_DATA=str(base / "data"), IOLAB_SCRATCH=str(base / "scratch"))

    def run(self, *args: str, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(IOLAB + list(args), env=self.env, capture_output=True, text=True, timeout=timeout)
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

    def report_path(self, result: subprocess.CompletedProcess[str]) -> Path:
        line = [ln for ln in result.stdout.splitlines() if ln.startswith("report: ")][-1]
        return Path(line.split("report: ", 1)[1].strip())


@pytest.fixture()
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    base = Path(os.environ.get("IOLAB_TEST_BASE", "/var/tmp")) / f"iolab-test-{os.getpid()}-{os.urandom(3).hex()}"
    base.mkdir(parents=True)
    yield Lab(base)
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
