"""The `iolab` command's entry point: a stop signal is a clean exit from the first instruction on.

Importing the command (click, rich, pydantic, numpy, ...) takes a few hundred milliseconds. A
Ctrl-C, SIGTERM or SIGHUP in that time would end in a Python traceback (SIGINT) or a bare death
(the others); nothing exists yet to clean up, so iolab says "interrupted" and exits 130, as it
does everywhere else. This module imports nothing heavy before the handlers are in place.
"""

from __future__ import annotations

import sys

from iolab.core.signals import interrupt_on_stop_signals


def main() -> None:
    interrupt_on_stop_signals()
    try:
        from iolab.cli import main as command
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    command()


if __name__ == "__main__":
    main()
