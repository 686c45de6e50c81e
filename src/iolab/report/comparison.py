"""The comparison of two runs (analysis/compare.py) as report blocks and as terminal text."""

from __future__ import annotations

from typing import Any

from iolab.report.format import fmt_cell, fmt_num
from iolab.report.model import Note, Section, Table


def ratio_text(row: dict[str, Any]) -> str:
    if row["ratio"] is None:
        return "—"
    lo, hi = row["ratio_ci95"]
    return f"{row['ratio']:.3f} [{_bound(lo, '0')}, {_bound(hi, '∞')}{')' if hi is None else ']'}"


def _bound(x: float | None, missing: str) -> str:
    return missing if x is None else f"{x:.3f}"


def p_text(row: dict[str, Any]) -> str:
    return "—" if row["p_holm"] is None else f"{row['p_holm']:.2g}"


def headline(result: dict[str, Any]) -> str:
    counts = ", ".join(f"{n} {v}" for v, n in result["counts"].items() if n)
    noise = result.get("noise") or {}
    levels = ("run-to-run noise from the store" if noise.get("rows_from_store") and not noise.get("rows_on_floor")
              else "two runs only: run-to-run noise at the default floor" if noise.get("rows_on_floor")
              and not noise.get("rows_from_store") else "run-to-run noise from the store or the floor")
    return (f"{len(result['rows'])} comparison(s) of {result['run_b']} against {result['run_a']}: {counts or 'none'} "
            f"({levels}; Holm over all rows, threshold ±{result['threshold']:.0%})")


def differences_text(result: dict[str, Any]) -> str:
    """Every recorded difference between the runs, one line each, under a heading."""
    if not result["warnings"]:
        return "recorded differences between A and B: none (machine, versions, governor, autogroup, load flags agree)"
    return "\n".join(["recorded differences between A and B (not like-for-like):",
                      *(f"  - {w}" for w in result["warnings"])])


def estimate_text(e: dict[str, Any]) -> str:
    """'123 ± 4 (n=3)'; an estimate without a mean (no finite value) as '— (n=0)'."""
    value = fmt_cell(e) if e.get("mean") is not None else "—"
    return f"{value} (n={e.get('n', 0)})"


def a_text(row: dict[str, Any]) -> str:
    """A's estimate, and the level of A's window when B is judged against several runs like A."""
    w = row.get("a_window")
    text = estimate_text(row["a"])
    return f"{text}; level of {w['runs']} runs {fmt_num(w['level'])}" if w else text


def noise_text(row: dict[str, Any]) -> str:
    """The run-level SD the row was judged with and where it came from: 'store 2.1% (df 11)',
    'floor 3.0%', or '—' for rows without a test."""
    n = row.get("noise") or {}
    if n.get("source") == "store" and n.get("tau") is not None:
        return f"store {n['tau']:.1%} (df {n['df']:.0f})"
    if n.get("source") == "floor":
        return f"floor {n['tau']:.1%}"
    return n.get("source") or "—"


def table_rows(result: dict[str, Any]) -> list[list[str]]:
    """configuration, metric (unit), A, B, B/A [95% CI], run SD, p (Holm), verdict: the shared text columns."""
    return [[r["config"], f"{r['metric']} ({r['unit']})", a_text(r), estimate_text(r["b"]),
             ratio_text(r), noise_text(r), p_text(r), r["verdict"]] for r in result["rows"]]


HEADERS = ["configuration", "metric", "A", "B", "B/A [95% CI]", "run SD", "p (Holm)", "verdict"]


def section(result: dict[str, Any]) -> Section:
    """The report's 'Comparison' section: warnings first, then every row with its reason."""
    notes = [Note(f"Not like-for-like: {w}", "warn") for w in result["warnings"]]
    noise = result.get("noise") or {}
    if noise.get("message"):
        notes.append(Note("Noise: " + noise["message"], "warn" if noise.get("rows_on_floor") else "info"))
    if result["only_a"]:
        notes.append(Note(f"Only in A ({result['run_a']}): " + "; ".join(result["only_a"]), "warn"))
    if result["only_b"]:
        notes.append(Note(f"Only in B ({result['run_b']}): " + "; ".join(result["only_b"]), "warn"))
    if result["skipped_metrics"]:
        notes.append(Note("Not compared (no better direction declared): " + ", ".join(result["skipped_metrics"])))
    # the page's table stays narrow enough to show the verdict: A is A's level (its window's, when B
    # is judged against several runs like A, with A's own run as the cell's footnote), p (Holm)
    # rides with the verdict's reason
    rows = [[r["config"], f"{r['metric']} ({r['unit']})", r["verdict"], ratio_text(r), _a_cell(r),
             estimate_text(r["b"]), noise_text(r)] for r in result["rows"]]
    cell_notes = [[None, None, f"{r['reason']} (p Holm {p_text(r)})" if r["verdict"] != "no difference" else None,
                   None, _a_note(r), None, None] for r in result["rows"]]
    intro = (headline(result) + ". B is judged as a new run against A's level (A and the runs like A before it) "
             "with two levels of noise: its repetitions, and how far whole runs move (run SD: from the store's "
             "earlier runs of the configuration, else the default floor). p (Holm) is the p-value of a change "
             "beyond the threshold, adjusted over every row; a verdict other than 'no difference' needs it below "
             "0.05, i.e. significance after Holm's correction AND a change beyond the threshold; the metric's "
             "declared direction decides improvement or regression.")
    return Section("Comparison", [Table(f"B = {result['run_b']} against A = {result['run_a']}", PAGE_HEADERS, rows,
                                        notes=notes, cell_notes=cell_notes)], intro=intro)


PAGE_HEADERS = ["configuration", "metric", "verdict", "B/A [95% CI]", "A (level)", "B", "run SD"]


def _a_cell(row: dict[str, Any]) -> str:
    w = row.get("a_window")
    return f"{fmt_num(w['level'])} ({w['runs']} runs)" if w else estimate_text(row["a"])


def _a_note(row: dict[str, Any]) -> str | None:
    w = row.get("a_window")
    if not w:
        return None
    return (f"A's own run: {estimate_text(row['a'])}; B is judged against the level of A and the {w['runs'] - 1} "
            f"runs like A before it ({', '.join(w['ids'])})")


def text_table(headers: list[str], rows: list[list[Any]]) -> str:
    """Plain aligned columns: never truncated or wrapped by a terminal library, so ids and
    numbers can be copied from a pipe as well as from a terminal of any width."""
    cells = [[str(h) for h in headers]] + [[c if isinstance(c, str) else fmt_num(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
