"""Fixtures for the core tests: `lab`, `basic_run`, `canaries` (tests/core/fixtures.py,
shared with every folder whose tests run iolab for real; helpers live in tests/core/helpers.py)."""

from tests.core.fixtures import basic_run, canaries, lab  # noqa: F401
