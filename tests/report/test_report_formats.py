"""Markdown, CSV and JSON renderers, and the shared number formatting."""

from __future__ import annotations

import csv
import io
import json

import pytest
from tests.report import sample_doc

from iolab.report.csv_out import render_csv
from iolab.report.format import fmt_cell, fmt_num, fmt_size
from iolab.report.markdown import render_markdown
from iolab.report.model import Chart, Note, Section, Series, Table
from iolab.report.render import render


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "—"),
        (True, "yes"),
        (10240, "10,240"),
        (14237.3, "14,200"),
        (999.6, "1,000"),
        (123.456, "123"),
        (12.345, "12.3"),
        (0.52, "0.520"),
        ({"mean": 0.52, "half": 0.016}, "0.520 ± 0.016"),
        (0.0123, "0.0123"),
        (0.0, "0"),
        (float("nan"), "—"),
        (3.2e-7, "3.20e-07"),
        ({"mean": 123.4, "lo": 119.4, "hi": 127.4}, "123 ± 4"),
        ({"mean": 123.4, "half": 4.0}, "123 ± 4"),
        ({"mean": 15.2, "half": 0.46}, "15.2 ± 0.5"),
        ({"mean": 123.0, "half": 0.04}, "123 ± 0.04"),
        ({"mean": 14237.0, "half": 312.0}, "14,200 ± 310"),
        ({"mean": 100.0, "ci": [90.0, 130.0]}, "100 [90.0, 130]"),
        ({"mean": 17.2, "ci95": [16.8, 17.6], "n": 3, "unit": "MiB/s"}, "17.2 ± 0.4"),
        ({"mean": 17.2, "ci95": [None, None], "n": 1}, "17.2"),
        # a harmonic mean's interval without an upper end is shown open, never as a bare number
        ({"mean": 21.4, "ci95": [10.44, None], "n": 8}, "21.4 [10.4, ∞)"),
        ({"mean": 0.8, "ci95": [None, 1.25], "n": 8}, "0.800 (−∞, 1.25]"),
        ((2.0, 1.5, 2.5), "2.00 ± 0.50"),
        ("virtio", "virtio"),
    ],
)
def test_cell_formatting(value: object, text: str) -> None:
    assert fmt_cell(value) == text


def test_sizes_use_fio_units() -> None:
    assert [fmt_size(v) for v in (512, 1024, 4096, 65536, 1 << 20, 1536)] == ["512", "1k", "4k", "64k", "1M", "1.5k"]
    assert fmt_num(1_234_567) == "1,234,567"  # ints are counts: never rounded


def test_markdown_has_every_part(sample_run: tuple) -> None:
    doc, sections, summary = sample_run
    md = render_markdown(doc, sections, summary)
    assert md.startswith("# write-modes\n")
    assert "**Status:** PARTIAL" in md and "kernel 6.12.12-amd64" in md and "accel tcg" in md
    assert f"- {sample_doc.HEADLINE}" in md
    assert f"> ⚠ **Caution:** {sample_doc.TCG_WARNING}" in md
    # table with right-aligned numeric columns and footnote markers
    assert "| mode | block size | MiB/s (95% CI) | syscalls | device flushes | mode took effect |" in md
    assert "|---|---:|---:|---:|---:|---|" in md
    assert "| buffered | 512 | 610 ± 18 [1] | 10,240 | 1 | yes |" in md
    assert "[1] page cache absorbed 97 % of writes before end_fsync" in md
    # the line chart as a data table: 12 block sizes, 4 series
    assert "| block size (bytes) | buffered | o_sync | o_direct | mmap |" in md
    for label in ("512", "4k", "64k", "1M"):
        assert f"\n| {label} | " in md
    assert "Reference: device max 520 MiB/s = 520" in md
    # failed trial visible in the summary and in the trials table
    assert sample_doc.FAILED_TRIAL_ID in md and "**FAILED**" in md
    assert sample_doc.FAILED_ERROR in md
    assert "## Environment / manifest" in md and '"fio_version": "fio-3.38"' in md
    assert "## Study spec (builtin:write-modes)" in md
    assert "_target" not in md.split("## Environment")[0], "full configs stay out of the tables"
    assert "**Date:** 2025-03-01 14:22 UTC" in md


def test_markdown_escapes_pipes() -> None:
    doc = {"run_id": "r", "study": "s", "status": "complete", "environment": {}, "trials": []}
    table = Table("t", ["a|b", "n"], [["x|y", 1.5]])
    md = render_markdown(doc, [Section("S", [table])], [])
    assert "| a\\|b | n |" in md and "| x\\|y | 1.50 |" in md


