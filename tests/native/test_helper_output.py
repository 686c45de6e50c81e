"""A native helper's output is judged once (native/build.py helper_stdout) for every workload
that runs one: a timeout or a non-zero exit is a TrialFailed naming the helper, its stdout
otherwise. Real processes on the host executor."""

from __future__ import annotations

from pathlib import Path

import pytest

from iolab.cgroups.executor import HostExecutor
from iolab.core.errors import TrialFailed
from iolab.core.exec import ExecRequest
from iolab.native import helper_stdout


def test_helper_stdout_judges_a_real_process(tmp_path: Path) -> None:
    ex = HostExecutor(tmp_path)
    try:
        ok = ex.run(ExecRequest(["sh", "-c", "echo '{\"a\": 1}'"], timeout_s=30))
        assert helper_stdout(ok, "iolab_x", 30) == '{"a": 1}\n'
        failed = ex.run(ExecRequest(["sh", "-c", "echo broken >&2; exit 3"], timeout_s=30))
        with pytest.raises(TrialFailed, match=r"^iolab_x failed \(exit 3\): broken$"):
            helper_stdout(failed, "iolab_x", 30)
        slow = ex.run(ExecRequest(["sleep", "30"], timeout_s=0.5))
        with pytest.raises(TrialFailed, match=r"^iolab_x timed out after 0.5s$"):
            helper_stdout(slow, "iolab_x", 0.5)
    finally:
        ex.close()
