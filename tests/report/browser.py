"""Open an HTML report in Debian's headless chromium and report what the page did.

Shared by any test that wants to check a report offline: `open_report_in_browser(path)`
runs on its own; `inspect_report(browser, path)` reuses a browser from the
`chromium_browser` fixture in conftest.py. Both share one chromium per process.
playwright's own browser download is never used: it cannot download here, and the
distribution's chromium is what users have.
"""

from __future__ import annotations

import atexit
import os
import shutil
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("IOLAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 900}

# Per <svg>: bounding box and how many drawn elements (paths/uses) it holds.
_SVG_PROBE = """() => Array.from(document.querySelectorAll('svg'))
  .filter(s => !s.parentElement.closest('svg'))
  .map(s => { const r = s.getBoundingClientRect();
    return {width: r.width, height: r.height, paths: s.querySelectorAll('path').length,
            uses: s.querySelectorAll('use').length,
            plotted: s.querySelectorAll(
              '[id*="line2d_"] path, [id*="PolyCollection_"] path, [id*="patch_"] path').length}; })"""


def chromium_available() -> bool:
    """True when the system chromium exists (apt-get install -y chromium provides it)."""
    return Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is not None


def launch_chromium(playwright: Any) -> Any:
    """A playwright Browser on the system chromium with networking extras switched off."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)


def screenshot_dir() -> Path | None:
    """$IOLAB_SCREENSHOT_DIR (created) when set, to collect every screenshot in one place; else None.

    Without it a screenshot lands beside its report, inside the test's own temporary
    directory, which pytest prunes: a directory of our own under /tmp outlived every run.
    """
    env = os.environ.get("IOLAB_SCREENSHOT_DIR")
    if not env:
        return None
    d = Path(env)
    d.mkdir(parents=True, exist_ok=True)
    return d


def inspect_report(browser: Any, html_path: str | Path, screenshot: str | Path | None = None,
                   expand_details: bool = False) -> dict[str, Any]:
    """Load `html_path` from file:// in a fresh page and collect what a test asserts on.

    Returns requests (every URL the page asked for), svg_count, svgs (box and drawn
    elements per chart), title, body_text, and the full-page screenshot path.
    """
    html_path = Path(html_path).resolve()
    shared = screenshot_dir()
    default = shared / f"{html_path.stem}.png" if shared else html_path.with_suffix(".png")
    shot = Path(screenshot) if screenshot else default
    context = browser.new_context(viewport=VIEWPORT)
    requests: list[str] = []
    context.on("request", lambda req: requests.append(req.url))
    page = context.new_page()
    try:
        response = page.goto(html_path.as_uri(), wait_until="load")
        if expand_details:
            page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
        svgs = page.evaluate(_SVG_PROBE)
        page.screenshot(path=str(shot), full_page=True)
        return {
            "ok": response is None or response.ok,
            "requests": requests,
            "svg_count": len(svgs),
            "svgs": svgs,
            "title": page.title(),
            "body_text": page.inner_text("body"),
            "screenshot": shot,
            "page_height": page.evaluate("() => document.documentElement.scrollHeight"),
        }
    finally:
        context.close()


_SHARED: dict[str, Any] = {}


def shared_browser() -> Any:
    """One chromium per process, started on first use.

    playwright's sync API cannot be nested (a second sync_playwright() inside a running
    one fails), so the session fixture and the stand-alone helper share this one.
    """
    if "browser" not in _SHARED:
        from playwright.sync_api import sync_playwright

        pw = sync_playwright().start()
        try:
            _SHARED["browser"] = launch_chromium(pw)
        except BaseException:
            pw.stop()
            raise
        _SHARED["pw"] = pw
        atexit.register(close_shared_browser)
    return _SHARED["browser"]


def close_shared_browser() -> None:
    """Close the shared chromium (idempotent; also registered with atexit)."""
    browser, pw = _SHARED.pop("browser", None), _SHARED.pop("pw", None)
    if browser is not None:
        browser.close()
    if pw is not None:
        pw.stop()


def open_report_in_browser(html_path: str | Path, screenshot: str | Path | None = None) -> dict[str, Any]:
    """Open `html_path` in headless chromium; returns requests, svg_count, svgs, body_text, screenshot.

    A chromium started here is stopped before returning: playwright's sync API keeps an
    asyncio loop running on this thread while it is up, and any later synchronous asyncio
    user in the same process (qemu.qmp's QEMUMonitorProtocol) would fail with "This event
    loop is already running". One already shared (the report tests' fixture) is reused.
    """
    if "browser" in _SHARED:
        return inspect_report(_SHARED["browser"], html_path, screenshot)
    try:
        return inspect_report(shared_browser(), html_path, screenshot)
    finally:
        close_shared_browser()
