"""Run many `iolab` command lines in one Python process, through the real entry point.

`python -m tests.core.cli_driver CASES.json RESULTS.json`: CASES is a JSON list of
{"argv": [...], "env": {...}}; for each, `iolab.cli.main()` runs with that argv and those
environment variables, and RESULTS gets {"exit", "stdout", "stderr", "traceback", "hang"}.
An exception that escapes main() is what a user would see as a Python traceback; a case
that does not finish within the alarm is a hang. Python's start-up (~2 s with scipy) is
paid once, so a fuzzer can afford hundreds of cases.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
import traceback
from typing import Any

CASE_TIMEOUT_S = 60  # a hang detector: generous enough for a cold `history` on a machine at load 12


class Hang(BaseException):
    """Raised by the alarm: not an Exception, so no `except Exception` in iolab swallows it."""


def _alarm(signum: int, frame: Any) -> None:
    raise Hang


def run_case(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    from iolab import cli
    from iolab.core import diskguard

    diskguard._DESTROY_ALLOWED.clear()  # process-wide state of one command must not leak into the next
    saved = dict(os.environ)
    os.environ.update(env)
    out, err = io.StringIO(), io.StringIO()
    result: dict[str, Any] = {"exit": 0, "traceback": None, "hang": False}
    sys.argv = ["iolab", *argv]
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_TIMEOUT_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli.main()
    except SystemExit as exc:
        result["exit"] = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Hang:
        result.update(exit=None, hang=True)
    except BaseException:  # noqa: BLE001 - this is exactly what the fuzzer looks for
        result.update(exit=None, traceback=traceback.format_exc())
    finally:
        signal.alarm(0)
        os.environ.clear()
        os.environ.update(saved)
    result.update(stdout=out.getvalue()[:200_000], stderr=err.getvalue()[-20_000:])
    return result


def main() -> None:
    cases_path, results_path = sys.argv[1], sys.argv[2]  # run_case replaces sys.argv
    with open(cases_path) as f:
        cases = json.load(f)
    results = [run_case(c["argv"], c.get("env", {})) for c in cases]
    with open(results_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
