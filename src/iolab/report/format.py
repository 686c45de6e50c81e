"""Value formatting shared by every report renderer (HTML, Markdown, charts, comparison).

Table cells (``Table.rows``) may hold:

* ``None`` → "—"; ``bool`` → "yes"/"no"; ``str`` → shown as is;
* ``int`` → exact, with thousands separators (counts must not be rounded);
* ``float`` → 3 significant digits, thousands separators;
* a mean with a confidence interval: ``{"mean": m, "lo": l, "hi": h}``,
  ``{"mean": m, "ci95": [l, h], "n": k}`` (the estimate shape of docs/results.md),
  ``{"mean": m, "ci": [l, h]}``, ``{"mean": m, "half": h}`` or a 3-tuple/list
  ``(m, l, h)`` → "123 ± 4" when the interval is symmetric, "123 [110, 140]" otherwise,
  "21.4 [10.4, ∞)" when it has no upper end (None);
* a ``Link`` → its text (a hyperlink in HTML and Markdown); a ``Tag`` → its text (a coloured label in HTML).
"""


from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any, TypeGuard

from iolab.report.model import Link, Tag

# --------------------------------------------------------------------------- numbers


def fmt_num(x: Any, sig: int = 3) -> str:
    """A number as an engineer reads it: ints exact, floats to `sig` significant digits."""
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if not isinstance(x, float):
        return str(x)
    if math.isnan(x):
        return "—"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if x == 0:
        return "0"
    rounded = float(f"{x:.{sig}g}")  # round first: 999.6 must become 1,000, not 1000
    mag = math.floor(math.log10(abs(rounded)))
    if mag >= 12 or mag < -4:
        return f"{rounded:.{sig - 1}e}"
    if mag >= sig - 1:
        return f"{int(rounded):,}"
    return f"{rounded:.{sig - 1 - mag}f}"


def fmt_end(x: float, decimals: int) -> str:
    """An interval's end in `decimals` fixed decimals, except where they would mislead: an end they
    would print as 0 (a positive ratio's lower end far below them) or one of seven digits and more
    is printed in two significant digits, so "[0.0, 14133067.2]" (which reads as if the ratio could
    be 0) is "[1.3e-06, 14,000,000]". Every printer of a ratio's interval uses it."""
    fixed = f"{x:.{decimals}f}"
    if (x != 0 and float(fixed) == 0) or abs(x) >= 1e6:
        return fmt_num(x, 2)
    return fixed


def fmt_size(n: float) -> str:
    """Byte sizes the way fio users write them: 512, 4k, 64k, 1M (1024-based)."""
    for suffix, mult in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("k", 1 << 10)):
        if abs(n) >= mult:
            v = n / mult
            return f"{v:g}{suffix}" if v == int(v) else f"{v:.3g}{suffix}"
    return f"{n:g}"


def ci_parts(value: Any) -> tuple[float, float | None, float | None] | None:
    """(mean, lo, hi) if `value` is one of the accepted mean-with-CI shapes, else None."""
    if isinstance(value, dict) and "mean" in value:
        mean = value["mean"]
        if not _is_number(mean):
            return None
        if "lo" in value or "hi" in value:
            return float(mean), _opt_float(value.get("lo")), _opt_float(value.get("hi"))
        ci = value.get("ci95", value.get("ci"))
        if isinstance(ci, (list, tuple)) and len(ci) == 2:
            return float(mean), _opt_float(ci[0]), _opt_float(ci[1])
        half = value.get("half", value.get("ci_half"))
        if _is_number(half):
            return float(mean), float(mean) - float(half), float(mean) + float(half)
        return float(mean), None, None
    if (
        isinstance(value, (list, tuple))
        and len(value) == 3
        and all(v is None or _is_number(v) for v in value)
        and value[0] is not None
    ):
        return float(value[0]), _opt_float(value[1]), _opt_float(value[2])
    return None


