"""The HTML report in a real headless chromium: loads offline, charts drawn, warnings visible."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.report import sample_doc
from tests.report.browser import inspect_report

from iolab.report.html import render_html
from iolab.report.model import Chart


def _chart_count(sections: list[Any]) -> int:
    return sum(isinstance(b, Chart) for s in sections for b in s.blocks)


def test_html_has_no_external_reference(sample_run: tuple) -> None:
    html = render_html(*sample_run)
    assert not re.search(r"https?://", html), "no URL at all, not even SVG namespaces"
    assert "<script" not in html and "<link" not in html and "@import" not in html and "@font-face" not in html
    assert html.count("<svg") == _chart_count(sample_run[1]) == sample_doc.CHART_COUNT
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids)), "ids of several inline SVGs must not collide"


def test_html_in_headless_chromium(chromium_browser: Any, sample_run: tuple, tmp_path: Path, shot_dir: Path) -> None:
    doc, sections, summary = sample_run
    path = tmp_path / "write-modes.html"
    path.write_text(render_html(doc, sections, summary), encoding="utf-8")
    shot = shot_dir / "report-write-modes.png"

    result = inspect_report(chromium_browser, path, shot)

    assert result["ok"]
    bad = [u for u in result["requests"] if not u.startswith(("file:", "data:"))]
    assert not bad, f"the report made network requests: {bad}"
    assert result["requests"][0] == path.as_uri()
    assert result["svg_count"] == _chart_count(sections)
    for svg in result["svgs"]:
        assert svg["width"] > 300 and svg["height"] > 150, svg
        assert svg["height"] < 600, f"chart too tall: {svg}"
        assert svg["plotted"] > 0 and svg["paths"] > 10, svg
    text = result["body_text"]
    assert "write-modes" in result["title"] and doc["run_id"] in result["title"]
    assert sample_doc.HEADLINE in text
    assert sample_doc.TCG_WARNING in text
    assert sample_doc.FAILED_TRIAL_ID in text
    assert shot.exists() and shot.stat().st_size > 10_000


def test_visible_elements(chromium_browser: Any, sample_run: tuple, tmp_path: Path) -> None:
    """Visibility needs the live page: title, headline, the warning next to its chart, the badge."""
    path = tmp_path / "r.html"
    path.write_text(render_html(*sample_run), encoding="utf-8")
    context = chromium_browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.goto(path.as_uri())
        assert page.locator("h1#title").is_visible()
        assert page.get_by_text(sample_doc.HEADLINE).is_visible()
        warn = page.locator(".callout.warn", has_text=sample_doc.TCG_WARNING)
        assert warn.count() == 1 and warn.is_visible()
        # the warning sits inside the chart's figure, right above the chart it qualifies
        figure = page.locator("figure.chart-block", has=warn)
        assert figure.locator("svg").count() == 1
        assert page.locator(".badge.status-partial").is_visible()
        # numbers right-aligned, cell notes as superscript markers with a tooltip
        cell = page.locator("td.num.noted").first
        assert cell.evaluate("e => getComputedStyle(e).textAlign") == "right"
        assert cell.get_attribute("title")
        assert page.locator("ol.footnotes li").count() == 2
        # the failed trial is highlighted in the trials appendix
        page.locator("#trials summary").click()
        assert page.locator("table.trials tr.failed").first.is_visible()
    finally:
        context.close()


def test_failed_run_with_standalone_helper(tmp_path: Path, shot_dir: Path) -> None:
    """`open_report_in_browser` launches its own chromium: what tests outside tests/report use."""
    import pytest
    from tests.report.browser import chromium_available, open_report_in_browser

    if not chromium_available():
        pytest.skip("chromium not installed")
    doc = sample_doc.make_doc()
    doc["status"] = "failed"
    doc["environment"]["accel"] = "kvm"
    for t in doc["trials"][3:]:
        t.update(status="failed", error="target setup failed: losetup: cannot find an unused loop device", metrics={})
    path = tmp_path / "failed.html"
    path.write_text(render_html(doc, sample_doc.make_sections()[:1], []), encoding="utf-8")

    result = open_report_in_browser(path, shot_dir / "report-failed-run.png")

    assert all(u.startswith(("file:", "data:")) for u in result["requests"])
    assert result["svg_count"] == 1
    assert "Run failed: 141 of 144 trials failed" in result["body_text"]
    assert "141 trials" in result["body_text"]  # one line per kind of failure, with a count
    assert "TCG" not in result["body_text"]
    assert Path(result["screenshot"]).exists()
