"""An A/B study's verdict (analysis/ab.py) as text, JSON and report sections; also the analysis
module of a stored A/B run (`iolab report AB_RUN`: studies/builtin.py ANALYSES), which judges its
stored blocks again from their child runs."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from iolab.analysis import ab
from iolab.analysis.record import JSONObject
from iolab.report.comparison import text_table
from iolab.report.format import fmt_end
from iolab.report.model import Note, Section, Table

HEADERS = ["configuration", "metric", "blocks", "B/A [CI]", "p beyond (Holm)", "p within (Holm)", "verdict"]
EXIT_MEANING = ("exit status: 0 no regression, 1 regression, 2 input error, 3 nothing measured, 4 incomplete "
                "(B failed or stalled where A did not, too few blocks to call it a regression; a load ended early) "
                "(README)")


def incomplete(rows: list[ab.Row], load_failures: Sequence[str] = ()) -> list[str]:
    """Why no regression is not a pass (analysis/ab.py `incomplete`), with every load that ended early."""
    return [x for x in ab.incomplete(rows) if "load command ended" not in x or not load_failures] + list(load_failures)


def exit_status(rows: list[ab.Row], load_failures: Sequence[str] = ()) -> int:
    """The CLI's exit status, also the --json `exit_status`: analysis/ab.py's, and 4 when a load
    ended early even where no row could tell (nothing measured)."""
    status = ab.exit_status(rows)
    return 4 if load_failures and status in (0, 3) else status


def _p(p: float | None) -> str:
    return "—" if p is None or math.isnan(p) else f"{p:.2g}"


def ratio_text(r: ab.Row) -> str:
    if r.ratio is None:
        return "—"
    lo = "0" if r.lo is None or r.lo <= 0 else fmt_end(r.lo, 3)
    hi = "∞" if r.hi is None or math.isinf(r.hi) else fmt_end(r.hi, 3)
    return f"{r.ratio:.3f} [{lo}, {hi}]"


def table_rows(rows: list[ab.Row]) -> list[list[str]]:
    return [[r.config or "(single)", f"{r.metric} ({r.unit})" if r.unit else r.metric, *_middle(r),
             _p(r.p_holm_beyond), _p(r.p_holm_within), r.verdict] for r in rows]


def _middle(r: ab.Row) -> list[str]:
    """The blocks and B/A columns: a failure row's blocks and which side failed in how many."""
    if r.kind == "failures":
        return [str(r.extra.get("blocks", "")), f"failed: A {r.failed['A']}, B {r.failed['B']}"]
    lost = [f"{n} {k} {what}" for what, c in (("failed", r.failed), ("set aside", r.invalid)) for k in "AB"
            if (n := c.get(k, 0))]
    return [str(len(r.d)) + (f" ({', '.join(lost)})" if lost else ""), ratio_text(r)]


def failure_lines(rows: list[ab.Row]) -> list[str]:
    """Every configuration that failed somewhere, per side, whatever its row's verdict."""
    lines = [f"failures: {r.config or '(single)'}: {r.reason}" for r in rows if r.kind == "failures"]
    return lines  # built apart: returned as a list display it would read as trial flags (tests/analysis/test_flags.py)


def headline(rows: list[ab.Row], design: ab.Design, blocks: int) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    shown = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    return (f"A/B over {blocks} block(s), {len(rows)} row(s): {shown or 'nothing measured'} (sign flips across "
            f"blocks, minimum effect ±{design.min_effect:.0%}, Holm over every row, {len(design.looks)} look(s) at "
            f"{design.look_alpha:.3g} each)")


def text(rows: list[ab.Row], design: ab.Design, blocks: int) -> str:
    lines = [text_table(HEADERS, table_rows(rows))]
    lines += [f"{r.verdict}: {r.config or '(single)'} {r.metric}: {r.reason}" for r in rows
              if r.verdict != "no difference" and r.kind == "level"]
    lines += failure_lines(rows)
    lines.append(headline(rows, design, blocks))
    return "\n".join(lines)


