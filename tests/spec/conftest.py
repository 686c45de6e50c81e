"""Fixtures: `lab`, `basic_run`, `canaries` from tests/core/fixtures.py (one definition for
every folder whose tests run iolab for real)."""

from tests.core.fixtures import basic_run, canaries, lab  # noqa: F401
