"""Fixtures for report tests: one headless chromium per test module, sample run documents."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:  # lets any test do `from tests.report.browser import ...`
    sys.path.insert(0, str(_ROOT))

from tests.report import sample_doc  # noqa: E402
from tests.report.browser import chromium_available, close_shared_browser, screenshot_dir, shared_browser  # noqa: E402


@pytest.fixture(scope="module")
def chromium_browser() -> Iterator[Any]:
    """A playwright Browser on /usr/bin/chromium; skips when chromium or playwright is missing.

    Module scope, not session: while playwright's sync API is up, an asyncio loop runs on
    the main thread and every later in-process QMP session (tests/vm) would fail.
    """
    if not chromium_available():
        pytest.skip("chromium not installed (apt-get install -y chromium)")
    pytest.importorskip("playwright.sync_api")
    try:
        yield shared_browser()
    finally:
        close_shared_browser()


@pytest.fixture(scope="session")
def shot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """$IOLAB_SCREENSHOT_DIR, else a directory under pytest's own (pruned) temporary root."""
    return screenshot_dir() or tmp_path_factory.mktemp("screenshots")


@pytest.fixture()
def sample_run() -> tuple[dict[str, Any], list[Any], list[str]]:
    """(doc, sections, summary) of a realistic partial write-modes run."""
    return sample_doc.make_doc(), sample_doc.make_sections(), sample_doc.make_summary()