@dataclass(frozen=True)
class AbVerdict:
    """An A/B study's finding: every configuration x metric row judged over `blocks` blocks under
    `design` (analysis/ab.py). `as_json` is what `iolab ab --json` prints and what a stored A/B run's
    findings hold under "ab" (docs/results.md); `from_json` reads that back for its report."""

    run: str
    blocks: int
    design: ab.Design
    rows: list[ab.Row]

    def as_json(self) -> JSONObject:
        design = self.design
        return {"run": self.run, "blocks": self.blocks,
                "design": dataclasses.asdict(design) | {"looks": design.looks, "look_alpha": design.look_alpha},
                "rows": [dataclasses.asdict(r) for r in self.rows], "exit_status": exit_status(self.rows),
                "test": "sign-flip permutation test of log(B/A) across blocks, beyond / within the minimum effect; "
                        "Holm over every configuration x metric; Bonferroni over the looks"}

    @classmethod
    def from_json(cls, stored: Mapping[str, Any], design: ab.Design) -> AbVerdict:
        """The finding as stored; `design` from the run's spec (the stored one is its echo)."""
        return cls(str(stored.get("run")), int(stored["blocks"]), design, [ab.Row(**r) for r in stored["rows"]])


def section(rows: list[ab.Row], design: ab.Design, blocks: int, variants: dict[str, Any]) -> Section:
    notes = [Note(f"{k}: {v.get('source')}" + (f" with {', '.join(v['overrides'])}" if v.get("overrides") else "")
                  + (f"; beside each of its blocks: `{' '.join(v['load'])}`" if v.get("load") else "")
                  + (f"; environment {' '.join(f'{k}={x}' for k, x in v['env'].items())}" if v.get("env") else ""))
             for k, v in variants.items()]
    notes += [Note(f"{r.verdict}: {r.config or '(single)'} {r.metric}: {r.reason}",
                   "warn" if r.verdict in ("regression", "undecided", "invalid") or r.kind == "failures" else "info")
              for r in rows if r.verdict != "no difference" or r.kind == "failures"]
    notes.append(Note(EXIT_MEANING))
    intro = (headline(rows, design, blocks) + ". Each block ran A and B in a random order, each as a fresh run; "
             "B/A is the geometric mean of the blocks' ratios, its interval the sign-flip test inverted at the "
             "look's level.")
    return Section("A/B verdict", [Table("B against A", HEADERS, table_rows(rows), notes=notes)], intro=intro)


# -- the analysis module of a stored A/B run ---------------------------------------------------------
def _design(spec_ab: dict[str, Any]) -> ab.Design:
    d = spec_ab.get("design") or {}
    return ab.Design(**{k: d[k] for k in ("min_blocks", "max_blocks", "step", "min_effect", "alpha") if k in d})


def analyze(doc: dict[str, Any]) -> JSONObject:
    spec_ab = (doc.get("spec") or {}).get("ab") or {}
    design = _design(spec_ab)
    kids = {c["run_id"]: c["doc"] for c in (doc.get("children") or {}).values()}
    blocks = [{k: kids[rid] | ({"invalid": b["invalid"][k]} if k in (b.get("invalid") or {}) else {})
               for k, rid in b["runs"].items() if rid in kids}
              for b in (doc.get("extra") or {}).get("blocks") or []]
    rows = ab.judge(ab.rows_of(blocks, tuple(spec_ab.get("metrics") or ())), design, True)
    return {"ab": AbVerdict(str(doc.get("run_id")), len(blocks), design, rows).as_json()}


def present(doc: dict[str, Any], findings: Mapping[str, Any]) -> tuple[list[str], list[Section]]:
    spec_ab = (doc.get("spec") or {}).get("ab") or {}
    v = AbVerdict.from_json(findings["ab"], _design(spec_ab))
    return [headline(v.rows, v.design, v.blocks)], [section(v.rows, v.design, v.blocks, spec_ab.get("variants") or {})]
