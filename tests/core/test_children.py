"""A child iolab starts never outlives the step that started it, whatever instant a stop signal
chooses (core/children.py). Each case runs a small Python program with iolab's stop handlers
installed, sends it SIGINT inside the window, and then waits to see whether the child (or a
process it started) still writes its canary file. The same program with plain `subprocess`
runs first: it must leave the canary written, or the case would not show that the window was hit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CANARY_AFTER_S = 1.0  # the child writes its canary this long after it started
SIGNAL_AT_S = 0.4  # inside the window: the fork-to-exec pause, or the wait for the child

# the window between fork and exec, held open by a pause in the child before it execs: a
# SIGINT then is handled in the parent inside Popen.__init__ (it waits on the exec pipe)
_BEFORE_EXEC = "preexec_fn=lambda: time.sleep(0.8)"
# a grandchild in the background: subprocess.run kills the child alone, and does not reap it
_GRANDCHILD = ""

PROGRAM = """
import subprocess, sys, time
from iolab.core import children, signals
signals.interrupt_on_stop_signals()
canary, how = sys.argv[1], sys.argv[2]
argv = ["sh", "-c", "(sleep {after}; echo late > " + canary + ") & wait"]
cases = {{
    "subprocess.Popen": lambda: subprocess.Popen(argv, {extra}).wait(),
    "children.start": lambda: children.start(argv, start_new_session=True, {extra}).wait(),
    "subprocess.run": lambda: subprocess.run(argv, capture_output=True, {extra}),
    "children.run": lambda: children.run(argv, capture_output=True, {extra}),
}}
print("ready", flush=True)
try:
    cases[how]()
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


def _run_case(tmp_path: Path, how: str, extra: str) -> tuple[bool, str]:
    """(whether the canary was written after the interrupted program ended, its output)."""
    canary = tmp_path / f"canary-{how}-{bool(extra)}"
    script = tmp_path / "program.py"
    script.write_text(PROGRAM.format(after=CANARY_AFTER_S, extra=extra))
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    proc = subprocess.Popen([sys.executable, str(script), str(canary), how], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(SIGNAL_AT_S)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        # the program has ended: anything it started that is still alive writes the canary now
        time.sleep(CANARY_AFTER_S + 1.0)
        return canary.exists(), f"exit {proc.returncode}\n{out}{err}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # a stray of the plain-subprocess cases
        except ProcessLookupError:
            pass


@pytest.mark.parametrize(("plain", "ours", "extra"), [
    ("subprocess.Popen", "children.start", _BEFORE_EXEC),
    ("subprocess.run", "children.run", _GRANDCHILD),
], ids=["stop-between-fork-and-exec", "stop-while-waiting-with-a-grandchild"])
def test_a_stop_signal_leaves_no_child_running(tmp_path: Path, plain: str, ours: str, extra: str) -> None:
    written, output = _run_case(tmp_path, plain, extra)
    assert written, f"the window was not hit: plain {plain} left nothing running either\n{output}"
    written, output = _run_case(tmp_path, ours, extra)
    assert "interrupted" in output and "exit 130" in output, output
    assert not written, f"{ours}: a child outlived the interrupted step and wrote its canary\n{output}"


def test_run_returns_what_subprocess_run_returns(tmp_path: Path) -> None:
    from iolab.core import children

    done = children.run(["sh", "-c", "cat; echo err >&2; exit 3"], input="in\n", capture_output=True, text=True,
                        cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (3, "in\n", "err\n")
    with pytest.raises(subprocess.CalledProcessError):
        children.run(["false"], check=True)
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        children.run(["sh", "-c", "sleep 30 & wait"], timeout=0.5, capture_output=True)
    assert time.monotonic() - t0 < 10  # the grandchild holding the pipes did not keep it waiting