def fmt_ci(mean: float, lo: float | None, hi: float | None) -> str:
    """'123 ± 4' for a symmetric interval, '123 [110, 140]' for an asymmetric one, '21.4 [10.4, ∞)'
    for one without an upper end (a harmonic mean whose mean time per unit may be near 0): such
    a number must not look more precise than its neighbours. No bound at all (n = 1): the mean."""
    if hi is None:
        return fmt_num(mean) if lo is None else f"{fmt_num(mean)} [{fmt_num(float(lo))}, ∞)"
    if lo is None:
        return f"{fmt_num(mean)} (−∞, {fmt_num(float(hi))}]"
    below, above = mean - lo, hi - mean
    width = hi - lo
    if width >= 0 and abs(above - below) <= 0.05 * max(width, 1e-300):
        mean_text = fmt_num(mean)
        return f"{mean_text} ± {_fmt_half(float(max(above, below)), mean_text)}"
    return f"{fmt_num(mean)} [{fmt_num(float(lo))}, {fmt_num(float(hi))}]"


def _fmt_half(half: float, mean_text: str) -> str:
    """Half-width to 2 significant digits, but no finer than the mean is shown ('15.2 ± 0.5')."""
    text = fmt_num(half, sig=2)
    if "e" in mean_text or "e" in text:
        return text
    mean_dec = len(mean_text.split(".")[1]) if "." in mean_text else 0
    half_dec = len(text.split(".")[1]) if "." in text else 0
    if half_dec <= mean_dec:
        return text
    rounded = round(half, mean_dec)
    return fmt_num(half, sig=1) if rounded == 0 else f"{rounded:,.{mean_dec}f}"


def fmt_cell(value: Any) -> str:
    """Text of one table cell (see the module docstring for the accepted shapes)."""
    if isinstance(value, (Link, Tag)):
        return value.text
    parts = ci_parts(value)
    if parts is not None:
        return fmt_ci(*parts) + (estimate_marks(value) if isinstance(value, dict) else "")
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, default=str, sort_keys=True)
    return fmt_num(value)


def estimate_marks(est: dict[str, Any]) -> str:
    """What must stand beside an estimate's number: its values at 0 (a stall is in the estimate,
    never dropped) and the run-order checks that tripped (no 95 % is claimed for it)."""
    out = ""
    if est.get("zeros") and est.get("domain") != "count":
        out += f" ({est['zeros']} of {est.get('n', '?')} at 0)"
    if est.get("checks"):
        out += " ⚑ " + ", ".join(str(c) for c in est["checks"])
    return out


def is_numeric_cell(value: Any) -> bool:
    """Numbers (and means with CIs) are right-aligned; everything else reads left to right."""
    return (_is_number(value) and not isinstance(value, bool)) or ci_parts(value) is not None


def numeric_column(rows: list[list[Any]], c: int) -> bool:
    """Column c is numeric (right-aligned) when at least half its filled cells are numbers."""
    values = [row[c] for row in rows if c < len(row) and row[c] is not None]
    return bool(values) and sum(is_numeric_cell(v) for v in values) * 2 >= len(values)


def cell_note(cell_notes: list[list[str | None]] | None, r: int, c: int) -> str | None:
    """The note on cell (r, c) of a table (`Table.cell_notes`), None where there is none."""
    if not cell_notes or r >= len(cell_notes) or c >= len(cell_notes[r]):
        return None
    return cell_notes[r][c] or None


def _is_number(v: Any) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _opt_float(v: Any) -> float | None:
    return float(v) if _is_number(v) else None


# --------------------------------------------------------------------------- header facts


_ENV_KEYS: dict[str, tuple[str, ...]] = {
    "host": ("hostname", "host", "node"),
    "kernel": ("kernel", "kernel_release", "uname_r", "kernel_version"),
    "cpu": ("cpu", "cpu_model", "cpu_model_name", "processor"),
    "cpus": ("cpus", "cpu_count", "ncpus"),
    "accel": ("accel", "accelerator", "qemu_accel", "kvm"),
    "cgroup": ("cgroup", "cgroup_mode", "cgroup_version"),
    "fio": ("fio_version", "fio"),
    "qemu": ("qemu_version", "qemu"),
}