def test_csv_one_row_per_trial(sample_run: tuple) -> None:
    doc = sample_run[0]
    text = render_csv(doc)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == len(doc["trials"]) == 144
    header = text.splitlines()[0].split(",")
    assert header[:7] == ["run_id", "study", "trial_id", "repetition", "status", "error", "flags"]
    assert header[7:] == [
        "param.bs", "param.mode",
        "metric.device_flushes", "metric.elapsed_s", "metric.syscalls", "metric.throughput_mib_s",
        "param._target", "param._workload",
    ]
    failed = [r for r in rows if r["status"] == "failed"]
    assert len(failed) == 1
    assert failed[0]["trial_id"] == sample_doc.FAILED_TRIAL_ID
    assert failed[0]["error"] == sample_doc.FAILED_ERROR
    assert failed[0]["metric.throughput_mib_s"] == ""
    first = rows[0]
    assert first["run_id"] == doc["run_id"] and first["study"] == "write-modes"
    assert first["param.bs"] == "512" and first["param.mode"] == "buffered"
    assert float(first["metric.throughput_mib_s"]) == doc["trials"][0]["metrics"]["throughput_mib_s"]  # full precision
    assert first["flags"] == "reads_hit_page_cache: 97% of bytes"
    assert json.loads(first["param._workload"])["kind"] == "writemode"


def test_csv_column_order_is_stable() -> None:
    base = {"run_id": "r", "study": "s", "status": "complete", "environment": {}}
    a = {**base, "trials": [{"id": "1", "params": {"z": 1, "a": 2}, "repetition": 0, "status": "ok", "error": None,
                             "metrics": {"y": 1.0, "b": 2.0}, "probes": {}}]}
    b = {**base, "trials": [{"id": "1", "params": {"a": 2, "z": 1}, "repetition": 0, "status": "ok", "error": None,
                             "metrics": {"b": 2.0, "y": 1.0}, "probes": {}}]}
    assert render_csv(a) == render_csv(b)


def test_json_round_trips(sample_run: tuple) -> None:
    doc, sections, summary = sample_run
    text = render(doc, sections, summary, "json")
    assert json.loads(text) == doc
    assert text == json.dumps(doc, indent=2, sort_keys=True)


def test_dispatch_and_unknown_format(sample_run: tuple) -> None:
    doc, sections, summary = sample_run
    assert render(doc, sections, summary, "md") == render(doc, sections, summary, "markdown")
    assert render(doc, sections, summary, "csv") == render_csv(doc)
    assert render(doc, sections, summary, "html").startswith("<!DOCTYPE html>")
    with pytest.raises(ValueError, match="html, md, csv, json"):
        render(doc, sections, summary, "pdf")


def test_failed_run_without_trials_renders() -> None:
    doc = {"run_id": "r0", "study": "cgroup-weights", "status": "failed", "environment": {}, "trials": [],
           "findings": {}}
    chart = Chart("empty", "line", "x", "y", [Series("s", [], [])])
    sections = [Section("Nothing", [Note("no trial finished", "warn"), chart])]
    html = render(doc, sections, [], "html")
    assert "status-failed" in html and "Run failed" in html
    assert html.count("<svg") == 1
    md = render(doc, sections, [], "md")
    assert "**Status:** FAILED" in md and "**Trials:** 0 of 0 ok" in md
    assert render_csv(doc).strip() == "run_id,study,trial_id,repetition,status,error,flags"


def test_html_is_deterministic(sample_run: tuple) -> None:
    """Same run, same bytes: reports can be diffed and cached."""
    assert render(*sample_run, "html") == render(*sample_run, "html")


def test_every_format_is_one_exporter_named_in_one_table() -> None:
    """render() has no branch per format: each name in EXPORTERS loads one Exporter of that
    name, aliases reach the same one, and an unknown name is refused with the known ones."""
    from iolab.report.exporter import Exporter
    from iolab.report.render import EXPORTERS, FORMATS, exporter

    assert FORMATS == tuple(EXPORTERS) == ("html", "md", "csv", "json")
    for key in FORMATS:
        made = exporter(key)
        assert isinstance(made, Exporter) and made.name == key
    assert exporter("Markdown").name == "md" and exporter("htm").name == "html"
    with pytest.raises(ValueError, match="unknown report format 'pdf': expected one of html, md, csv, json"):
        exporter("pdf")


def test_csv_and_json_never_import_matplotlib() -> None:
    """The exporters are loaded by name when asked for: a CSV or JSON export in a fresh
    interpreter leaves matplotlib (the HTML and Markdown charts) unimported."""
    import subprocess
    import sys

    code = ("import sys\nfrom iolab.report.render import render\n"
            "doc = {'run_id': 'r', 'study': 's', 'trials': []}\n"
            "render(doc, [], [], 'csv'); render(doc, [], [], 'json')\n"
            "print('matplotlib' in sys.modules, 'iolab.report.html' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_html_and_markdown_headers_agree_on_a_run_without_an_id() -> None:
    """The header and trials appendix are one view (report/run_view.py): a run with no id, an
    axis value missing and a flag reads the same in both formats (Markdown printed `None`)."""
    from iolab.report.html import build_context

    doc = sample_doc.make_doc()
    doc["run_id"] = None
    doc["trials"][0]["flags"] = ["not_prefilled: the file was new"]
    doc["trials"][0]["params"]["bs"] = None
    md = render_markdown(doc, [], [])
    ctx = build_context(doc, [], [])
    assert ctx["run_id"] == "—" and "**Run:** `—`" in md
    row = ctx["trials"].rows[0]
    assert row.params[ctx["trials"].params.index("bs")] == "—"
    assert [(f.name, f.text) for f in row.flags] == [("not_prefilled", "not_prefilled: the file was new")]
    assert f"| `{row.id}` |" in md and "not_prefilled: the file was new" in md
