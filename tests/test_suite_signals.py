"""The suite starts iolab with the stop signals at their defaults even when it was itself started
with them ignored (tests/conftest.py): a background `bash .ci/run &` ignores SIGINT."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHILD = """
import signal, subprocess, sys
sys.path.insert(0, {repo!r})
assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # as a background job of a script starts
import tests.conftest  # what pytest does first: its import restores them
print(sorted(tests.conftest.RESTORED))
print(subprocess.run([sys.executable, "-c", "import signal; print([str(signal.getsignal(s)) for s in "
                      "(signal.SIGINT, signal.SIGTERM, signal.SIGHUP)])"], capture_output=True, text=True).stdout)
"""


def test_children_of_a_suite_started_with_stop_signals_ignored_get_them_back() -> None:
    def ignore_all() -> None:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)

    r = subprocess.run([sys.executable, "-c", CHILD.format(repo=str(REPO))], capture_output=True, text=True,
                       preexec_fn=ignore_all, timeout=60)
    assert r.returncode == 0, r.stderr
    restored, grandchild = r.stdout.splitlines()[:2]
    assert restored == "['SIGHUP', 'SIGINT', 'SIGTERM']"
    # in a new Python, SIG_DFL for SIGINT shows as Python's own KeyboardInterrupt handler
    assert "SIG_IGN" not in grandchild and "default_int_handler" in grandchild, grandchild