def env_value(env: dict[str, Any], what: str) -> str | None:
    """The first environment key that names `what`; manifests differ in spelling across versions."""
    for key in _ENV_KEYS.get(what, (what,)):
        v = env.get(key)
        if v is None or v == "" or isinstance(v, (dict, list)):
            continue
        if what == "accel" and isinstance(v, bool):
            return "kvm" if v else "tcg"
        return str(v)
    return None


def machine_facts(env: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) pairs for the one-line machine description in the header."""
    labels = {
        "host": "host",
        "kernel": "kernel",
        "cpu": "CPU",
        "cpus": "CPUs",
        "accel": "accel",
        "cgroup": "cgroup",
        "fio": "fio",
        "qemu": "QEMU",
    }
    facts = []
    for key, label in labels.items():
        v = env_value(env, key)
        if v is not None:
            facts.append((label, v))
    return facts


def is_tcg(env: dict[str, Any]) -> bool:
    """True when guests ran under software emulation: speed ratios then mean little."""
    accel = env_value(env, "accel")
    return accel is not None and "tcg" in accel.lower()


def run_date(doc: dict[str, Any]) -> str:
    """When the run happened, from whichever timestamp the document carries; else render time."""
    env = doc.get("environment") or {}
    for src in (doc, env):
        for key in ("started", "started_utc", "created", "date", "timestamp", "started_at", "ended"):
            v = src.get(key)
            if _is_number(v) and v > 0:
                return datetime.fromtimestamp(float(v), tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
            if isinstance(v, str) and v:
                return _pretty_iso(v)
    return datetime.now(tz=UTC).strftime("rendered %Y-%m-%d %H:%M UTC")


def _pretty_iso(text: str) -> str:
    """'2025-03-01T14:22:33Z' → '2025-03-01 14:22 UTC'; anything unparsable is shown as is."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return text
    if when.tzinfo is None:
        return when.strftime("%Y-%m-%d %H:%M")
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def trial_counts(doc: dict[str, Any]) -> dict[str, int]:
    """How many trials ran and how many failed: the first thing to check in a partial run.
    A document that gathers other runs (a reproduction) gives its own totals in `trial_counts`."""
    if isinstance(doc.get("trial_counts"), dict):
        return dict(doc["trial_counts"])
    trials = doc.get("trials") or []
    failed = sum(1 for t in trials if t.get("status") != "ok")
    return {"total": len(trials), "ok": len(trials) - failed, "failed": failed}


def failure_groups(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Failed trials grouped by error text, largest group first.

    A setup problem fails hundreds of trials with one message; listing it once with a
    count says more than a hundred identical lines.
    """
    groups: dict[str, list[dict[str, Any]]] = {}
    for t in trials:
        if t.get("status") != "ok":
            groups.setdefault(str(t.get("error") or "no error message"), []).append(t)
    out = []
    for error, members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        first = members[0]
        where = ", ".join(
            f"{k}={fmt_param(v, k)}" for k, v in (first.get("params") or {}).items() if not str(k).startswith("_")
        )
        out.append({"error": error, "count": len(members), "ids": [str(m.get("id", "")) for m in members],
                    "where": where})
    return out


def metric_names(trials: list[dict[str, Any]]) -> list[str]:
    """Metric names in first-seen order: the order the workload reported them in."""
    return _ordered_keys(t.get("metrics") or {} for t in trials)


def param_names(trials: list[dict[str, Any]]) -> list[str]:
    """Axis names in first-seen order, without `_target`/`_workload` (full configs, not axes)."""
    return [k for k in _ordered_keys(t.get("params") or {} for t in trials) if not k.startswith("_")]


def _ordered_keys(dicts: Any) -> list[str]:
    seen: dict[str, None] = {}
    for d in dicts:
        for k in d:
            seen.setdefault(str(k), None)
    return list(seen)


def fmt_param(value: Any, name: str = "") -> str:
    """An axis value: sizes in fio units when the axis is a block size, else plain."""
    if _is_number(value) and name.lower() in {"bs", "block_size", "blocksize", "record", "size", "buf_size"}:
        return fmt_size(value)
    if isinstance(value, float):
        return fmt_num(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str, sort_keys=True)
    return "—" if value is None else str(value)
