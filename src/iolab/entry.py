"""The `iolab` command's entry point: a stop signal is a clean exit from the first instruction on.

Importing the command (click, rich, pydantic, numpy, ...) takes a few hundred milliseconds. A
Ctrl-C, SIGTERM or SIGHUP in that time would end in a Python traceback (SIGINT) or a bare death
(the others); nothing exists yet to clean up, so iolab says "interrupted" and exits 130, as it
does everywhere else, straight from the signal handler (core/signals.py: a KeyboardInterrupt
raised inside a compiled extension's import can come out as a Rust panic instead). This module
imports nothing heavy before the handlers are in place.
"""

from __future__ import annotations

from iolab.core.signals import exit_on_stop_signals_while_starting


def main() -> None:
    exit_on_stop_signals_while_starting()  # a signal already pending runs the handler installed now
    from iolab.cli import main as command
    command()  # which registers the studies, then installs the handlers a run cleans up on


if __name__ == "__main__":
    main()
